"""The comparisons advise makes and the confirmation's cells (:mod:`attntemp.advise.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ops.intervals import Interval

JSON = dict[str, Any]


@dataclass(frozen=True)
class Paired:
    """One spec against another on the same windows or prompts, with its 95% paired interval.

    ``value`` in ``[low, high]`` at ``level`` (0.95), made by ``method``: a ratio for perplexities
    (lower is better) or a difference for keys found and log-probabilities (higher is better);
    ``verdict`` for the first spec: "better", "worse" or "not distinguishable" (the interval holds
    no difference), None where none is given (a share's own interval).
    """

    value: float
    low: float
    high: float
    level: float
    method: str
    verdict: str | None = None

    @classmethod
    def of(cls, ci: Interval, verdict: str | None = None) -> Paired:
        """``ci`` with ``verdict``."""
        return cls(ci.value, ci.low, ci.high, ci.level, ci.method, verdict)

    def to_dict(self) -> JSON:
        return {"value": self.value, "low": self.low, "high": self.high, "level": self.level,
                "method": self.method, "verdict": self.verdict}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> Paired:
        return cls(d["value"], d["low"], d["high"], d["level"], d["method"], d.get("verdict"))

    @property
    def better(self) -> bool:
        return self.verdict == "better"

    @property
    def worse(self) -> bool:
        return self.verdict == "worse"

    def fixed(self) -> str:
        """``0.9931 [0.9802, 1.0062]``: a ratio in words."""
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}]"

    def signed(self) -> str:
        """``+0.420 [+0.270, +0.560]``: a difference in words."""
        return f"{self.value:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def compared(ci: Interval | None, verdict: str | None = None) -> Paired | None:
    """``ci`` with ``verdict``; None where no interval could be made (fewer than 2 windows)."""
    return None if ci is None else Paired.of(ci, verdict)


def maybe(d: JSON | None) -> Paired | None:
    """The comparison in ``d``; None for null."""
    return None if d is None else Paired.from_dict(d)


def out_of(c: Paired | None) -> JSON | None:
    """``c``'s JSON; null for None."""
    return None if c is None else c.to_dict()


@dataclass(frozen=True)
class Against:
    """A spec paired against the one named ``against`` (YaRN's default, or YaRN at m = 1: what a
    temperature adds); ``paired`` None where no interval could be made. JSON: the comparison's keys
    beside ``against``."""

    against: str
    paired: Paired | None

    def to_dict(self) -> JSON:
        return {"against": self.against, **(self.paired.to_dict() if self.paired else {})}

    @classmethod
    def from_dict(cls, d: JSON) -> Against:
        return cls(d["against"], Paired.from_dict(d) if "value" in d else None)

    @property
    def worse(self) -> bool:
        return self.paired is not None and self.paired.worse


@dataclass(frozen=True)
class Leader:
    """A candidate paired against the race's leader on an axis (``leader``: its name) at a look;
    ``paired`` None where no interval could be made. JSON: the comparison's keys beside ``leader``."""

    leader: str
    paired: Paired | None

    def to_dict(self) -> JSON:
        return {"leader": self.leader, **(self.paired.to_dict() if self.paired else {})}

    @classmethod
    def from_dict(cls, d: JSON) -> Leader:
        return cls(d["leader"], Paired.from_dict(d) if "value" in d else None)


@dataclass(frozen=True)
class RaceComparisons:
    """A candidate's comparisons at the race's last look: its cost below L0 against no change per
    short length (a perplexity ratio, lower is better; keyed by the length as a string), against
    the leader on the objective at N and on keys found, and against ``--min-retrieval``'s floor
    (its share's own interval). A comparison never made is left out of the JSON."""

    short_cost: dict[str, Paired] = field(default_factory=dict)
    objective_vs_leader: Leader | None = None
    retrieval_vs_leader: Leader | None = None
    retrieval_floor: Paired | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"short_cost": {n: c.to_dict() for n, c in self.short_cost.items()}} if self.short_cost else {}
        for name, v in (
            ("objective_vs_leader", self.objective_vs_leader),
            ("retrieval_vs_leader", self.retrieval_vs_leader),
            ("retrieval_floor", self.retrieval_floor),
        ):
            if v is not None:
                out[name] = v.to_dict()
        return out  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> RaceComparisons:
        lead = {k: Leader.from_dict(d[k]) if d.get(k) else None for k in ("objective_vs_leader", "retrieval_vs_leader")}
        short = {n: Paired.from_dict(c) for n, c in d.get("short_cost", {}).items()}
        return cls(short, lead["objective_vs_leader"], lead["retrieval_vs_leader"], maybe(d.get("retrieval_floor")))


@dataclass(frozen=True)
class RetrievalRow:
    """A candidate's keys found by generation in the race at N: ``found`` of ``prompts`` trials, its
    ``share`` with its 95% interval (None with fewer than 2 units: ``share_value`` alone), and it
    against no change and YaRN's default on the trials both answered (differences, higher is
    better; left out where not made)."""

    prompts: int
    found: int
    share: Paired | None
    share_value: float
    vs_no_change: Paired | None = None
    vs_default: Paired | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"prompts": self.prompts, "found": self.found,
                     "share": self.share.to_dict() if self.share else {"value": self.share_value}}  # fmt: skip
        for name, c in (("vs_no_change", self.vs_no_change), ("vs_default", self.vs_default)):
            if c is not None:
                out[name] = c.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: JSON) -> RetrievalRow:
        share = d["share"]
        return cls(d["prompts"], d["found"], Paired.from_dict(share) if "low" in share else None, share["value"],
                   maybe(d.get("vs_no_change")), maybe(d.get("vs_default")))  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One spec on one confirmation check. ``value``: its own figure with its 95% interval, in
    words; ``vs_no_change``: it against no change (None for no change itself, or with no interval);
    ``vs_reference``: against YaRN at m = 1 (a YaRN with a temperature: what the temperature adds);
    ``vs_default``: against YaRN's default; ``vs``: against every other confirmed spec, by name
    (``vs[n].better``: this spec is distinguishably better than ``n`` there)."""

    value: str
    vs_no_change: Paired | None
    vs_reference: Against | None = None
    vs_default: Against | None = None
    vs: dict[str, Paired | None] = field(default_factory=dict)

    def to_dict(self) -> JSON:
        out: JSON = {"value": self.value, "vs_no_change": out_of(self.vs_no_change)}
        if self.vs_reference is not None:
            out["vs_reference"] = self.vs_reference.to_dict()
        if self.vs_default is not None:
            out["vs_default"] = self.vs_default.to_dict()
        return out | {"vs": {n: out_of(c) for n, c in self.vs.items()}}

    @classmethod
    def from_dict(cls, d: JSON) -> Cell:
        ref, default = d.get("vs_reference"), d.get("vs_default")
        return cls(
            d["value"],
            maybe(d["vs_no_change"]),
            None if ref is None else Against.from_dict(ref),
            None if default is None else Against.from_dict(default),
            {n: maybe(c) for n, c in d.get("vs", {}).items()},
        )


@dataclass(frozen=True)
class CheckRow:
    """One confirmation check: each confirmed spec's :class:`Cell` by name, or why it could not be
    scored (``error``; e.g. no key tokens in the second text's windows, or not stored yet)."""

    cells: dict[str, Cell] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> JSON:
        return {"error": self.error} if self.error is not None else {n: c.to_dict() for n, c in self.cells.items()}

    @classmethod
    def from_dict(cls, d: JSON) -> CheckRow:
        return cls(error=d["error"]) if "error" in d else cls({n: Cell.from_dict(c) for n, c in d.items()})


@dataclass(frozen=True)
class Confirmation:
    """The confirmation: a :class:`CheckRow` per check, by the check's label (the objective at N
    first), in the order they were scored."""

    rows: dict[str, CheckRow] = field(default_factory=dict)

    def row(self, label: str | None) -> CheckRow:
        """The check labelled ``label``; an empty row where there is none."""
        return self.rows.get(label or "", CheckRow())

    def cell(self, label: str | None, name: str | None) -> Cell | None:
        """``name``'s cell on the check ``label``; None where the check failed or it was not confirmed."""
        return self.row(label).cells.get(name or "")

    def to_dict(self) -> JSON:
        return {label: r.to_dict() for label, r in self.rows.items()}

    @classmethod
    def from_dict(cls, d: JSON) -> Confirmation:
        return cls({label: CheckRow.from_dict(r) for label, r in d.items()})
