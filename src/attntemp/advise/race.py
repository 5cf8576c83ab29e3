"""Racing candidates to a verdict, window block by window block (Maron & Moore 1994's Hoeffding
races, with paired bootstrap intervals instead of Hoeffding bounds).

Every round scores each candidate still in the race on the next block of windows of the tuning
pool, on three axes: the objective at the serving length N, retrieval by generation at N (passkey
prompts answered by greedy decoding with a KV cache, ``retrieval`` prompts a window, exact match),
and all-token perplexity at the short lengths (below the trained length L0). After at least
``min_windows`` windows a candidate leaves when

- its paired interval against "no change" at a short length lies wholly above ``1 +
  max_short_cost`` (it costs more than that below L0, for certain), or
- its paired interval against the leader (the best point estimate) on the objective at N is
  worse, or
- its paired interval (Newcombe's, on the same prompts) against the retrieval leader on passkeys
  found is worse; with ``min_retrieval`` the user waives that comparison for a floor: a candidate
  leaves only when its accuracy's Wilson interval lies wholly below it.

The cuts run in that order, each among those still in, so the leader of an axis never leaves on
that axis and at least one candidate stays. A leader cuts others only once its own cost below L0 is
decided within the limit (:func:`admissible`): a leader that later leaves on its cost would have
taken with it candidates that scoring every window would have kept.

A candidate whose short-length interval lies wholly within the cost is no longer scored there.
The race ends with one candidate ("decided"), with the windows spent ("tied": the survivors are
not told apart by every window), or with the budget spent first ("undecided": more windows could
still separate them); replayed from a read-only store (``advise --status``) it stops at the first
round the store does not hold whole ("in progress"). The intervals are 95% at every look, so with
many looks a candidate can leave by chance more often than 5% of the time; ``confirm`` scores the
survivors again on windows the race never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..evaluate.score import NotStored, Result, merged
from ..evaluate.task_base import get_task
from ..ops.spec import TemperatureSpec
from .candidates import BASELINE_KEY, Candidate
from .config import SHARED_TASK  # multikey haystacks that also score their own text (--shared-prefill)
from .records.comparisons import Leader, Paired, RaceComparisons, RetrievalRow, compared

# scorer(specs, task, length, (first window, end)) -> one Result per spec, in order
Scorer = Callable[[Sequence[TemperatureSpec], str, int, tuple[int, int]], list[Result]]
SHORT_TASK, SHORT_METRIC = "perplexity", "ppl"
RETRIEVAL_TASK, RETRIEVAL_METRIC = "passkey", "acc"  # retrieval by generation: passkeys found
MULTIKEY_TASK = "multikey"  # k keys per prefilled haystack, each asked from its cache and generated
RETRIEVAL_TASKS = (RETRIEVAL_TASK, MULTIKEY_TASK, SHARED_TASK)  # the tasks the retrieval axis may be scored on
# what a user reads for each objective (reports and reasons; the task and metric stay in the evidence)
PLAIN = {
    "key_tokens": "distant-token perplexity",
    SHARED_TASK: "distant-token perplexity on the retrieval haystacks",
    "needles": "needles' answer log-prob",
    "perplexity": "perplexity past the trained length",
}


def objective_label(objective: str) -> str:
    """The plain name of ``objective`` (``key_tokens``: distant-token perplexity)."""
    return PLAIN.get(objective, objective)


@dataclass(frozen=True)
class RaceSettings:
    """What a race is run on: the objective task at ``length``, the short lengths, the windows."""

    task: str
    length: int
    short_lengths: tuple[int, ...]
    windows: int  # windows of the tuning pool the race may score
    block: int = 2  # windows per round
    min_windows: int = 4  # windows scored before anyone may leave
    max_short_cost: float = 0.01  # ratio - 1 of all-token perplexity below L0
    budget: int | None = None  # forward rows (one window of one spec at one length)
    retrieval: int = 0  # retrieval prefills per window answered by generation at N (0: no retrieval axis)
    min_retrieval: float | None = None  # a floor on passkeys found, in place of the comparison with the leader
    retrieval_task: str = RETRIEVAL_TASK  # passkey prompts, or multikey haystacks (RETRIEVAL_TASKS); = task: shared

    @property
    def metric(self) -> str:
        return get_task(self.task).objective


@dataclass
class Entry:
    """A candidate's state in the race: its results per (task, length), and why it left."""

    candidate: Candidate
    parts: dict[tuple[str, int], list[Result]] = field(default_factory=dict)
    short_ok: set[int] = field(default_factory=set)  # short lengths where its cost is decided within bounds
    reason: str | None = None
    left_after: int | None = None  # windows scored when it left
    comparisons: RaceComparisons = field(default_factory=RaceComparisons)  # at the last look

    @property
    def name(self) -> str:
        return self.candidate.name

    @property
    def key(self) -> str:
        """The candidate's stable id (``baseline``, ``yarn``, ...): what code finds it by."""
        return self.candidate.key


@dataclass
class RaceResult:
    entries: list[Entry]
    status: str  # decided, tied, undecided; in progress (replayed from a read-only store)
    rows: int
    windows: int  # windows scored by the candidates that stayed
    leader: str

    @property
    def survivors(self) -> list[Entry]:
        return [e for e in self.entries if e.reason is None]


def _leader(settings: RaceSettings, alive: list[Entry]) -> Entry:
    task = get_task(settings.task)
    sign = 1.0 if task.higher_is_better(settings.metric) else -1.0
    key = (settings.task, settings.length)
    return max(alive, key=lambda e: sign * merged(settings.task, e.parts[key])[settings.metric])


def admissible(settings: RaceSettings, e: Entry) -> bool:
    """Whether ``e`` may cut others: "no change", or its cost is decided within the limit at every
    short length."""
    return e.key == BASELINE_KEY or all(n in e.short_ok for n in settings.short_lengths)


def _objective_cut(settings: RaceSettings, alive: list[Entry], windows: int) -> Entry:
    """Compare every candidate with the leader at N; those worse leave."""
    task, key = get_task(settings.task), (settings.task, settings.length)
    lead = _leader(settings, alive)
    lead_res = merged(settings.task, lead.parts[key])
    for e in alive:
        if e is lead:
            continue
        ci = task.paired(merged(settings.task, e.parts[key]), lead_res, settings.metric)
        verdict = None if ci is None else task.verdict(ci, settings.metric)
        e.comparisons = replace(e.comparisons, objective_vs_leader=Leader(lead.name, compared(ci, verdict)))
        if verdict == "worse" and admissible(settings, lead):
            e.reason = (
                f"worse than {lead.name!r} at {settings.length} tokens on {objective_label(settings.task)}: "
                f"{ci.fixed() if ci else ''} after {windows} windows"
            )
            e.left_after = windows
    return lead


def _short_cut(settings: RaceSettings, alive: list[Entry], base: Entry, windows: int) -> None:
    """Compare every candidate with "no change" below L0; those that cost too much leave."""
    task, bound = get_task(SHORT_TASK), 1.0 + settings.max_short_cost
    for e in (x for x in alive if x is not base and x.reason is None):
        for n in settings.short_lengths:
            mine = e.parts[(SHORT_TASK, n)]
            theirs = base.parts[(SHORT_TASK, n)][: len(mine)]  # "no change" on the same blocks
            ci = task.paired(merged(SHORT_TASK, mine), merged(SHORT_TASK, theirs), SHORT_METRIC)
            if ci is None:
                continue
            cost = {**e.comparisons.short_cost, str(n): Paired.of(ci, task.verdict(ci, SHORT_METRIC))}
            e.comparisons = replace(e.comparisons, short_cost=cost)
            if ci.low > bound:
                e.reason = (
                    f"costs {ci.fixed()} all-token perplexity at {n} tokens (below the trained length) against "
                    f"no change, more than {settings.max_short_cost:.0%} after {windows} windows"
                )
                e.left_after = windows
                break
            if ci.high <= bound:
                e.short_ok.add(n)


def _rows_per_window(settings: RaceSettings, task: str) -> int:
    return settings.retrieval if task == settings.retrieval_task else 1


def trials_of(result: dict[str, Any]) -> int:
    """Retrieval trials a (merged) result holds: its prompts, or its haystacks' keys."""
    return int(result["trials"]) if "trials" in result else len(result["hits"])


def retrieval_leader(settings: RaceSettings, alive: list[Entry]) -> Entry:
    """The candidate that found the most passkeys at N (the simplest of equals)."""
    name = settings.retrieval_task
    return max(alive, key=lambda e: merged(name, e.parts[(name, settings.length)])[RETRIEVAL_METRIC])


def _retrieval_cut(settings: RaceSettings, alive: list[Entry], windows: int) -> None:
    """Compare every candidate with the retrieval leader on the same prompts (or, with
    ``min_retrieval``, with that floor); those worse leave."""
    name = settings.retrieval_task
    task, key = get_task(name), (name, settings.length)
    lead = retrieval_leader(settings, alive)
    lead_res = merged(name, lead.parts[key])
    prompts = trials_of(lead_res)
    for e in alive:
        mine = merged(name, e.parts[key])
        if settings.min_retrieval is not None:
            ci = task.interval(mine, RETRIEVAL_METRIC)
            e.comparisons = replace(e.comparisons, retrieval_floor=compared(ci))
            if ci is not None and ci.high < settings.min_retrieval:
                e.reason = (
                    f"finds {ci.fixed()} of its passkeys at {settings.length} tokens by generation, below "
                    f"--min-retrieval {settings.min_retrieval:g}, after {prompts} trials"
                )
                e.left_after = windows
            continue
        if e is lead:
            continue
        ci = task.paired(mine, lead_res, RETRIEVAL_METRIC)
        verdict = None if ci is None else task.verdict(ci, RETRIEVAL_METRIC)
        e.comparisons = replace(e.comparisons, retrieval_vs_leader=Leader(lead.name, compared(ci, verdict)))
        if verdict == "worse" and ci is not None and admissible(settings, lead):
            e.reason = (
                f"finds fewer passkeys by generation than {lead.name!r} at {settings.length} tokens: "
                f"{ci.fixed()} (difference in share found) after {prompts} trials"
            )
            e.left_after = windows


def _jobs(settings: RaceSettings, entries: list[Entry]) -> list[tuple[str, int, list[Entry]]]:
    """What a round scores: the candidates in the race at N, and at each short length those whose
    cost is not decided yet, with "no change" (what they pair with) first."""
    racing = [e for e in entries if e.reason is None]
    base = next(e for e in entries if e.key == BASELINE_KEY)
    jobs = [(settings.task, settings.length, racing)]
    if settings.retrieval and settings.retrieval_task != settings.task:  # one task may give both (shared prefill)
        jobs.append((settings.retrieval_task, settings.length, racing))
    for n in settings.short_lengths:
        needy = [e for e in racing if e is not base and n not in e.short_ok]
        if needy:
            jobs.append((SHORT_TASK, n, [base, *needy]))
    return jobs


def _score_round(scorer: Scorer, jobs: list[tuple[str, int, list[Entry]]], block: tuple[int, int]) -> int:
    """Score ``jobs`` on ``block`` (every job, before any entry takes its results: a round the
    scorer cannot finish leaves the entries as they were); returns the forward rows it took."""
    scored = [(task, length, entries, scorer([e.candidate.spec for e in entries], task, length, block))
              for task, length, entries in jobs]  # fmt: skip
    rows = 0
    for task, length, entries, results in scored:
        for e, r in zip(entries, results, strict=True):
            e.parts.setdefault((task, length), []).append(r)
            rows += r.rows
    return rows


def race(candidates: Sequence[Candidate], scorer: Scorer, settings: RaceSettings, progress: Any = None) -> RaceResult:
    """Race ``candidates`` (one named "no change": the baseline of the short-length cost)."""
    entries = [Entry(c) for c in candidates]
    base = next(e for e in entries if e.key == BASELINE_KEY)
    rows, windows, status = 0, 0, "tied"
    while windows < settings.windows and sum(e.reason is None for e in entries) > 1:
        block = (windows, min(windows + settings.block, settings.windows))
        jobs = _jobs(settings, entries)
        need = (block[1] - block[0]) * sum(len(j[2]) * _rows_per_window(settings, j[0]) for j in jobs)
        if settings.budget is not None and rows + need > settings.budget:
            status = "undecided"
            break
        try:
            rows += _score_round(scorer, jobs, block)
        except NotStored:  # a read-only store (advise --status): the race as far as it was scored
            status = "in progress"
            break
        windows = block[1]
        if windows >= settings.min_windows:  # the cost first: the leader at N is one that may stay
            _short_cut(settings, [e for e in entries if e.reason is None], base, windows)
            _objective_cut(settings, [e for e in entries if e.reason is None], windows)
            if settings.retrieval:
                _retrieval_cut(settings, [e for e in entries if e.reason is None], windows)
        if progress is not None:  # after the cuts: the candidates still in the race
            progress(windows, rows, sum(e.reason is None for e in entries))
    still = [e for e in entries if e.reason is None]
    if len(still) == 1:
        status = "decided"
    lead = _leader(settings, still) if windows else still[0]
    return RaceResult(entries, status, rows, windows, lead.name)


def retrieval_rows(
    result: RaceResult, length: int, default: Entry | None, name: str = RETRIEVAL_TASK
) -> dict[str, RetrievalRow]:
    """Per candidate with race trials scored on the retrieval task ``name``: keys found by
    generation at ``length`` (share, with its 95% interval by the task's rule: Wilson over passkey
    prompts, bootstrap over multikey haystacks), and paired against no change and ``default``
    (YaRN's own default) on the trials both answered."""
    task, key = get_task(name), (name, length)
    base = next(e for e in result.entries if e.key == BASELINE_KEY)
    out: dict[str, RetrievalRow] = {}
    for e in (x for x in result.entries if x.parts.get(key)):
        mine = merged(name, e.parts[key])
        share = compared(task.interval(mine, RETRIEVAL_METRIC))
        vs = [_paired_on(task, name, e, other, key) for other in (base, default)]
        trials = trials_of(mine)
        out[e.name] = RetrievalRow(trials, round(mine[RETRIEVAL_METRIC] * trials), share, mine[RETRIEVAL_METRIC], *vs)
    return out


def _paired_on(task: Any, name: str, e: Entry, other: Entry | None, key: tuple[str, int]) -> Paired | None:
    """``e`` against ``other`` on keys found, on the blocks both were scored on; None where not made."""
    if other is None or other is e or not other.parts.get(key):
        return None
    n = min(len(e.parts[key]), len(other.parts[key]))
    pc = task.paired(merged(name, e.parts[key][:n]), merged(name, other.parts[key][:n]), RETRIEVAL_METRIC)
    return None if pc is None else Paired.of(pc, task.verdict(pc, RETRIEVAL_METRIC))
