"""The NTK-aware RoPE base, in one place (bloc97, "NTK-Aware Scaled RoPE", 2023; its dynamic form:
emozilla, "Dynamically Scaled RoPE", 2023; both as transformers' ``modeling_rope_utils`` computes
them). Plain numbers, importable without torch: the RoPE functions (:mod:`.functions`), the
transformers settings (:mod:`attntemp.hf.rope_scaling`), the engine readings and exports and advise's
candidates all read these.

Static NTK raises the base so that the lowest frequency is divided by ``alpha``, the highest kept:
``base' = base * alpha^(d / (d - 2))`` (d the rotary dimension). Dynamic NTK sets alpha from the
current length ``L >= L0``: ``alpha = s L / L0 - (s - 1)``, which is ``s^2 - s + 1`` at ``L = s L0``
(what vLLM 0.11-0.21 and SGLang apply at every position for ``rope_type: dynamic``).
"""

from __future__ import annotations


def ntk_base(base: float, alpha: float, dim: int) -> float:
    """The static NTK-aware base ``base * alpha^(dim / (dim - 2))`` for rotary dimension ``dim``."""
    return base * alpha ** (dim / (dim - 2))


def dynamic_alpha(s: float, length: int | float, l0: int) -> float:
    """Dynamic NTK's alpha at ``length`` tokens (scale ``s``, trained length ``l0``): ``s L / L0 - (s - 1)``
    with ``L = max(length, L0)``, so 1 up to L0."""
    return s * max(length, l0) / l0 - (s - 1)


def alpha_at_scale(s: float) -> float:
    """Dynamic NTK's alpha at ``L = s L0``, ``s^2 - s + 1`` (:func:`dynamic_alpha`): the static NTK
    alpha that reads as transformers' dynamic base at the length it extends to."""
    return s * s - s + 1.0
