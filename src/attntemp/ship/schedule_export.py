"""Export Mistral 3's position schedule, ``llama_4_scaling_beta``: ``q *= 1 + beta ln(1 + floor(p / L0))``
(Ministral 3, Mistral Large 3, Mistral 4; :class:`attntemp.ops.schedules.Llama4Scaling`).

Every engine has a key for it, each read by some architectures only (read in their sources; not
run here). This module takes the schedule off a spec and checks its parameters; each engine module
(:mod:`attntemp.ship.engines`) writes its own key (``with_schedule``) and says which architectures
read it (``schedule_readers``).
"""

from __future__ import annotations

from typing import Any

from ..ops.geometry import stated_l0
from ..ops.spec import TemperatureSpec
from ..utils import checks

SCHEDULE = "llama_4_scaling"


def scaling_of(spec: TemperatureSpec) -> dict[str, float] | None:
    """``{beta, original_max_position_embeddings}`` of a ``llama_4_scaling`` spec (the defaults filled
    in), None for any other; the rest of the spec is exported as the spec without it (``schedule``
    constant)."""
    if spec.schedule != SCHEDULE:
        return None
    return {"beta": 0.1, "original_max_position_embeddings": 16384.0, **dict(spec.schedule_params)}


def parameters(scaling: dict[str, float], rope: dict[str, Any] | None) -> tuple[float, int]:
    """``(beta, L0)`` of the schedule, checked: beta positive, L0 the rope's (engines read one
    ``original_max_position_embeddings`` for both)."""
    beta = checks.positive("schedule_params.beta", float(scaling["beta"]))
    name = "schedule_params.original_max_position_embeddings"
    l0 = checks.positive_int(name, int(stated_l0(scaling)))
    given = stated_l0(rope)
    if given is not None and int(given) != l0:
        raise ValueError(
            f"{name}={l0} differs from the rope's "
            f"original_max_position_embeddings={given}; the engines read one L0 for both"
        )
    return beta, l0
