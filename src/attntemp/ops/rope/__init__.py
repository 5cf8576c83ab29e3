"""RoPE's wing of ``ops``: one function per RoPE type, each returning ``(inv_freq, attention_factor)``
(:mod:`.functions`, whose names this package gives too: ``attntemp.ops.rope.yarn`` is
``attntemp.ops.rope.functions.yarn``), the typed extension a spec holds (:mod:`.params`:
:class:`~.params.Rope`), and LongRoPE's per-pair factors (:mod:`.factors`)."""

from .functions import (
    EXTENSIONS,
    ROPE_FUNCTIONS,
    RopeResult,
    compute_inv_freq,
    cos_sin_factor,
    cos_sin_multiplier,
    default,
    dynamic,
    linear,
    llama3,
    longrope,
    longrope_attention_factor,
    ntk,
    yarn,
    yarn_attention_factor,
)

__all__ = [
    "EXTENSIONS",
    "ROPE_FUNCTIONS",
    "RopeResult",
    "compute_inv_freq",
    "cos_sin_factor",
    "cos_sin_multiplier",
    "default",
    "dynamic",
    "linear",
    "llama3",
    "longrope",
    "longrope_attention_factor",
    "ntk",
    "yarn",
    "yarn_attention_factor",
]
