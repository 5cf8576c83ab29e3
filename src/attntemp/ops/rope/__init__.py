"""RoPE's wing of ``ops``: one function per RoPE type, each returning ``(inv_freq, attention_factor)``
(:mod:`.functions`, whose names this package gives too: ``attntemp.ops.rope.yarn`` is
``attntemp.ops.rope.functions.yarn``), the typed extension a spec holds (:mod:`.params`:
:class:`~.params.Rope`), and LongRoPE's per-pair factors (:mod:`.factors`).

The function names are read from :mod:`.functions` on first use (PEP 562), so that importing one
module of the wing (:mod:`.scalings`, which a config's ``--help`` needs) runs none of the others."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.functions"), name)
