"""What advise answers: the headline, each engine's answer and its routes (:mod:`attntemp.advise.records`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from ...ops.spec import TemperatureSpec
from .comparisons import JSON, Against, Paired, maybe, out_of

# an engine's answer: its pick held; nothing held (no change); nothing carried meets both limits; no pick
Status = Literal["recommended", "nothing beats the baseline", "trade-off", "undecided"]
RECOMMENDED: Status = "recommended"
BASELINE_HELD: Status = "nothing beats the baseline"
TRADE_OFF: Status = "trade-off"
UNDECIDED: Status = "undecided"


@dataclass(frozen=True)
class Cost:
    """A spec's worst cost below the trained length: ``paired`` against no change (all-token
    perplexity ratio, lower is better) on the check ``label`` at ``length`` tokens."""

    label: str
    length: int
    paired: Paired

    def to_dict(self) -> JSON:
        return {"label": self.label, "length": self.length, **self.paired.to_dict()}

    @classmethod
    def from_dict(cls, d: JSON) -> Cost:
        return cls(d["label"], d["length"], Paired.from_dict(d))


@dataclass(frozen=True)
class Axis:
    """The pick on one axis at N (the objective, keys found): the check's ``label``, ``task`` and
    ``metric``, its own ``value`` in words (None where the check failed), and it against no change
    and against YaRN's default."""

    label: str
    task: str
    metric: str
    value: str | None
    vs_no_change: Paired | None
    vs_default: Against | None

    def to_dict(self) -> JSON:
        return {"label": self.label, "task": self.task, "metric": self.metric, "value": self.value,
                "vs_no_change": out_of(self.vs_no_change),
                "vs_default": None if self.vs_default is None else self.vs_default.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> Axis:
        default = d["vs_default"]
        return cls(d["label"], d["task"], d["metric"], d["value"], maybe(d["vs_no_change"]),
                   None if default is None else Against.from_dict(default))  # fmt: skip


@dataclass(frozen=True)
class BetterElsewhere:
    """A confirmed spec (``name``) distinguishably better than the pick on the axis ``label``
    (``task``, ``metric``): ``vs`` is it against the pick (its verdict "better")."""

    label: str
    task: str
    metric: str
    name: str
    vs: Paired

    def to_dict(self) -> JSON:
        return {"label": self.label, "task": self.task, "metric": self.metric, "name": self.name,
                "vs": self.vs.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> BetterElsewhere:
        return cls(d["label"], d["task"], d["metric"], d["name"], Paired.from_dict(d["vs"]))


@dataclass(frozen=True)
class Headline:
    """What the report says first about a pick: per axis at N its comparisons, every spec better
    than it on an axis, its worst cost below L0, and whether it finds fewer keys than YaRN's
    default (distinguishably)."""

    axes: tuple[Axis, ...] = ()
    better_elsewhere: tuple[BetterElsewhere, ...] = ()
    cost: Cost | None = None
    below_default_on_retrieval: bool = False

    def to_dict(self) -> JSON:
        return {"axes": [a.to_dict() for a in self.axes],
                "better_elsewhere": [b.to_dict() for b in self.better_elsewhere],
                "cost": None if self.cost is None else self.cost.to_dict(),
                "below_default_on_retrieval": self.below_default_on_retrieval}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> Headline:
        cost = d["cost"]
        return cls(tuple(Axis.from_dict(a) for a in d["axes"]),
                   tuple(BetterElsewhere.from_dict(b) for b in d["better_elsewhere"]),
                   None if cost is None else Cost.from_dict(cost), d["below_default_on_retrieval"])  # fmt: skip


@dataclass(frozen=True)
class CostAllowed:
    """The confirmed spec best on the objective at N (``name``) when the short-cost limit ruled it
    out: its ``gain`` against no change and its ``worst_cost`` below L0 (ratio, lower is better)."""

    name: str
    gain: Paired
    worst_cost: Paired | None

    def to_dict(self) -> JSON:
        return {"name": self.name, "gain": self.gain.to_dict(), "worst_cost": out_of(self.worst_cost)}

    @classmethod
    def from_dict(cls, d: JSON) -> CostAllowed:
        return cls(d["name"], Paired.from_dict(d["gain"]), maybe(d["worst_cost"]))


@dataclass(frozen=True)
class TradeOffPick:
    """One side of a trade-off: the spec ``name``, its keys found against YaRN's default (higher is
    better; None where not measured) and its worst cost below L0."""

    name: str
    vs_default: Against | None
    cost: Cost | None

    def to_dict(self) -> JSON:
        return {"name": self.name, "vs_default": None if self.vs_default is None else self.vs_default.to_dict(),
                "cost": None if self.cost is None else self.cost.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: JSON) -> TradeOffPick:
        default, cost = d["vs_default"], d["cost"]
        return cls(d["name"], None if default is None else Against.from_dict(default),
                   None if cost is None else Cost.from_dict(cost))  # fmt: skip


@dataclass(frozen=True)
class TradeOff:
    """Nothing an engine carries meets both limits: the ``sentence`` that says so with numbers, the
    best retrieval at its cost and the lowest cost at its retrieval."""

    sentence: str
    best_retrieval: TradeOffPick | None
    lowest_cost: TradeOffPick | None

    def to_dict(self) -> JSON:
        sides = {"best_retrieval": self.best_retrieval, "lowest_cost": self.lowest_cost}
        return {"sentence": self.sentence, **{k: None if v is None else v.to_dict() for k, v in sides.items()}}

    @classmethod
    def from_dict(cls, d: JSON) -> TradeOff:
        best, cheap = d["best_retrieval"], d["lowest_cost"]
        return cls(d["sentence"], None if best is None else TradeOffPick.from_dict(best),
                   None if cheap is None else TradeOffPick.from_dict(cheap))  # fmt: skip


ROUTE_FIELDS = ("settings", "command", "spec", "why")


@dataclass(frozen=True)
class Route:
    """How an engine carries a spec (:mod:`.carry`): ``how`` ("nothing", "settings", "nearest",
    "bake", "remote code", "not carried"), its ``settings`` or ``command``, the ``spec`` it carries
    in its place (nearest, or the equivalent baked; JSON), ``why``, and for ``nearest`` the key of
    the raced candidate that reads alike (``reads_as``; JSON ``as``, null where none was raced)."""

    how: str
    settings: str | None = None
    command: str | None = None
    spec: JSON | None = None
    why: str | None = None
    reads_as: str | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"how": self.how}
        out |= {
            k: v
            for k, v in zip(ROUTE_FIELDS, (self.settings, self.command, self.spec, self.why), strict=True)
            if v is not None
        }
        return out | ({"as": self.reads_as} if self.how == "nearest" else {})

    @classmethod
    def from_dict(cls, d: JSON) -> Route:
        spec = d.get("spec")  # a TemperatureSpec where carry hands one over, its JSON in a file
        spec = spec.to_dict() if isinstance(spec, TemperatureSpec) else spec
        return cls(d["how"], d.get("settings"), d.get("command"), spec, d.get("why"), d.get("as"))


def routes(engines: dict[str, JSON]) -> dict[str, Route]:
    """A candidate's routes by engine, as :mod:`.carry` gives them."""
    return {e: Route.from_dict(r) for e, r in engines.items()}


@dataclass(frozen=True)
class OwnRace:
    """The race an engine had of its own (it computes none of the first race's survivors as
    meant): its status, the windows it scored and its survivors' names."""

    status: str
    windows: int
    survivors: tuple[str, ...]

    def to_dict(self) -> JSON:
        return {"status": self.status, "windows": self.windows, "survivors": list(self.survivors)}

    @classmethod
    def from_dict(cls, d: JSON) -> OwnRace:
        return cls(d["status"], d["windows"], tuple(d["survivors"]))


@dataclass(frozen=True)
class EngineAdvice:
    """One engine's answer. ``status``: "recommended" (``name`` held: run it), "nothing beats the
    baseline" (``name`` is no change), "trade-off" (no ``name``; ``trade_off`` says both sides) or
    "undecided" (no ``name``; the budget ran out). With a ``name``: ``evidence`` (its comparison
    with no change in words), ``spec``, its ``engines`` routes and its ``headline``; ``still_in``:
    the specs left undecided or weighed in the trade-off; ``if_cost_allowed``: what the short-cost
    limit gave up; ``race``: the engine's own race, where it had one."""

    name: str | None
    status: Status
    why: str
    evidence: str | None = None
    spec: TemperatureSpec | None = None
    engines: dict[str, Route] | None = None
    trade_off: TradeOff | None = None
    still_in: tuple[str, ...] | None = None
    if_cost_allowed: CostAllowed | None = None
    headline: Headline | None = None
    race: OwnRace | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"name": self.name, "status": self.status, "why": self.why}
        if self.evidence is not None:
            out["evidence"] = self.evidence
        if self.spec is not None:
            out["spec"] = self.spec.to_dict()
        if self.engines is not None:
            out["engines"] = {e: r.to_dict() for e, r in self.engines.items()}
        if self.trade_off is not None:
            out["trade_off"] = self.trade_off.to_dict()
        if self.still_in is not None:
            out["still_in"] = list(self.still_in)
        out["if_cost_allowed"] = None if self.if_cost_allowed is None else self.if_cost_allowed.to_dict()
        if self.headline is not None:
            out["headline"] = self.headline.to_dict()
        return out | ({"race": self.race.to_dict()} if self.race is not None else {})

    @classmethod
    def from_dict(cls, d: JSON) -> EngineAdvice:
        def opt(key: str, read: Any) -> Any:
            return None if d.get(key) is None else read(d[key])

        return cls(
            d["name"], cast(Status, d["status"]), d["why"], d.get("evidence"), opt("spec", TemperatureSpec.from_dict),
            opt("engines", routes), opt("trade_off", TradeOff.from_dict), opt("still_in", tuple),
            opt("if_cost_allowed", CostAllowed.from_dict), opt("headline", Headline.from_dict),
            opt("race", OwnRace.from_dict),
        )  # fmt: skip
