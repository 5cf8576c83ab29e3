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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..evaluate.task_base import get_task
from ..ops.spec import TemperatureSpec
from .candidates import BASELINE, BASELINE_KEY, Candidate, by_key
from .carry import carries
from .race import PLAIN, RETRIEVAL_METRIC, RETRIEVAL_TASK, SHORT_METRIC, SHORT_TASK, Entry, RaceResult, objective_label

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
COST_LABEL = "cost at {n}: perplexity ratio"


def checks_for(
    objective: str,
    length: int,
    held_out: Sequence[int],
    shorts: Sequence[int],
    needles: bool,
    second: bool,
    retrieval: bool = False,
):
    """Every confirmation, the objective at N first; retrieval by generation at N second."""
    metric, plain = get_task(objective).objective, objective_label(objective)
    out = [Check(f"{plain} at {length}", objective, metric, length, "evaluation")]
    if retrieval:
        out.append(Check(f"{RETRIEVAL_LABEL} at {length}", RETRIEVAL_TASK, RETRIEVAL_METRIC, length, "evaluation"))
    if needles and objective != "needles":
        out.append(Check(f"{PLAIN['needles']} at {length}", "needles", "logp", length, "evaluation"))
    out += [Check(f"{plain} at {n} (held out)", objective, metric, n, "evaluation") for n in held_out]
    out += [Check(COST_LABEL.format(n=n), SHORT_TASK, SHORT_METRIC, n, "evaluation") for n in shorts]
    if second:
        out.append(Check(f"{plain} at {length}, second text", objective, metric, length, "second"))
    return out


def _paired(task: Any, a: dict, b: dict, metric: str) -> dict[str, Any] | None:
    ci = task.paired(a, b, metric)
    return None if ci is None else {**ci.to_dict(), "verdict": task.verdict(ci, metric)}


def confirm(
    specs: dict[str, TemperatureSpec],
    checks: Sequence[Check],
    scorer: Confirmer,
    against: dict[str, str] | None = None,
    default: str | None = None,
    refs: Sequence[str] = (),
) -> dict[str, Any]:
    """``{check label: {spec name: {"value", "vs_no_change", "vs_reference", "vs_default", "vs"}}}``:
    each spec paired against "no change", those named in ``against`` also against their reference
    (YaRN with a temperature against YaRN at m = 1: what the temperature adds), every spec against
    ``default`` (YaRN's own default) and, in ``vs``, against each of ``refs`` (the race's survivors:
    the decision among them reads these)."""
    against = against or {}
    names = list(specs)
    out: dict[str, Any] = {}
    for c in checks:
        task = get_task(c.task)
        try:
            results = dict(zip(names, scorer([specs[n] for n in names], c.task, c.length, c.text), strict=True))
        except ValueError as exc:  # e.g. no key tokens in the second text's windows: said, not fatal
            out[c.label] = {"error": str(exc)}
            continue
        base = results[BASELINE]
        row: dict[str, Any] = {}
        for n in names:
            row[n] = {
                "value": task.describe(results[n], c.metric),
                "vs_no_change": None if n == BASELINE else _paired(task, results[n], base, c.metric),
            }
            if n in against and against[n] in results:
                row[n]["vs_reference"] = {
                    "against": against[n],
                    **(_paired(task, results[n], results[against[n]], c.metric) or {}),
                }
            if default in results and n != default:
                row[n]["vs_default"] = {
                    "against": default,
                    **(_paired(task, results[n], results[default], c.metric) or {}),
                }
            row[n]["vs"] = {r: _paired(task, results[n], results[r], c.metric) for r in refs if r in results and r != n}
        out[c.label] = row
    return out


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
    carried = [e for e in race.survivors if carries(e.candidate, engine)]
    if race.status == "decided" and carried:
        return carried[0], "the only candidate left in the race"
    if carried:
        return carried[0], "the simplest of the survivors no interval told apart"
    rest = [e for e in race.entries if carries(e.candidate, engine)]
    best = max(rest, key=lambda e: e.left_after or 0)
    return best, f"{engine} carries none of the survivors; of the candidates it carries, this one stayed longest"


def holds(confirmed: dict[str, Any], first: Check, name: str, retrieval: Check | None = None) -> tuple[bool, str]:
    """Whether ``name`` beats "no change" on the first check (the objective at N, evaluation pool)
    and, with ``retrieval``, finds no fewer passkeys than "no change" (distinguishably)."""
    if name == BASELINE:
        return True, "no change: nothing to hold"
    row = confirmed.get(first.label, {})
    if "error" in row:
        return False, f"not confirmed: {row['error']}"
    vs = row[name]["vs_no_change"]
    if vs is None:
        return False, "not confirmed: no paired interval (fewer than 2 windows)"
    said = (
        f"{first.label} on the evaluation pool: {vs['value']:.4g} [{vs['low']:.4g}, {vs['high']:.4g}] against "
        f"no change, {vs['verdict']}"
    )
    found = _cell(confirmed, retrieval, name, "vs_no_change")
    if found and found.get("verdict") == "worse":
        return False, (
            f"{said}; but it finds fewer passkeys than no change: {found['value']:+.3f} "
            f"[{found['low']:+.3f}, {found['high']:+.3f}]"
        )
    return vs["verdict"] == "better", said


def _cell(confirmed: dict[str, Any], check: Check | None, name: str, field: str) -> dict[str, Any] | None:
    """The paired comparison ``field`` of ``name`` on ``check``; None where there is none."""
    row = confirmed.get(check.label, {}) if check else {}
    return None if "error" in row or name not in row else row[name].get(field)


def decide(race: RaceResult, confirmed: dict[str, Any], axes: Sequence[Check], engine: str) -> tuple[Entry | None, str]:
    """The race's survivor to recommend: the first (simplest) that ``engine`` carries and that no
    other survivor beats distinguishably on any of ``axes`` (the objective and retrieval at N) on
    the evaluation pool; the race's own pick where every survivor is beaten somewhere."""
    chosen, why = pick(race, engine)
    carried = [e for e in race.survivors if carries(e.candidate, engine)]
    if chosen is None or len(carried) < 2:
        return chosen, why
    kept = {e.name for e in race.survivors}
    for e in carried:
        if not [n for _, n in beaten_by(confirmed, axes, e.name) if n in kept]:
            return e, why if e is chosen else "the simplest survivor no other survivor beats on an axis at N"
    return chosen, why + "; every survivor is beaten by another on some axis (see where the axes disagree)"


def beaten_by(confirmed: dict[str, Any], axes: Sequence[Check], name: str) -> list[tuple[str, str]]:
    """``(check label, spec)`` for each confirmed spec distinguishably better than ``name`` on an axis."""
    out = []
    for c in axes:
        row = confirmed.get(c.label, {})
        if "error" in row:
            continue
        out += [
            (c.label, n) for n, v in row.items() if ((v.get("vs") or {}).get(name) or {}).get("verdict") == "better"
        ]
    return out


def decision_axes(checks: Sequence[Check]) -> list[Check]:
    """The axes a candidate is judged on at N: the objective and retrieval (the cost has its limit)."""
    return [c for c in checks if c.length == checks[0].length and c.text == "evaluation" and c.task != SHORT_TASK]


def recommendation(race: RaceResult, confirmed: dict[str, Any], checks: Sequence[Check], engine: str) -> dict[str, Any]:
    """What to run: the decided survivor when it holds on the evaluation pool; no change said
    plainly otherwise; with its :func:`headline`."""
    first, retrieval = checks[0], next((c for c in checks if c.task == RETRIEVAL_TASK), None)
    axes = [c for c in decision_axes(checks) if c.task in (first.task, RETRIEVAL_TASK)]
    chosen, why = decide(race, confirmed, axes, engine)
    alternative = if_cost_allowed(confirmed, first, None if chosen is None else chosen.name)
    if chosen is None:
        still = [e.name for e in race.survivors]
        return {"name": None, "status": "undecided", "why": why, "still_in": still, "if_cost_allowed": alternative}
    rec = _recommend(race, confirmed, first, chosen, why, retrieval)
    return {**rec, "if_cost_allowed": alternative, "headline": headline(confirmed, checks, rec["name"])}


def _recommend(
    race: RaceResult, confirmed: dict[str, Any], first: Check, chosen: Entry, why: str, retrieval: Check | None
) -> dict[str, Any]:
    ok, evidence = holds(confirmed, first, chosen.name, retrieval)
    if chosen.key == BASELINE_KEY:
        return _rec(chosen.candidate, "nothing beats the baseline", why, evidence)
    if not ok:
        base = next(e for e in race.entries if e.key == BASELINE_KEY).candidate
        return _rec(
            base, "nothing beats the baseline", f"{chosen.name!r} won the race ({why}) but did not hold", evidence
        )
    return _rec(chosen.candidate, "recommended", why, evidence)


def headline(confirmed: dict[str, Any], checks: Sequence[Check], name: str) -> dict[str, Any]:
    """What the report says first about ``name``: per axis at N (the objective, passkeys found) its
    comparison with no change and with YaRN's default, its worst cost below L0, and each confirmed
    spec distinguishably better than it on an axis (paired against it on the same windows)."""
    out: dict[str, Any] = {"axes": [], "better_elsewhere": []}
    axes = decision_axes(checks)
    for c in axes:
        row = confirmed.get(c.label, {})
        out["axes"].append(
            {
                "label": c.label,
                "task": c.task,
                "metric": c.metric,
                "value": None if "error" in row else (row.get(name) or {}).get("value"),
                "vs_no_change": _cell(confirmed, c, name, "vs_no_change"),
                "vs_default": _cell(confirmed, c, name, "vs_default"),
            }
        )
        better = (
            [] if "error" in row else [n for n, v in row.items() if (v.get("vs_pick") or {}).get("verdict") == "better"]
        )
        out["better_elsewhere"] += [
            {"label": c.label, "task": c.task, "metric": c.metric, "name": n, "vs_pick": row[n]["vs_pick"]}
            for n in better
        ]
    costs = [(c, _cell(confirmed, c, name, "vs_no_change")) for c in checks if c.task == SHORT_TASK]
    worst = max(((c, v) for c, v in costs if v), key=lambda cv: cv[1]["value"], default=None)
    out["cost"] = None if worst is None else {"label": worst[0].label, "length": worst[0].length, **worst[1]}
    found = next((a for a in out["axes"] if a["task"] == RETRIEVAL_TASK), None)
    out["below_default_on_retrieval"] = bool(found and (found["vs_default"] or {}).get("verdict") == "worse")
    return out


def if_cost_allowed(confirmed: dict[str, Any], first: Check, chosen: str | None) -> dict[str, Any] | None:
    """The confirmed spec best on the objective at N against no change, when it is not the one
    chosen: what the short-cost limit gave up, with its worst cost below L0."""
    row = confirmed.get(first.label, {})
    if "error" in row:
        return None
    sign = 1.0 if get_task(first.task).higher_is_better(first.metric) else -1.0
    scored = [
        (n, c["vs_no_change"]) for n, c in row.items() if c["vs_no_change"] and c["vs_no_change"]["verdict"] == "better"
    ]
    if not scored:
        return None
    name, gain = max(scored, key=lambda x: sign * x[1]["value"])
    if name == chosen:
        return None
    costs = [v[name]["vs_no_change"] for k, v in confirmed.items() if k.startswith("cost at") and "error" not in v]
    worst = max((c for c in costs if c), key=lambda c: c["value"], default=None)
    return {"name": name, "gain": gain, "worst_cost": worst}


def _rec(c: Candidate, status: str, why: str, evidence: str) -> dict[str, Any]:
    return {
        "name": c.name,
        "status": status,
        "why": why,
        "evidence": evidence,
        "spec": c.spec.to_dict(),
        "engines": c.engines,
    }
