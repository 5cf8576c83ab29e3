"""The survivors of the race scored again on windows it never saw, and the recommendation.

Confirmation is on the evaluation pool (documents no race or tuner scored), at the serving length
N on the objective and the needles, at a longer held-out length, at the short lengths (all-token
perplexity: the cost below the trained length) and on a second text; every spec paired against
"no change" on the same windows. The recommendation is the race's pick that the engine carries,
kept only when it beats "no change" on the objective at N on the evaluation pool; otherwise the
report says plainly that nothing beat the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..evaluate.task_base import get_task
from ..ops.spec import TemperatureSpec
from .candidates import BASELINE, Candidate
from .race import SHORT_METRIC, SHORT_TASK, Entry, RaceResult

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


def checks_for(objective: str, length: int, check: int | None, shorts: Sequence[int], needles: bool, second: bool):
    """Every confirmation, the objective at N first."""
    metric = get_task(objective).objective
    out = [Check(f"{objective} {metric} at {length}", objective, metric, length, "evaluation")]
    if needles and objective != "needles":
        out.append(Check(f"needles logp at {length}", "needles", "logp", length, "evaluation"))
    if check:
        out.append(Check(f"{objective} {metric} at {check} (held out)", objective, metric, check, "evaluation"))
    out += [Check(f"cost at {n}: all-token ppl", SHORT_TASK, SHORT_METRIC, n, "evaluation") for n in shorts]
    if second:
        out.append(Check(f"{objective} {metric} at {length}, second text", objective, metric, length, "second"))
    return out


def _paired(task: Any, a: dict, b: dict, metric: str) -> dict[str, Any] | None:
    ci = task.paired(a, b, metric)
    return None if ci is None else {**ci.to_dict(), "verdict": task.verdict(ci, metric)}


def confirm(
    specs: dict[str, TemperatureSpec], checks: Sequence[Check], scorer: Confirmer, against: dict[str, str] | None = None
) -> dict[str, Any]:
    """``{check label: {spec name: {"value", "vs_no_change", "vs_reference"}}}``: each spec paired
    against "no change", and those named in ``against`` also against their reference (YaRN with
    a temperature against YaRN at m = 1: what the temperature adds)."""
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
        out[c.label] = row
    return out


def on_yarn(race: RaceResult, reference: str) -> list[str]:
    """The race's candidates with the RoPE of ``reference`` (YaRN at m = 1): it, YaRN with its own
    m, with log-n, with a tuned m; each temperature is paired against the reference (what it adds)
    whatever its name says. Empty when the race has no such reference."""
    rope = next((e.candidate.spec.rope for e in race.entries if e.name == reference), None)
    return [e.name for e in race.entries if rope and e.candidate.spec.rope == rope]


def to_confirm(race: RaceResult, extra: Sequence[str], most: int = 4) -> list[Entry]:
    """The survivors (at most ``most``, the race's order) and the named references (YaRN with and
    without a temperature: what the temperature adds), "no change" first."""
    by_name = {e.name: e for e in race.entries}
    picked = [by_name[BASELINE], *[e for e in race.survivors if e.name != BASELINE][:most]]
    return picked + [by_name[n] for n in extra if n in by_name and by_name[n] not in picked]


def pick(race: RaceResult, engine: str) -> tuple[Entry | None, str]:
    """The race's choice that ``engine`` carries, and why it is the one: the winner of a decided
    race, the simplest of tied survivors; the candidate that stayed longest when the engine
    carries none of them; None when the race is undecided."""
    if race.status == "undecided":
        return None, "the budget ran out before the race told the survivors apart"
    carried = [e for e in race.survivors if e.candidate.engines.get(engine, {}).get("how") != "not carried"]
    if race.status == "decided" and carried:
        return carried[0], "the only candidate left in the race"
    if carried:
        return carried[0], "the simplest of the survivors no interval told apart"
    rest = [e for e in race.entries if e.candidate.engines.get(engine, {}).get("how") != "not carried"]
    best = max(rest, key=lambda e: e.left_after or 0)
    return best, f"{engine} carries none of the survivors; of the candidates it carries, this one stayed longest"


def holds(confirmed: dict[str, Any], first: Check, name: str) -> tuple[bool, str]:
    """Whether ``name`` beats "no change" on the first check (the objective at N, evaluation pool)."""
    if name == BASELINE:
        return True, "no change: nothing to hold"
    row = confirmed.get(first.label, {})
    if "error" in row:
        return False, f"not confirmed: {row['error']}"
    vs = row[name]["vs_no_change"]
    if vs is None:
        return False, "not confirmed: no paired interval (fewer than 2 windows)"
    return vs["verdict"] == "better", f"{first.label} on the evaluation pool: {vs['value']:.4g} " + (
        f"[{vs['low']:.4g}, {vs['high']:.4g}] against no change, {vs['verdict']}"
    )


def recommendation(race: RaceResult, confirmed: dict[str, Any], first: Check, engine: str) -> dict[str, Any]:
    """What to run: the pick when it holds on the evaluation pool; no change said plainly otherwise."""
    chosen, why = pick(race, engine)
    alternative = if_cost_allowed(confirmed, first, None if chosen is None else chosen.name)
    if chosen is None:
        still = [e.name for e in race.survivors]
        return {"name": None, "status": "undecided", "why": why, "still_in": still, "if_cost_allowed": alternative}
    return {**_recommend(race, confirmed, first, chosen, why), "if_cost_allowed": alternative}


def _recommend(race: RaceResult, confirmed: dict[str, Any], first: Check, chosen: Entry, why: str) -> dict[str, Any]:
    ok, evidence = holds(confirmed, first, chosen.name)
    if chosen.name == BASELINE:
        return _rec(chosen.candidate, "nothing beats the baseline", why, evidence)
    if not ok:
        base = next(e for e in race.entries if e.name == BASELINE).candidate
        return _rec(
            base, "nothing beats the baseline", f"{chosen.name!r} won the race ({why}) but did not hold", evidence
        )
    return _rec(chosen.candidate, "recommended", why, evidence)


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
