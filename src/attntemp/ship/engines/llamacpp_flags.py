"""llama.cpp's export read back: the flags (and GGUF tensors) an export writes, as llama.cpp's reading
(:mod:`attntemp.ship.readings.of_llamacpp`) takes them, so :mod:`.routes` checks what llama.cpp computes."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

from ..readings import GGUF_FACTOR, Handed
from .base import ExportResult


def handed_to_llamacpp(result: ExportResult, model: Handed) -> Handed:
    """What llama.cpp is handed by the flags (and GGUF tensors) of an export, on a GGUF converted from
    the model without scaling: as :mod:`attntemp.ship.readings.of_llamacpp` takes it."""
    args, rope_given = list(result.args), dict[str, Any]()
    positions, limit = model.positions, None
    for flag, value in pairwise(args):
        if flag == "--rope-scaling":
            rope_given["rope_type"] = value
        elif flag == "--rope-scale":
            rope_given["factor"] = float(value)
        elif flag == "--yarn-orig-ctx":
            rope_given["original_max_position_embeddings"] = int(value)
        elif flag == "--rope-freq-base":
            rope_given["rope_theta"] = float(value)
        elif flag == "--ctx-size":
            limit = int(value)
        elif flag in ("--yarn-beta-fast", "--yarn-beta-slow", "--yarn-attn-factor"):
            rope_given[flag] = float(value)
        elif flag == "--override-kv" and ".rope.scaling.attn_factor=float:" in value:
            rope_given[GGUF_FACTOR] = float(value.split("=float:")[1])
        elif flag == "--override-kv" and ".context_length=int:" in value:
            positions = int(value.split("=int:")[1])
    rope_given.update(result.gguf_tensors or {})
    return replace(model, rope=rope_given, positions=positions, limit=limit)
