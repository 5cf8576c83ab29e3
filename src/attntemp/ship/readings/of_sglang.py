"""SGLang's reading, read in the sglang 0.5.23 wheel.

``sglang/srt/layers/rotary_embedding/factory.py`` (``get_rope``: the keys each class gets),
``rope_variant.py`` (``DynamicNTKScalingRotaryEmbedding``: alpha = s^2 - s + 1 at every position, a
cache of s L rows; ``Phi3LongRoPEScaledRotaryEmbedding``: ``torch.any(positions > original)`` switches
every token of the forward batch to the long factors), ``yarn.py`` (``YaRNScalingRotaryEmbedding``: the
mscale/mscale_all_dim ratio when both are given, else 0.1 ln s + 1, times SGLang's ``attn_factor``; HF's
``attention_factor`` is not forwarded on this generic path), ``srt/utils/hf_transformers/common.py``
``get_context_length`` (``max_position_embeddings`` times ``factor`` unless the rope has
``original_max_position_embeddings`` or is llama3) and ``srt/configs/model_config.py``
``_derive_context_length`` (a longer ``--context-length`` is refused without
``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``).
"""

from __future__ import annotations

from ...ops import rope
from ...ops.geometry import stated_l0
from ...ops.rope.bases import ntk_base
from ...ops.schedules import yarn_mscale
from .base import (
    STATIC,
    Found,
    Handed,
    Reader,
    dropped,
    factors,
    past_limit,
    plain_inv_freq,
    refusal,
    sqrt_scale,
    unread,
)
from .of_transformers import COMMON_KEYS
from .of_vllm import LONGROPE_KEYS

SGLANG_SOURCE = (
    "sglang 0.5.23 wheel: sglang/srt/layers/rotary_embedding/ (factory.py get_rope, rope_variant.py, yarn.py) + "
    "srt/utils/hf_transformers/common.py get_context_length + srt/configs/model_config.py"
)
SGLANG_KNOWN = ("default", "linear", "dynamic", "yarn", "longrope")
YARN_KEYS = COMMON_KEYS | {
    "factor",
    "original_max_position_embeddings",
    "extrapolation_factor",
    "attn_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
}


def sglang_context(handed: Handed) -> int:
    """``get_context_length``: ``max_position_embeddings`` times ``factor``, unless the rope states
    ``original_max_position_embeddings`` (or is llama3)."""
    scaled = "factor" in handed.rope and stated_l0(handed.rope) is None
    return round(handed.max_positions * handed.factor()) if scaled else handed.max_positions


def sglang_yarn(handed: Handed) -> Found:
    """YaRN with SGLang's keys: the mscale ratio only when both keys are given, times ``attn_factor``."""
    r = handed.rope
    s = handed.factor(1.0)
    inv, _ = rope.yarn(
        handed.dim, handed.base, s, handed.orig, float(r.get("beta_fast", 32)), float(r.get("beta_slow", 1)),
        bool(r.get("truncate", True)),
    )  # fmt: skip
    mscale, all_dim = r.get("mscale"), r.get("mscale_all_dim")
    if mscale is not None and all_dim is not None:  # the ratio whenever both are given, 0 too
        af = yarn_mscale(s, float(mscale)) / yarn_mscale(s, float(all_dim))
    else:
        af = yarn_mscale(s)
    return Found(inv, af * float(r.get("attn_factor", 1)), STATIC, dropped(handed, YARN_KEYS))


def sglang_longrope(handed: Handed, n: int) -> Found:
    """Long factors for every token of the forward batch iff any position exceeds the original length."""
    r, l0 = handed.rope, handed.orig
    long = n - 1 > l0  # one request: its largest position is n - 1
    key = "long_factor" if long else "short_factor"
    af = float(r.get("long_mscale" if long else "short_mscale") or sqrt_scale(handed.max_positions / l0, l0))
    switch = (
        f"per forward batch: long_factor for every token of every request in the batch iff any position > "
        f"original_max_position_embeddings = {l0} (so n > {l0 + 1}), cached keys not re-rotated"
    )
    return Found(plain_inv_freq(handed) / factors(handed, key), af, switch, dropped(handed, LONGROPE_KEYS))


def sglang_0_5(handed: Handed, n: int) -> Found:
    """SGLang 0.5.x (read in 0.5.23)."""
    kind = handed.kind
    if kind not in SGLANG_KNOWN:
        raise unread(handed, "SGLang", SGLANG_KNOWN)
    derived = sglang_context(handed)
    limit = derived if handed.limit is None else handed.limit
    if limit > derived:
        return refusal(handed, f"--context-length {limit} > the derived context_length {derived} at load "
                               "(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 overrides)")  # fmt: skip
    if past_limit(n, limit, "context_length"):
        return refusal(handed, past_limit(n, limit, "context_length"))
    if kind == "dynamic":
        s = handed.factor(1.0)
        alpha = s * s - s + 1
        switch = f"never: alpha = s^2 - s + 1 = {alpha:.6g} at every position, prompts under L0 too"
        return Found(
            plain_inv_freq(handed, ntk_base(handed.base, alpha, handed.dim)),
            1.0,
            switch,
            dropped(handed, COMMON_KEYS | {"factor"}),
        )
    if kind == "yarn":
        return sglang_yarn(handed)
    if kind == "longrope":
        return sglang_longrope(handed, n)
    if kind == "linear":
        return Found(plain_inv_freq(handed) / handed.factor(1.0), dropped=dropped(handed, COMMON_KEYS | {"factor"}))
    return Found(plain_inv_freq(handed), dropped=dropped(handed, COMMON_KEYS))


SGLANG = Reader("SGLang", "0.5.x", SGLANG_SOURCE, sglang_0_5)
