"""The survivors of the race scored again on windows it never saw, and the recommendation.

Confirmation is on the evaluation pool (documents no race or tuner scored), at the serving length
N on the objective, the needles and retrieval by generation (passkey prompts the race never saw,
answered by greedy decoding), at a longer held-out length, at the short lengths (all-token
perplexity: the cost below the trained length) and on a second text; every spec paired against
"no change" on the same windows or prompts, against YaRN's default (its own m) and against the
race's pick. The recommendation is the race's pick that the engine carries, kept only when it
beats "no change" on the objective at N on the evaluation pool and retrieves no fewer passkeys
than "no change"; otherwise the report says plainly that nothing beat the baseline. Its
:func:`headline` says what it gains at N, what it costs below L0 and what it retrieves against no
change and YaRN's default, each with its interval, and where another spec is better on an axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..evaluate.score import NotStored
from ..evaluate.task_base import get_task
from ..ops.spec import TemperatureSpec
from .candidates import BASELINE, BASELINE_KEY, Candidate, by_key
from .carry import computes_as_meant
from .race import (
    MULTIKEY_TASK,
    PLAIN,
    RETRIEVAL_METRIC,
    RETRIEVAL_TASK,
    RETRIEVAL_TASKS,
    SHORT_METRIC,
    SHORT_TASK,
    Entry,
    RaceResult,
    objective_label,
)
from .records.answers import (
    BASELINE_HELD,
    RECOMMENDED,
    TRADE_OFF,
    UNDECIDED,
    Axis,
    BetterElsewhere,
    Cost,
    CostAllowed,
    EngineAdvice,
    Headline,
    Status,
    TradeOff,
    TradeOffPick,
    routes,
)  # fmt: skip
from .records.comparisons import Against, Cell, CheckRow, Confirmation, Paired

# score(specs, task, length, text) -> metrics per spec (the evaluation pool, or the second text)
Confirmer = Callable[[Sequence[TemperatureSpec], str, int, str], list[dict[str, Any]]]


@dataclass(frozen=True)
class Check:
    """One confirmation: a task's metric at a length on a text."""

    label: str
    task: str
    metric: str
    length: int
    text: str  # "evaluation" or "second"


RETRIEVAL_LABEL = "passkeys found"
MULTIKEY_LABEL = "keys found"  # k keys per prefilled haystack, answered by generation
RETRIEVAL_LABELS = {RETRIEVAL_TASK: RETRIEVAL_LABEL, MULTIKEY_TASK: MULTIKEY_LABEL}
COST_LABEL = "cost at {n}: perplexity ratio"


def checks_for(
    objective: str,
    length: int,
    held_out: Sequence[int],
    shorts: Sequence[int],
    needles: bool,
    second: bool,
    retrieval: str | None = None,
):
    """Every confirmation, the objective at N first; retrieval by generation at N second (on the
    task ``retrieval``: passkey prompts or multikey haystacks; None: no retrieval check)."""
    metric, plain = get_task(objective).objective, objective_label(objective)
    out = [Check(f"{plain} at {length}", objective, metric, length, "evaluation")]
    if retrieval:
        label = RETRIEVAL_LABELS[retrieval]
        out.append(Check(f"{label} at {length}", retrieval, RETRIEVAL_METRIC, length, "evaluation"))
    if needles and objective != "needles":
        out.append(Check(f"{PLAIN['needles']} at {length}", "needles", "logp", length, "evaluation"))
    out += [Check(f"{plain} at {n} (held out)", objective, metric, n, "evaluation") for n in held_out]
    out += [Check(COST_LABEL.format(n=n), SHORT_TASK, SHORT_METRIC, n, "evaluation") for n in shorts]
    if second:
        out.append(Check(f"{plain} at {length}, second text", objective, metric, length, "second"))
    return out


def _paired(task: Any, a: dict, b: dict, metric: str) -> Paired | None:
    ci = task.paired(a, b, metric)
    return None if ci is None else Paired.of(ci, task.verdict(ci, metric))


def confirm(
    specs: dict[str, TemperatureSpec],
    checks: Sequence[Check],
    scorer: Confirmer,
    against: dict[str, str] | None = None,
    default: str | None = None,
) -> Confirmation:
    """A :class:`~.records.comparisons.CheckRow` per check: each spec's :class:`~.records.comparisons.Cell`,
    paired against "no change", those named in ``against`` also against their reference (YaRN with a
    temperature against YaRN at m = 1: what the temperature adds), every spec against ``default``
    (YaRN's own default) and, in ``vs``, against every other confirmed spec (whichever an engine
    picks, the report reads who beats it there)."""
    against = against or {}
    names = list(specs)
    rows: dict[str, CheckRow] = {}
    for c in checks:
        task = get_task(c.task)
        try:
            results = dict(zip(names, scorer([specs[n] for n in names], c.task, c.length, c.text), strict=True))
        except NotStored as exc:  # advise --status while the confirmation runs: a cell, not a path
            rows[c.label] = CheckRow(error=exc.short)
            continue
        except ValueError as exc:  # e.g. no key tokens in the second text's windows: said, not fatal
            rows[c.label] = CheckRow(error=str(exc))
            continue
        rows[c.label] = CheckRow({n: _cells(task, c.metric, results, n, against.get(n), default) for n in names})
    return Confirmation(rows)


def _cells(task: Any, metric: str, results: dict[str, Any], n: str, ref: str | None, default: str | None) -> Cell:
    """One spec's cells on one check: its value and its paired comparisons."""

    def vs(other: str) -> Paired | None:
        return _paired(task, results[n], results[other], metric)

    return Cell(
        task.describe(results[n], metric),
        None if n == BASELINE else vs(BASELINE),
        Against(ref, vs(ref)) if ref is not None and ref in results else None,
        Against(default, vs(default)) if default is not None and default in results and n != default else None,
        {r: vs(r) for r in results if r != n},
    )


def on_yarn(race: RaceResult, reference: str = "yarn") -> list[str]:
    """The keys of the race's candidates with the RoPE of the one keyed ``reference`` (YaRN at
    m = 1): it, YaRN with its own m, with log-n, with a tuned m; each temperature is paired against
    the reference (what it adds) whatever its name says. Empty when the race has no such reference."""
    ref = by_key(race.entries, reference)
    rope = ref.candidate.spec.rope if ref is not None else None
    return [e.key for e in race.entries if rope and e.candidate.spec.rope == rope]


def to_confirm(race: RaceResult, extra: Sequence[str], most: int = 4) -> list[Entry]:
    """The survivors (at most ``most``, the race's order) and the references keyed in ``extra``
    (YaRN with and without a temperature: what the temperature adds), "no change" first."""
    keyed = {e.key: e for e in race.entries}
    picked = [keyed[BASELINE_KEY], *[e for e in race.survivors if e.key != BASELINE_KEY][:most]]
    return picked + [keyed[k] for k in extra if k in keyed and keyed[k] not in picked]


def pick(race: RaceResult, engine: str) -> tuple[Entry | None, str]:
    """The race's choice that ``engine`` carries, and why it is the one: the winner of a decided
    race, the simplest of tied survivors; the candidate that stayed longest when the engine
    carries none of them; None when the race is undecided."""
    if race.status == "undecided":
        return None, "the budget ran out before the race told the survivors apart"
    carried = [e for e in race.survivors if computes_as_meant(e.candidate, engine)]
    if race.status == "decided" and carried:
        return carried[0], "the only candidate left in the race"
    if carried:
        return carried[0], "the simplest of the survivors no interval told apart"
    rest = [e for e in race.entries if computes_as_meant(e.candidate, engine)]
    if not rest:  # every engine carries "no change": an engine name that is not one
        raise ValueError(
            f"engine={engine!r} computes none of the race's {len(race.entries)} candidates as meant, not even no "
            "change: expected one of the engines advise recommends for (transformers, llama.cpp, vllm)"
        )
    best = max(rest, key=lambda e: e.left_after or 0)
    return best, f"{engine} carries none of the survivors; of the candidates it carries, this one stayed longest"


def holds(confirmed: Confirmation, first: Check, name: str, retrieval: Check | None = None) -> tuple[bool, str]:
    """Whether ``name`` beats "no change" on the first check (the objective at N, evaluation pool)
    and, with ``retrieval``, finds no fewer passkeys than "no change" (distinguishably)."""
    if name == BASELINE:
        return True, "no change: nothing to hold"
    row = confirmed.row(first.label)
    if row.error is not None:
        return False, f"not confirmed: {row.error}"
    vs = row.cells[name].vs_no_change
    if vs is None:
        return False, "not confirmed: no paired interval (fewer than 2 windows)"
    said = (
        f"{first.label} on the evaluation pool: {vs.value:.4g} [{vs.low:.4g}, {vs.high:.4g}] against "
        f"no change, {vs.verdict}"
    )
    found = _vs_no_change(confirmed, retrieval, name)
    if found and found.worse:
        return False, f"{said}; but it finds fewer passkeys than no change: {found.signed()}"
    return vs.better, said


def _cell(confirmed: Confirmation, check: Check | None, name: str) -> Cell | None:
    """``name``'s cell on ``check``; None where there is none (no check, a failed one, not confirmed)."""
    return confirmed.cell(check.label if check else None, name)


def _vs_no_change(confirmed: Confirmation, check: Check | None, name: str) -> Paired | None:
    cell = _cell(confirmed, check, name)
    return None if cell is None else cell.vs_no_change


def _vs_default(confirmed: Confirmation, check: Check | None, name: str) -> Against | None:
    cell = _cell(confirmed, check, name)
    return None if cell is None else cell.vs_default


def decide(race: RaceResult, confirmed: Confirmation, axes: Sequence[Check], engine: str) -> tuple[Entry | None, str]:
    """The race's survivor to recommend: the first (simplest) that ``engine`` carries and that no
    other survivor beats distinguishably on any of ``axes`` (the objective and retrieval at N) on
    the evaluation pool; the race's own pick where every survivor is beaten somewhere."""
    chosen, why = pick(race, engine)
    carried = [e for e in race.survivors if computes_as_meant(e.candidate, engine)]
    if chosen is None or len(carried) < 2:
        return chosen, why
    kept = {e.name for e in race.survivors}
    for e in carried:
        if not [n for _, n in beaten_by(confirmed, axes, e.name) if n in kept]:
            return e, why if e is chosen else "the simplest survivor no other survivor beats on an axis at N"
    return chosen, why + "; every survivor is beaten by another on some axis (see where the axes disagree)"


def beaten_by(confirmed: Confirmation, axes: Sequence[Check], name: str) -> list[tuple[str, str]]:
    """``(check label, spec)`` for each confirmed spec distinguishably better than ``name`` on an axis."""
    return [(c.label, n) for c in axes for n, _ in _better_than(confirmed.row(c.label), name)]


def decision_axes(checks: Sequence[Check]) -> list[Check]:
    """The axes a candidate is judged on at N: the objective and retrieval (the cost has its limit)."""
    return [c for c in checks if c.length == checks[0].length and c.text == "evaluation" and c.task != SHORT_TASK]


def _retrieval(checks: Sequence[Check]) -> Check | None:
    return next((c for c in checks if c.task in RETRIEVAL_TASKS), None)


def recommendation(
    race: RaceResult, confirmed: Confirmation, checks: Sequence[Check], engine: str, max_short_cost: float = 0.01
) -> EngineAdvice:
    """What to run: the decided survivor when it holds on the evaluation pool, or no change said
    plainly when nothing beats it, either kept only when its own confirmation does not refute it
    (:func:`objections`: no change refuted too, when it finds fewer keys than YaRN's default); else
    the simplest confirmed spec ``engine`` carries that holds unrefuted; else the trade-off, said
    with numbers; with its :func:`headline`."""
    first, retrieval = checks[0], _retrieval(checks)
    axes = [c for c in decision_axes(checks) if c.task == first.task or c.task in RETRIEVAL_TASKS]
    chosen, why = decide(race, confirmed, axes, engine)
    alternative = if_cost_allowed(confirmed, checks, None if chosen is None else chosen.name)
    if chosen is None:
        still = tuple(e.name for e in race.survivors)
        return EngineAdvice(None, UNDECIDED, why, still_in=still, if_cost_allowed=alternative)
    rec = _recommend(race, confirmed, first, chosen, why, retrieval)
    answer = chosen.name if rec.status == RECOMMENDED else BASELINE  # no change when nothing held
    if said := objections(confirmed, checks, answer, max_short_cost):
        rec = _unrefuted(race, confirmed, checks, engine, max_short_cost, (answer, said))
    if rec.name is None:
        return replace(rec, if_cost_allowed=alternative)
    return replace(rec, if_cost_allowed=alternative, headline=headline(confirmed, checks, rec.name))


def objections(confirmed: Confirmation, checks: Sequence[Check], name: str, max_short_cost: float) -> list[str]:
    """What ``name``'s own confirmation holds against it: fewer keys found than YaRN's default
    (distinguishably), a cost below L0 over ``1 + max_short_cost`` for certain (the interval wholly above)."""
    out = []
    retrieval = _retrieval(checks)
    found = _vs_default(confirmed, retrieval, name)
    if found and found.paired and found.paired.worse:
        out.append(f"it finds fewer keys than YaRN's default ({found.against}): {found.paired.signed()}")
    for c in (c for c in checks if c.task == SHORT_TASK):
        cost = _vs_no_change(confirmed, c, name)
        if cost and cost.low > 1 + max_short_cost:
            out.append(f"it costs {cost.fixed()} of no change at {c.length}, over the {max_short_cost:.0%} limit")
    return out


def _unrefuted(
    race: RaceResult, confirmed: Confirmation, checks: Sequence[Check], engine: str, limit: float, refuted
) -> EngineAdvice:
    """The simplest confirmed spec ``engine`` carries that holds and meets both limits, in place of
    the ``refuted`` pick (its name and objections); else the trade-off (status ``trade-off``)."""
    first, retrieval = checks[0], _retrieval(checks)
    name, said = refuted
    held = [
        e
        for e in race.entries
        if e.key != BASELINE_KEY and e.name in confirmed.row(first.label).cells
        and computes_as_meant(e.candidate, engine) and holds(confirmed, first, e.name, retrieval)[0]
    ]  # fmt: skip
    why = f"{name!r}, the race's answer, is refuted by its own confirmation: {'; '.join(said)}"
    for e in held:
        if not objections(confirmed, checks, e.name, limit):
            evidence = holds(confirmed, first, e.name, retrieval)[1]
            better = f"{why}; the simplest confirmed spec {engine} carries that holds and meets both"
            return _rec(e.candidate, RECOMMENDED, better, evidence)
    return trade_off(confirmed, checks, engine, limit, [e.name for e in held], why)


def trade_off(
    confirmed: Confirmation, checks: Sequence[Check], engine: str, limit: float, names: list[str], why: str
) -> EngineAdvice:
    """Nothing ``engine`` carries meets both limits: the best retrieval at its cost and the lowest cost
    at its retrieval (among ``names``, the confirmed specs it carries that beat no change), in one sentence."""
    retrieval = _retrieval(checks)
    rows = [TradeOffPick(n, _vs_default(confirmed, retrieval, n), worst_cost(confirmed, checks, n)) for n in names]
    best = max(rows, key=lambda r: r.vs_default.paired.value if r.vs_default and r.vs_default.paired else -math.inf,
               default=None)  # fmt: skip
    cheap = min(rows, key=lambda r: r.cost.paired.value if r.cost else math.inf, default=None)

    def told(r: TradeOffPick) -> str:
        cost = f"cost below L0 {r.cost.paired.fixed() if r.cost else '-'}"
        if r.vs_default and r.vs_default.paired:
            return f"{r.name} (keys found against YaRN's default {r.vs_default.paired.signed()}; {cost})"
        what = "no retrieval measured" if retrieval is None else "YaRN's default itself"
        return f"{r.name} ({what}; {cost})"

    sentence = (
        f"Nothing {engine} carries both finds as many keys as YaRN's default and stays within the {limit:.0%} "
        "cost below the trained length"
        + (f": best retrieval {told(best)}; lowest cost {told(cheap)}." if best and cheap else "; and nothing it "
           "carries beats no change on the objective.")
    )  # fmt: skip
    return EngineAdvice(
        None, TRADE_OFF, f"{why}. {sentence}", trade_off=TradeOff(sentence, best, cheap), still_in=tuple(names)
    )


def worst_cost(confirmed: Confirmation, checks: Sequence[Check], name: str) -> Cost | None:
    """``name``'s worst cost below L0 (paired against no change), with its check's label and length."""
    costs = [Cost(c.label, c.length, v) for c in checks if c.task == SHORT_TASK
             if (v := _vs_no_change(confirmed, c, name)) is not None]  # fmt: skip
    return max(costs, key=lambda c: c.paired.value, default=None)


def _recommend(
    race: RaceResult, confirmed: Confirmation, first: Check, chosen: Entry, why: str, retrieval: Check | None
) -> EngineAdvice:
    ok, evidence = holds(confirmed, first, chosen.name, retrieval)
    if chosen.key == BASELINE_KEY:
        return _rec(chosen.candidate, BASELINE_HELD, why, evidence)
    if not ok:
        base = next(e for e in race.entries if e.key == BASELINE_KEY).candidate
        return _rec(base, BASELINE_HELD, f"{chosen.name!r} won the race ({why}) but did not hold", evidence)
    return _rec(chosen.candidate, RECOMMENDED, why, evidence)


def headline(confirmed: Confirmation, checks: Sequence[Check], name: str) -> Headline:
    """What the report says first about ``name``: per axis at N (the objective, keys found) its
    comparison with no change and with YaRN's default, its worst cost below L0, and each confirmed
    spec distinguishably better than it on an axis (paired against it on the same windows)."""
    axes, better = [], []
    for c in decision_axes(checks):
        row = confirmed.row(c.label)
        cell = row.cells.get(name)
        value = None if cell is None else cell.value
        axes.append(
            Axis(c.label, c.task, c.metric, value, _vs_no_change(confirmed, c, name), _vs_default(confirmed, c, name))
        )
        better += [BetterElsewhere(c.label, c.task, c.metric, n, vs) for n, vs in _better_than(row, name)]
    found = next((a for a in axes if a.task in RETRIEVAL_TASKS), None)
    below = bool(found and found.vs_default and found.vs_default.worse)
    return Headline(tuple(axes), tuple(better), worst_cost(confirmed, checks, name), below)


def _better_than(row: CheckRow, name: str) -> list[tuple[str, Paired]]:
    """``(spec, its comparison with name)`` for each spec of a check's row distinguishably better than ``name``."""
    return [(n, vs) for n, c in row.cells.items() if (vs := c.vs.get(name)) is not None and vs.better]


def if_cost_allowed(confirmed: Confirmation, checks: Sequence[Check], chosen: str | None) -> CostAllowed | None:
    """The confirmed spec best on the objective at N against no change, when it is not the one
    chosen: what the short-cost limit gave up, with its worst cost below L0."""
    first = checks[0]
    sign = 1.0 if get_task(first.task).higher_is_better(first.metric) else -1.0
    scored = [(n, vs) for n, c in confirmed.row(first.label).cells.items()
              if (vs := c.vs_no_change) is not None and vs.better]  # fmt: skip
    if not scored:
        return None
    name, gain = max(scored, key=lambda x: sign * x[1].value)
    if name == chosen:
        return None
    worst = worst_cost(confirmed, checks, name)
    return CostAllowed(name, gain, None if worst is None else worst.paired)


def _rec(c: Candidate, status: Status, why: str, evidence: str) -> EngineAdvice:
    return EngineAdvice(c.name, status, why, evidence, c.spec, routes(c.engines))
