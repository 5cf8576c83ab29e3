"""The race's rows, the question and the whole evidence of an advise run, and the ``--status``
document (:mod:`attntemp.advise.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ops.spec import TemperatureSpec
from ..plan import Retrieval
from .answers import EngineAdvice, Route, routes
from .comparisons import JSON, Confirmation, Leader, Paired, RaceComparisons, RetrievalRow, out_of


@dataclass(frozen=True)
class RaceRow:
    """A raced candidate: its stable ``key``, ``name``, ``family``, whether nothing changes up to L0
    (``gated``), its ``spec``, how each engine carries it, whether it stayed (``kept``), why it left
    and after how many windows, its comparisons at the race's last look and its keys found."""

    key: str
    name: str
    family: str
    gated: bool
    note: str
    spec: TemperatureSpec
    engines: dict[str, Route]
    kept: bool
    reason: str | None
    left_after: int | None
    comparisons: RaceComparisons
    retrieval: RetrievalRow | None

    def to_dict(self) -> JSON:
        return {
            "key": self.key, "name": self.name, "family": self.family, "gated": self.gated, "note": self.note,
            "spec": self.spec.to_dict(), "engines": {e: r.to_dict() for e, r in self.engines.items()},
            "kept": self.kept, "reason": self.reason, "left_after": self.left_after,
            "comparisons": self.comparisons.to_dict(),
            "retrieval": None if self.retrieval is None else self.retrieval.to_dict(),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> RaceRow:
        found = d.get("retrieval")
        return cls(
            d["key"], d["name"], d["family"], d["gated"], d["note"], TemperatureSpec.from_dict(d["spec"]),
            routes(d["engines"]), d["kept"], d["reason"], d["left_after"], RaceComparisons.from_dict(d["comparisons"]),
            None if found is None else RetrievalRow.from_dict(found),
        )  # fmt: skip


@dataclass(frozen=True)
class RaceSummary:
    """How the race ended: ``status`` (decided, tied, undecided; in progress under ``--status``),
    the windows its last candidates scored, its forward rows and the leader's name."""

    status: str
    windows: int
    rows: int
    leader: str

    def to_dict(self) -> JSON:
        return {"status": self.status, "windows": self.windows, "rows": self.rows, "leader": self.leader}

    @classmethod
    def from_dict(cls, d: JSON) -> RaceSummary:
        return cls(d["status"], d["windows"], d["rows"], d["leader"])


@dataclass(frozen=True)
class RetrievalPrompts:
    """Retrieval trials by generation (keys asked): the race's in all, and the confirmation's."""

    race: int
    confirmation: int

    def to_dict(self) -> JSON:
        return {"race": self.race, "confirmation": self.confirmation}

    @classmethod
    def from_dict(cls, d: JSON) -> RetrievalPrompts:
        return cls(d["race"], d["confirmation"])


@dataclass(frozen=True)
class Question:
    """What was asked: the model at ``length`` tokens (trained to ``trained_length``), the engine the
    headline is for and every engine served, the objective, the texts, the short and held-out
    lengths, the limits (``max_short_cost``: ratio - 1 below L0; ``min_retrieval``), the retrieval
    prompts of the race and the confirmation (trials), the retrieval axis and the needles a forward;
    ``shared_prefill``: the race's objective read off the retrieval haystacks (in the JSON only when set)."""

    model: str
    length: int
    trained_length: int
    engine: str
    engines: tuple[str, ...]
    objective: str
    text: str
    second_text: str | None
    short_lengths: tuple[int, ...]
    check_lengths: tuple[int, ...]
    max_short_cost: float
    min_retrieval: float | None
    retrieval_prompts: RetrievalPrompts | None
    retrieval: Retrieval | None
    needles_per_forward: int
    shared_prefill: bool = False

    def to_dict(self) -> JSON:
        return {
            "model": self.model, "length": self.length, "trained_length": self.trained_length,
            "engine": self.engine, "engines": list(self.engines), "objective": self.objective, "text": self.text,
            "second_text": self.second_text, "short_lengths": list(self.short_lengths),
            "check_lengths": list(self.check_lengths), "max_short_cost": self.max_short_cost,
            "min_retrieval": self.min_retrieval,
            "retrieval_prompts": None if self.retrieval_prompts is None else self.retrieval_prompts.to_dict(),
            "retrieval": None if self.retrieval is None else self.retrieval.to_dict(),
            "needles_per_forward": self.needles_per_forward,
            **({"shared_prefill": True} if self.shared_prefill else {}),  # older evidence reads back key for key
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> Question:
        r, p = d["retrieval"], d["retrieval_prompts"]
        return cls(
            d["model"], d["length"], d["trained_length"], d["engine"], tuple(d["engines"]), d["objective"], d["text"],
            d["second_text"], tuple(d["short_lengths"]), tuple(d["check_lengths"]), d["max_short_cost"],
            d["min_retrieval"], None if p is None else RetrievalPrompts.from_dict(p),
            None if r is None else Retrieval.from_dict(r),
            d["needles_per_forward"], bool(d.get("shared_prefill", False)),
        )  # fmt: skip


Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class HeadShift:
    """How attention moves per head from L0 to N (queries past L0), no RoPE change: the heads that
    ``collapsed`` onto recent tokens (recent-token mass up by more than 0.1), ``diffused`` (entropy
    / ln n up by more than 0.05, not collapsing) and ``leave_recent`` (recent mass down by more than
    0.1), of ``heads`` in all; the shifts themselves per ``[layer][head]`` (N minus L0)."""

    collapsed: tuple[Head, ...]
    diffused: tuple[Head, ...]
    leave_recent: tuple[Head, ...]
    heads: int
    norm_entropy_shift: list[list[float]]
    recent_mass_shift: list[list[float]]

    def to_dict(self) -> JSON:
        pairs = {
            k: [list(h) for h in v]
            for k, v in (
                ("collapsed", self.collapsed),
                ("diffused", self.diffused),
                ("leave_recent", self.leave_recent),
            )
        }
        return {**pairs, "heads": self.heads, "norm_entropy_shift": self.norm_entropy_shift,
                "recent_mass_shift": self.recent_mass_shift}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> HeadShift:
        def pairs(key: str) -> tuple[Head, ...]:
            return tuple((int(a), int(b)) for a, b in d[key])

        return cls(pairs("collapsed"), pairs("diffused"), pairs("leave_recent"), d["heads"],
                   d["norm_entropy_shift"], d["recent_mass_shift"])  # fmt: skip


@dataclass(frozen=True)
class Diagnosis:
    """Where the model breaks without a RoPE change: ``scores`` (per length, as a string, per task:
    each metric with its 95% interval in words, or ``{"error"}``), how attention moves per head
    (``heads``) and the ``summary`` in words."""

    scores: dict[str, dict[str, dict[str, str]]]
    heads: HeadShift
    summary: str

    def to_dict(self) -> JSON:
        return {"scores": self.scores, "heads": self.heads.to_dict(), "summary": self.summary}

    @classmethod
    def from_dict(cls, d: JSON) -> Diagnosis:
        return cls(d["scores"], HeadShift.from_dict(d["heads"]), d["summary"])


@dataclass(frozen=True)
class Evidence:
    """Everything an advise run found (``evidence.json``): the question, the diagnosis, every raced
    candidate, the race's end, the confirmation, the headline engine's answer (``recommendation``)
    and each engine's (``by_engine``), the forward rows (in all, tuning, by stage) and the seconds
    (this run's; ``scored_seconds``: what the scores took when they were made)."""

    question: Question
    diagnosis: Diagnosis
    candidates: tuple[RaceRow, ...]
    race: RaceSummary
    confirmation: Confirmation
    recommendation: EngineAdvice
    by_engine: dict[str, EngineAdvice]
    forwards: int
    tuning_rows: int
    rows_by_stage: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    scored_seconds: float = 0.0

    def candidate(self, name: str) -> RaceRow | None:
        """The raced candidate called ``name``."""
        return next((c for c in self.candidates if c.name == name), None)

    def to_dict(self) -> JSON:
        return {
            "question": self.question.to_dict(), "diagnosis": self.diagnosis.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates], "race": self.race.to_dict(),
            "confirmation": self.confirmation.to_dict(), "recommendation": self.recommendation.to_dict(),
            "by_engine": {e: r.to_dict() for e, r in self.by_engine.items()}, "forwards": self.forwards,
            "tuning_rows": self.tuning_rows, "rows_by_stage": self.rows_by_stage, "seconds": self.seconds,
            "scored_seconds": self.scored_seconds,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> Evidence:
        return cls(
            Question.from_dict(d["question"]), Diagnosis.from_dict(d["diagnosis"]),
            tuple(RaceRow.from_dict(c) for c in d["candidates"]), RaceSummary.from_dict(d["race"]),
            Confirmation.from_dict(d["confirmation"]), EngineAdvice.from_dict(d["recommendation"]),
            {e: EngineAdvice.from_dict(r) for e, r in d["by_engine"].items()}, d["forwards"], d["tuning_rows"],
            d["rows_by_stage"], d["seconds"], d["scored_seconds"],
        )  # fmt: skip


@dataclass(frozen=True)
class StatusRow:
    """A candidate as ``--status`` replays it: its objective at N over the ``windows`` scored
    (``value`` in words), against no change, against YaRN at m = 1 (a YaRN with a temperature: what
    it adds), against the leader on the objective and on keys found, and its cost below L0 per
    short length (ratio, lower is better); whether it stayed and why it left."""

    key: str
    name: str
    kept: bool
    reason: str | None
    windows: int
    value: str | None
    vs_no_change: Paired | None
    vs_yarn_m1: Paired | None
    vs_leader: Leader | None
    retrieval_vs_leader: Leader | None
    short_cost: dict[str, Paired]

    def to_dict(self) -> JSON:
        return {
            "key": self.key, "name": self.name, "kept": self.kept, "reason": self.reason, "windows": self.windows,
            "value": self.value, "vs_no_change": out_of(self.vs_no_change), "vs_yarn_m1": out_of(self.vs_yarn_m1),
            "vs_leader": None if self.vs_leader is None else self.vs_leader.to_dict(),
            "retrieval_vs_leader": None if self.retrieval_vs_leader is None else self.retrieval_vs_leader.to_dict(),
            "short_cost": {n: c.to_dict() for n, c in self.short_cost.items()},
        }  # fmt: skip


@dataclass(frozen=True)
class StatusQuestion:
    """What ``--status`` was asked: the model at ``length`` (trained to ``trained_length``), the
    objective, and the ``out`` folder whose store it read."""

    model: str
    length: int
    trained_length: int
    objective: str
    out: str


@dataclass(frozen=True)
class StatusRace:
    """The replayed race: its status, the windows scored of the ``of`` it may score, its forward
    rows and the leader's name."""

    status: str
    windows: int
    of: int
    rows: int
    leader: str


@dataclass(frozen=True)
class StatusDoc:
    """``--status``'s document: the question, the replayed race, its candidates, the confirmation
    stored so far (None while the race is in progress) and the scores the store holds."""

    question: StatusQuestion
    race: StatusRace
    candidates: tuple[StatusRow, ...]
    confirmation: Confirmation | None
    stored_scores: int

    def to_dict(self) -> JSON:
        q, r = self.question, self.race
        return {
            "question": {"model": q.model, "length": q.length, "trained_length": q.trained_length,
                         "objective": q.objective, "out": q.out},
            "race": {"status": r.status, "windows": r.windows, "of": r.of, "rows": r.rows, "leader": r.leader},
            "candidates": [c.to_dict() for c in self.candidates],
            "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
            "stored_scores": self.stored_scores,
        }  # fmt: skip
