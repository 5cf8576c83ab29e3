"""``attntemp sweep``'s config: its flags, help and checks, and the rule that keys a multiplier in
sweep.db (:func:`mkey`). Importable without torch (``--help`` builds from it); the store is
:mod:`.store`, the runner :mod:`.run`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...ops.rope.scalings import SCALINGS
from ...utils import checks, options
from ...utils.options import option
from ..task_base import TASK_NAMES, EvalOptions


@dataclass(frozen=True, kw_only=True)
class SweepConfig(EvalOptions):
    """``attntemp sweep`` and :func:`run_sweep`: every (length, rope, multiplier, task) point."""

    out: str = option(help="output folder (sweep.db; a rerun resumes it)")
    lengths: tuple[int, ...] = option((512, 1024), "tokens per window, comma list", parse=options.ints)
    rope: tuple[str, ...] = option(
        ("none", "yarn"),
        f"RoPE extensions, comma list of {', '.join(SCALINGS)} (s = length / trained length)",
        parse=options.names,
    )
    multipliers: tuple[float, ...] = option(
        (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4),
        "logit multipliers m = 1/T: LO:HI:STEP or a comma list",
        parse=options.multipliers,
    )
    tasks: tuple[str, ...] = option(("perplexity",), f"comma list of {', '.join(TASK_NAMES)}", parse=options.names)
    batched: bool = option(True, "one forward per multiplier (no batching)", flag="--sequential", invert=True)
    trained_length: int | None = option(None, "the model's trained context L0 (default: from its config)", parse=int)
    workers: int = option(1, "Ray workers, one model each (one GPU each where there are GPUs); > 1 starts a local Ray")
    ray_address: str | None = option(None, "join this Ray cluster (e.g. auto, or HOST:6379) instead of a local one")

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, n in enumerate(self.lengths):
            checks.positive_int(f"lengths[{i}]", n)
        for r in self.rope:
            checks.choice("rope", r, SCALINGS)
        for i, t in enumerate(self.tasks):
            checks.choice(f"tasks[{i}]", t, TASK_NAMES)
        for i, m in enumerate(self.multipliers):
            options.check_multiplier(f"multipliers[{i}]", m)
        for name in ("lengths", "rope", "tasks", "multipliers"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty; give at least one value")
        distinct_keys("multipliers", self.multipliers)
        if self.trained_length is not None:
            checks.positive_int("trained_length", self.trained_length)
        checks.positive_int("workers", self.workers)


def mkey(m: float) -> str:
    return f"{m:.6g}"


def distinct_keys(name: str, values: Sequence[float]) -> None:
    """Raise when two multipliers share a database key (the same to 6 significant digits)."""
    seen: dict[str, float] = {}
    for i, m in enumerate(values):
        if mkey(m) in seen and seen[mkey(m)] != m:
            raise ValueError(
                f"{name}[{i}]={m!r} and {seen[mkey(m)]!r} are the same to 6 significant digits, which is how "
                "sweep.db keys a point; give multipliers that differ within 6 digits"
            )
        seen[mkey(m)] = m
