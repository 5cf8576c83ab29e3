"""``attntemp advise --status``: where a run with these flags stands, read from its ``scores.db``
alone, opened read-only (no forward, nothing written; the run may be writing it meanwhile).

The race is replayed as far as its rounds are stored whole (:func:`attntemp.advise.race.race`
stops at the first round the store lacks: "in progress"), so every figure is the one the run
itself computed at that look: each candidate's objective at N with its 95% interval over the
windows scored, its paired interval against the leader, its cost below the trained length and
why it left. Once the race is over, the confirmation's checks already stored are shown too.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..evaluate.score import Result, ScoreStore, merged
from ..evaluate.task_base import get_task
from ..utils.tables import markdown_table
from . import confirm
from .advice_page import confirm_table, interval_cell
from .candidates import BASELINE, by_key
from .config import STORE, AdviseConfig
from .plan import AdvisePlan
from .race import SHORT_TASK, RaceResult
from .records.comparisons import Confirmation, Paired
from .records.evidence import StatusDoc, StatusQuestion, StatusRace, StatusRow


class Counter:
    """Forward rows per stage, and rows and seconds per length, read from each result (the same on a
    resumed run: a stored score keeps the seconds it took when it was made)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.scored_s = 0.0  # what the scores took when they were made (read from the store or not)
        self.at: dict[tuple[str, int], list[float]] = {}  # (task, length) -> [rows, seconds]

    def add(self, stage: str, results: list) -> list:
        self.rows[stage] = self.rows.get(stage, 0) + sum(r.rows for r in results)
        self.scored_s += sum(r.seconds for r in results)
        for r in results:
            got = self.at.setdefault((r.task, r.length), [0, 0.0])
            got[0], got[1] = got[0] + r.rows, got[1] + r.seconds
        return results

    def seconds_per_row(self, length: int, task: str | None = None) -> float | None:
        """Seconds a forward row took at ``length`` (of ``task`` alone when given), None if none ran."""
        got = [v for (t, n), v in self.at.items() if n == length and task in (None, t)]
        rows, seconds = sum(v[0] for v in got), sum(v[1] for v in got)
        return seconds / rows if rows else None


def say(cfg: AdviseConfig, text: str) -> None:
    if cfg.progress:
        print(f"advise: {text}", file=sys.stderr, flush=True)


SCORING_EVERY = 30.0  # seconds: fast runs (the tiny model) stay quiet, a real model's batches each get a line


def scoring_line(cfg: AdviseConfig, stage: str, every: float = SCORING_EVERY):
    """The line score_many gives after a batch of forwards, said as ``advise: <stage>: ...`` when
    ``every`` seconds have passed since the job began or since the last line (None under --status
    or --quiet: nothing is scored there, or nothing is shown)."""
    if cfg.status or not cfg.progress:
        return None
    last = [time.monotonic()]

    def said(text: str) -> None:
        if time.monotonic() - last[0] >= every:
            last[0] = time.monotonic()
            say(cfg, f"{stage}: {text}")

    return said


def race_progress(cfg: AdviseConfig):
    def show(windows: int, rows: int, left: int) -> None:
        say(cfg, f"race: {windows} windows, {rows} rows, {left} candidates left")

    return show


def planned_rows(plan: AdvisePlan, candidates: int) -> tuple[int, int]:
    """``(race, confirmation)``: the most forward rows at N each may take (every candidate scored on
    every race window: the objective and the retrieval prefills; then confirmed on the evaluation
    pool); :func:`planned_short_rows` gives the rows below L0, the held-out lengths' come on top."""
    cfg, r = plan.cfg, plan.retrieval
    per_window = (0 if cfg.shared_prefill else 1) + (r.per_window if r.task else 0)  # shared: the haystacks alone
    prefills = r.confirm_pool_size(cfg.retrieval_prompts or cfg.trials) if r.task else 0
    return candidates * cfg.race_windows * per_window, candidates * (cfg.n_docs + prefills)


def planned_short_rows(plan: AdvisePlan, candidates: int) -> tuple[int, int]:
    """``(race, confirmation)``: the most rows each may take at each length below L0, where the cost
    is all-token perplexity: every candidate with no change on every race window, then on every
    evaluation document."""
    return candidates * plan.cfg.race_windows, candidates * plan.cfg.n_docs


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _rate(seconds: float) -> str:
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"  # 160 s, not 1.6e+02 s


def cost_line(plan: AdvisePlan, candidates: int, count: Counter) -> str:
    """What the race and the confirmation may cost here, said before they run: rows at N and at
    each length below L0, seconds a row at each (the diagnosis's rows, just measured or read from
    the store: no change's at N, and its cost rows below L0), the total, and how ``--budget`` and
    ``--workers`` shorten it."""
    cfg, shorts = plan.cfg, plan.short_lengths
    race_rows, confirm_rows = planned_rows(plan, candidates)
    race_short, confirm_short = planned_short_rows(plan, candidates)
    said = f"plan: at most {race_rows} race rows and {confirm_rows} confirmation rows at {cfg.length} tokens" + (
        f" (the race's {cfg.objective} on its retrieval haystacks, facts left out: --shared-prefill)"
        if cfg.shared_prefill
        else ""
    )
    if shorts:
        said += f", {race_short} and {confirm_short} at each of {', '.join(map(str, shorts))} (the cost below L0)"
    each = count.seconds_per_row(cfg.length)
    if each is None:
        return said + " (no row at that length timed yet)"
    below = {n: count.seconds_per_row(n, SHORT_TASK) for n in shorts}
    total = (race_rows + confirm_rows) * each + sum((race_short + confirm_short) * t for t in below.values() if t)
    rates = [f"{_rate(each)} s a row at {cfg.length}"] + [f"{_rate(t)} s at {n}" for n, t in below.items() if t]
    untimed = [str(n) for n, t in below.items() if t is None]
    return (
        f"{said}; {', '.join(rates)} here (the diagnosis's)"
        + (f", none timed at {', '.join(untimed)} (left out of the total)" if untimed else "")
        + f"; at most {_duration(total / max(1, cfg.workers))}"
        + (f" on {cfg.workers} workers" if cfg.workers > 1 else "")
        + "; the race usually stops far sooner; --budget ROWS caps the race, --workers K shares the rows out"
    )


@dataclass(frozen=True)
class AdviseStatus:
    """The replayed state (:class:`~.records.evidence.StatusDoc`; ``to_dict()``: the ``--json``
    document) and its report."""

    doc: StatusDoc

    def to_dict(self) -> dict[str, Any]:
        return self.doc.to_dict()

    def markdown(self) -> str:
        return status_markdown(self.doc)


def open_store(plan: AdvisePlan) -> ScoreStore:
    return ScoreStore(Path(plan.cfg.out) / STORE, read_only=True)


def _paired(plan: AdvisePlan, mine: list[Result], theirs: list[Result]) -> Paired | None:
    """``mine`` against ``theirs`` on the objective at N, on the windows both were scored on."""
    name = plan.cfg.race_objective()
    task, n = get_task(name), min(len(mine), len(theirs))
    if n == 0:
        return None
    ci = task.paired(merged(name, mine[:n]), merged(name, theirs[:n]), task.objective)
    return None if ci is None else Paired.of(ci, task.verdict(ci, task.objective))


def candidate_rows(plan: AdvisePlan, result: RaceResult) -> list[StatusRow]:
    """Per candidate: its objective at N over the windows scored, paired against no change (and a
    YaRN with a temperature against YaRN at m = 1: what the temperature adds), and the race's
    comparisons."""
    cfg, name = plan.cfg, plan.cfg.race_objective()
    task, key = get_task(name), (name, cfg.length)
    parts = {e.name: e.parts.get(key, []) for e in result.entries}
    yarn = by_key(result.entries, "yarn")
    on_yarn = set(confirm.on_yarn(result, "yarn"))  # keys
    out = []
    for e in result.entries:
        mine, c = parts[e.name], e.comparisons
        reference = yarn.name if yarn and e.key in on_yarn and e is not yarn else None
        out.append(
            StatusRow(
                e.candidate.key,
                e.name,
                e.reason is None,
                e.reason,
                sum(r.rows for r in mine),
                task.describe(merged(name, mine), task.objective) if mine else None,
                None if e.name == BASELINE else _paired(plan, mine, parts[BASELINE]),
                _paired(plan, mine, parts[reference]) if reference in parts else None,
                c.objective_vs_leader,
                c.retrieval_vs_leader,
                c.short_cost,
            )
        )
    return out


def status_doc(plan: AdvisePlan, result: RaceResult, confirmed: Confirmation | None, stored: int) -> StatusDoc:
    cfg = plan.cfg
    return StatusDoc(
        StatusQuestion(cfg.model, cfg.length, plan.trained, cfg.objective, cfg.out),
        StatusRace(result.status, result.windows, cfg.race_windows, result.rows, result.leader),
        tuple(candidate_rows(plan, result)), confirmed, stored,
    )  # fmt: skip


def status_markdown(doc: StatusDoc) -> str:
    q, r = doc.question, doc.race
    lengths = sorted({int(n) for c in doc.candidates for n in c.short_cost})
    rows = [
        (c.name, c.value or "-", c.windows, interval_cell(c.vs_no_change), interval_cell(c.vs_yarn_m1),
         interval_cell(c.vs_leader.paired if c.vs_leader else None),
         *(interval_cell(c.short_cost.get(str(n))) for n in lengths), c.reason or "in the race")
        for c in doc.candidates
    ]  # fmt: skip
    head = (f"candidate ({q.objective} at {q.length})", "value [95%]", "windows", "vs no change",
            "vs YaRN at m = 1", f"vs the leader ({r.leader})", *(f"cost at {n}" for n in lengths),
            "why it left")  # fmt: skip
    lines = [
        f"# attntemp advise --status: {q.model} at {q.length} tokens (trained to {q.trained_length})",
        "",
        f"Read from {q.out}/{STORE} ({doc.stored_scores} scores), no forward. The race: **{r.status}** "
        f"after {r.windows} of {r.of} windows, {r.rows} forward rows; the leader: {r.leader}.",
        "",
        markdown_table(head, rows),
    ]
    if doc.confirmation is not None:
        lines += ["", "## Confirmation stored so far", "", *confirm_table(doc.confirmation)]
    return "\n".join(lines) + "\n"
