"""What ``attntemp advise`` races at a serving length N, and how each engine carries each one.

At a trained length L0 and s = N / L0 > 1 the candidates are, simplest first (the order breaks
ties: of candidates no interval tells apart, the simpler one is recommended):

- no change (m = 1, no RoPE change): the baseline every comparison is made against;
- softening, constant (m = 0.9, T = 1.11) and gated past L0 (``log_length`` with a = 0 and b
  = ln 0.9 / ln s: m = 1 up to L0, 0.9 at N): the claim that softer attention recovers distant
  context;
- sharpening gated past L0: Qwen's log-n (m = log_L0 p past L0; Qwen v1 ``use_logn_attn``);
- dynamic NTK (RoPE base grown with the sequence, nothing changes up to L0; transformers
  ``dynamic``);
- static NTK at an explicit ``rope_theta`` (theta alpha^(d / (d - 2)), alpha = s^2 - s + 1: what
  vLLM 0.11-0.21 and SGLang make of ``dynamic`` at every position);
- YaRN's frequencies past L0 only, in stock settings: ``rope_type: longrope`` with ``short_factor``
  all 1 and ``long_factor`` YaRN's per-pair divisors (LongRoPE, arXiv:2402.13753, as the carrier),
  ``attention_factor`` 1 or YaRN's cos/sin factor, or YaRN's m gated past L0 (``gated_constant``:
  on the queries that see more than L0 keys). transformers switches the frequencies per forward
  by the sequence length, so a prompt under L0 runs the model as trained (one that generates past
  L0 switches part way);
- YaRN at s with m = 1, with YaRN's m = (0.1 ln s + 1)^2 (arXiv:2309.00071 eq. 22), with a global
  m tuned on windows the race does not score, and with log-n on top; YaRN at a smaller scale
  s' = (1 + s) / 2 (less interpolation, less cost below L0).

Each candidate has a stable :attr:`Candidate.key` (``baseline``, ``yarn``, ``yarn+m``, ...): code
finds candidates by key, never by their display name.

Up to L0 (N <= L0: no extension needed) only the temperature is checked: no change, m = 0.9 and
m = 1.1. How each engine carries each candidate is :mod:`.carry`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..ops import rope as rope_math
from ..ops.geometry import FULL, ModelGeometry
from ..ops.rope.bases import alpha_at_scale, ntk_base
from ..ops.rope.factors import init_factors, longrope_parameters
from ..ops.rope.scalings import rope_at_scale
from ..ops.schedules import yarn_multiplier
from ..ops.spec import TemperatureSpec
from ..utils import options

SOFT = 0.9  # the softening multiplier raced (T = 1.11)
SHARP = 1.1  # the sharpening multiplier raced at or below the trained length
BASELINE = "no change"  # its label in reports and evidence.json
BASELINE_KEY = "baseline"  # its id in code


@dataclass(frozen=True)
class Candidate:
    """A spec in the race: its name, what it is, and whether it changes anything up to L0."""

    name: str
    spec: TemperatureSpec
    family: str  # baseline, softening, sharpening, rope, rope + temperature
    gated: bool  # nothing changes up to the trained length
    note: str = ""
    engines: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)
    key: str = ""  # the stable id code finds it by (baseline, yarn, yarn+m, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "family": self.family,
            "gated": self.gated,
            "note": self.note,
            "spec": self.spec.to_dict(),
            "engines": self.engines,
        }


def _yarn(s: float, trained: int) -> dict[str, Any]:
    """YaRN's RoPE setting at scale ``s`` (transformers' keys: :func:`attntemp.hf.rope_scaling.rope_at_scale`)."""
    rope = rope_at_scale("yarn", s, trained)
    assert rope is not None
    return rope


def scale_of(s: float, trained: int, name: str) -> float:
    """``s`` as the scale N / L0 these functions take since 0.2.0; a value of at least ``trained``
    is the length they took before (N, as in ``candidates(512, 256)``), read as such with a
    DeprecationWarning (no model is extended to L0 squared)."""
    if s >= trained > 1:
        options.deprecated(f"{name}(length, trained, ...)", f"{name}(length / trained, trained, ...)", stacklevel=4)
        return s / trained
    return float(s)


def rotary(config: dict[str, Any] | None) -> tuple[int, float] | None:
    """(rotary dim, rope_theta) of the model's global (full-attention) layers; None unknown."""
    if not config:
        return None
    try:
        geometry = ModelGeometry.from_config(config)
        return geometry.rotary_dim, float(geometry.rope[FULL]["rope_theta"])
    except (ValueError, KeyError, TypeError):
        return None


def rope_reaches(config: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The layer types a spec's RoPE scaling reaches when it is not every layer: on a model whose RoPE
    is per layer type (Gemma 3: the sliding layers keep their own theta, unscaled) the full-attention
    ones, so YaRN's m goes there too, as transformers' YaRN attention_factor does; None: every layer."""
    if not config:
        return None
    try:
        geometry = ModelGeometry.from_config(config)
    except (ValueError, KeyError, TypeError):
        return None
    return (FULL,) if len(geometry.rope) > 1 else None


def yarn_past_l0(s: float, trained: int, dim: int, base: float, multiplier: float = 1.0) -> dict[str, Any]:
    """YaRN's frequencies past L0 only: a ``longrope`` dict, ``short_factor`` 1, ``long_factor`` YaRN's
    per-pair divisor ``inv_freq / inv_freq_yarn`` (arXiv:2309.00071 eq. 15-16), ``attention_factor``
    sqrt(``multiplier``) on cos and sin (so ``multiplier`` on the logits, at every position)."""
    s = scale_of(s, trained, "yarn_past_l0")
    long = init_factors("yarn", dim, base, s, trained)  # [d/2]
    return longrope_parameters(long, s, trained, rope_math.cos_sin_factor(multiplier))


def extension_candidates(
    s: float, trained: int, geometry: tuple[int, float] | None = None, reaches: tuple[str, ...] | None = None
) -> list[Candidate]:
    """The candidates past the trained length at scale ``s`` = N / L0 > 1, simplest first; those
    that need the rotary dim and theta (static NTK, YaRN past L0) only with ``geometry``. YaRN's m
    goes on the layers the RoPE reaches (``reaches``, :func:`rope_reaches`; every layer when None),
    so "YaRN's m" is YaRN's default on a model with sliding layers too."""
    s = scale_of(s, trained, "extension_candidates")
    on: dict[str, Any] = {"layer_types": list(reaches)} if reaches else {}
    yarn = _yarn(s, trained)
    gate_b = math.log(SOFT) / math.log(s)  # m = (n / L0)^b: 1 up to L0, SOFT at n = length
    logn: dict[str, Any] = {"schedule": "logn", "schedule_params": {"trained_len": trained}}
    smaller = 1.0 + (s - 1.0) / 2.0
    m_yarn = yarn_multiplier(s)
    out = [
        Candidate(BASELINE, TemperatureSpec(), "baseline", True, key=BASELINE_KEY),
        Candidate(f"softer m = {SOFT:g}", TemperatureSpec(multiplier=SOFT), "softening", False, key="soft"),
        Candidate(
            f"softer past L0 (m = {SOFT:g} at N)",
            TemperatureSpec(schedule="log_length", schedule_params={"trained_len": trained, "b": gate_b}),
            "softening",
            True,
            f"ln m = {gate_b:.4g} ln(n / L0) past L0",
            key="soft-past-l0",
        ),
        Candidate(
            "sharper past L0 (log-n)",
            TemperatureSpec(**logn),
            "sharpening",
            True,
            "Qwen's m = log_L0(p)",
            key="logn-past-l0",
        ),
        Candidate(
            f"dynamic NTK s = {s:g}",
            TemperatureSpec(rope=rope_at_scale("dynamic", s, trained)),
            "rope",
            True,
            key="dynamic",
        ),
    ]
    if geometry is not None:
        alpha, (dim, base) = alpha_at_scale(s), geometry
        out.append(
            Candidate(
                f"static NTK, rope_theta = {ntk_base(base, alpha, dim):.4g}",
                TemperatureSpec(rope={"rope_type": "ntk", "factor": alpha}),
                "rope",
                False,
                f"alpha = s^2 - s + 1 = {alpha:g} at every position (what vLLM 0.11-0.21 and SGLang make of dynamic)",
                key="ntk-static",
            )
        )
        out += [
            Candidate(
                f"YaRN past L0 (longrope), m = {m:.4g}",
                TemperatureSpec(rope=yarn_past_l0(s, trained, dim, base, m)),
                "rope" if m == 1 else "rope + temperature",
                m == 1,
                "YaRN's frequencies past L0 only" + ("" if m == 1 else "; its attention_factor at every position"),
                key=key,
            )
            for m, key in ((1.0, "yarn-past-l0"), (m_yarn, "yarn-past-l0+m"))
        ]
        gate: dict[str, Any] = {
            "schedule": "gated_constant",
            "schedule_params": {"trained_len": trained, "multiplier": m_yarn},
        }
        out.append(
            Candidate(
                f"YaRN past L0 (longrope), m = {m_yarn:.4g} past L0",
                TemperatureSpec(rope=yarn_past_l0(s, trained, dim, base), **gate, **on),
                "rope + temperature",
                True,
                "YaRN's frequencies and YaRN's m past L0 only (m on the queries that see more than L0 keys)",
                key="yarn-past-l0+gated-m",
            )
        )
    return [
        *out,
        Candidate(f"{yarn_label(s)}, m = 1", TemperatureSpec(rope=yarn), "rope", False, key="yarn"),
        Candidate(
            f"{yarn_label(s)}, YaRN's m = {m_yarn:.4g}",
            TemperatureSpec(multiplier=m_yarn, rope=yarn, **on),
            "rope + temperature",
            False,
            key="yarn+m",
        ),
        Candidate(
            f"{yarn_label(s)} + log-n", TemperatureSpec(rope=yarn, **logn), "rope + temperature", False, key="yarn+logn"
        ),
        Candidate(
            f"{yarn_label(smaller)}, m = 1",
            TemperatureSpec(rope=_yarn(smaller, trained)),
            "rope",
            False,
            key="yarn-smaller",
        ),
    ]


def temperature_candidates() -> list[Candidate]:
    """At or below the trained length: the temperature alone."""
    return [
        Candidate(BASELINE, TemperatureSpec(), "baseline", True, key=BASELINE_KEY),
        Candidate(f"softer m = {SOFT:g}", TemperatureSpec(multiplier=SOFT), "softening", False, key="soft"),
        Candidate(f"sharper m = {SHARP:g}", TemperatureSpec(multiplier=SHARP), "sharpening", False, key="sharp"),
    ]


def tuned_yarn(s: float, trained: int, m: float) -> Candidate:
    """YaRN at ``s`` with the global m a search found (on windows the race does not score)."""
    s = scale_of(s, trained, "tuned_yarn")
    return Candidate(
        f"{yarn_label(s)}, tuned m",
        TemperatureSpec(multiplier=m, rope=_yarn(s, trained)),
        "rope + temperature",
        False,
        f"m = {m:.4g} tuned on the tuning pool's spare windows",
        key="yarn+tuned",
    )


def yarn_label(s: float) -> str:
    """What the name of every YaRN candidate at scale ``s`` starts with."""
    return f"YaRN s = {s:g}"


def candidates(
    s: float, trained: int, geometry: tuple[int, float] | None = None, reaches: tuple[str, ...] | None = None
) -> list[Candidate]:
    """The race's candidates at scale ``s`` = N / L0 (the plan's :attr:`~.plan.AdvisePlan.scale`)
    for a model trained to ``trained`` tokens (``geometry``: its rotary dim and theta, :func:`rotary`;
    ``reaches``: the layer types its RoPE scaling reaches, :func:`rope_reaches`)."""
    s = scale_of(s, trained, "candidates")
    return extension_candidates(s, trained, geometry, reaches) if s > 1 else temperature_candidates()


def by_key(cands: Any, key: str) -> Any:
    """The candidate (or race entry: anything with ``.key`` or ``.candidate.key``) of ``key``; None."""
    return next((c for c in cands if getattr(c, "candidate", c).key == key), None)
