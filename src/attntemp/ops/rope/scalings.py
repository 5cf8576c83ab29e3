"""What ``--rope`` takes (sweep, tune): the RoPE extensions whose settings follow from the scale
s = N / L0 alone, and those settings in transformers' keys (linear: Chen et al. 2023,
arXiv:2306.15595; ntk and dynamic: bloc97's NTK-aware scaling; yarn: Peng et al. 2023,
arXiv:2309.00071). Plain dicts, importable without torch (a config's help lists
:data:`SCALINGS`); :mod:`attntemp.hf.rope_scaling` puts them on a model."""

from __future__ import annotations

from typing import Any

from ...utils import checks

SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn")  # what `--rope` takes: s from the length alone


def rope_for(method: str, length: int, trained_length: int) -> dict[str, Any] | None:
    """The RoPE extension for ``length``: scale s = length / trained length (at least 1).

    YaRN's own attention factor is set to 1, so the swept multiplier is the whole logit
    multiplier (YaRN's default temperature is m = (0.1 ln s + 1)^2 on that axis)."""
    return rope_at_scale(method, max(1.0, length / trained_length), trained_length)


def rope_at_scale(method: str, s: float, trained_length: int) -> dict[str, Any] | None:
    """:func:`rope_for` at scale ``s`` (= length / trained length), given once by the caller."""
    checks.choice("rope", method, SCALINGS)
    if method == "none":
        return None
    params: dict[str, Any] = {"rope_type": method, "factor": s}
    if method == "yarn":
        params.update(original_max_position_embeddings=trained_length, attention_factor=1.0)
    return params
