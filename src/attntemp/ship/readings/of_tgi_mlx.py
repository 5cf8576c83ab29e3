"""TGI's and MLX-LM's readings.

TGI: huggingface/text-generation-inference at db931fcf (v3.3.7 + 1, in maintenance mode),
``server/text_generation_server/layers/rotary.py`` (``PositionRotaryEmbedding.static``: dynamic's base
from the batch's ``max_s`` once it exceeds ``max_position_embeddings``, the table only growing; yarn with
``attn_factor=1, beta_fast=32, beta_slow=1`` and the ``mscale``/``mscale_all_dim`` ratio, defaults 1 and
0; longrope's ``SuRotaryEmbedding``: short factors for positions below the original length and long
ones from it, in one sequence, cos/sin times ``sqrt(1 + ln(max_position_embeddings / original) /
ln original)`` from the config's top-level keys; with both ``short_mscale`` and ``long_mscale``,
``Phi3LongRoPEScaledRotaryEmbedding`` multiplies the angles instead) and ``launcher/src/main.rs``
(``max_total_tokens`` defaults to ``min(max_allocatable, max_position_embeddings)``).

MLX-LM 0.32.2 wheel: ``mlx_lm/models/rope_utils.py`` (``initialize_rope``; ``DynamicNTKScalingRoPE``: the
base from ``offset + chunk length`` at every call; ``YarnRoPE``: the mscale ratio with defaults 1 and 0,
always truncated, no ``attention_factor``; ``SuScaledRoPE``: ``long_factor`` always, scale from
``max_position_embeddings / original``, ``long_mscale`` not passed by ``initialize_rope``) and
``mlx_lm/generate.py`` (``generate_step``: the prompt but its last token prefilled in chunks of
``prefill_step_size=2048``, the last token alone).
"""

from __future__ import annotations

from ...ops import rope
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

TGI_SOURCE = (
    "text-generation-inference db931fcf (v3.3.7+1): server/text_generation_server/layers/rotary.py + "
    "launcher/src/main.rs (max_total_tokens default)"
)
MLX_SOURCE = "mlx-lm 0.32.2 wheel: mlx_lm/models/rope_utils.py initialize_rope + mlx_lm/generate.py generate_step"
TGI_KNOWN = ("default", "dynamic", "yarn", "longrope")
MLX_KNOWN = ("default", "linear", "dynamic", "yarn", "longrope")
RATIO_KEYS = COMMON_KEYS | {"factor", "original_max_position_embeddings", "mscale", "mscale_all_dim"}
PREFILL = 2048


def ratio_yarn(handed: Handed, read: frozenset[str]) -> Found:
    """YaRN with betas ``32``/``1`` unless ``read`` takes them, always truncated, cos/sin times the
    ``mscale``/``mscale_all_dim`` ratio (defaults 1 and 0: ``0.1 ln s + 1``)."""
    r = handed.rope
    s = handed.factor()
    betas = (float(r.get("beta_fast", 32)), float(r.get("beta_slow", 1))) if "beta_fast" in read else (32.0, 1.0)
    inv, _ = rope.yarn(handed.dim, handed.base, s, handed.orig, *betas, True)
    af = yarn_mscale(s, float(r.get("mscale", 1.0))) / yarn_mscale(s, float(r.get("mscale_all_dim", 0.0)))
    return Found(inv, af, STATIC, dropped(handed, read))


def tgi_dynamic(handed: Handed, limit: int) -> Found:
    """The base of the batch's ``max_s`` once past ``max_position_embeddings``; warm CUDA graphs pin it
    at ``max_total_tokens``."""
    length = handed.max_positions
    drop = dropped(handed, COMMON_KEYS | {"factor"})
    if limit <= length:
        return Found(
            plain_inv_freq(handed), 1.0, f"never below max_position_embeddings = {length}: the base is plain", drop
        )
    s = handed.factor()
    alpha = s * limit / length - (s - 1)
    return Found(
        plain_inv_freq(handed, ntk_base(handed.base, alpha, handed.dim)),
        1.0,
        f"ratchets with the batch's max length, pinned by CUDA-graph warmup at max_total_tokens = {limit}: "
        f"alpha = {alpha:.6g} at every position",
        drop,
        unconfirmed="the warmup pinning (cuda_graph_warmup with max_s = max_total_tokens) is inferred, not run",
    )


def tgi_longrope(handed: Handed, n: int) -> Found:
    """Short factors below the original length and long ones from it, in the same sequence."""
    r, l0 = handed.rope, handed.orig
    key = "long_factor" if n - 1 >= l0 else "short_factor"
    inv = plain_inv_freq(handed) / factors(handed, key)  # [dim/2] at the last position
    switch = f"per position: short_factor below original_max_position_embeddings = {l0}, long_factor from it"
    read = COMMON_KEYS | {"short_factor", "long_factor", "original_max_position_embeddings"}
    if "short_mscale" in r and "long_mscale" in r:  # Phi3LongRoPEScaledRotaryEmbedding: angles times mscale
        scale = float(r["long_mscale" if key == "long_factor" else "short_mscale"])
        read = read | {"short_mscale", "long_mscale"}
        switch += "; the angles times short/long_mscale"
        return Found(inv * scale, 1.0, switch, dropped(handed, read), uniform=n <= l0)
    return Found(inv, sqrt_scale(handed.max_positions / l0, l0), switch, dropped(handed, read), uniform=n <= l0)


def tgi_3_3(handed: Handed, n: int) -> Found:
    """TGI v3.3.7 (the last release line; in maintenance mode)."""
    kind = handed.kind
    if kind not in TGI_KNOWN:
        raise unread(handed, "TGI", TGI_KNOWN)
    limit = handed.limit or handed.max_positions
    if past_limit(n, limit, "--max-total-tokens"):
        return refusal(handed, past_limit(n, limit, "--max-total-tokens"))
    if kind == "dynamic":
        return tgi_dynamic(handed, limit)
    if kind == "yarn":
        return ratio_yarn(handed, RATIO_KEYS)
    if kind == "longrope":
        return tgi_longrope(handed, n)
    return Found(plain_inv_freq(handed), dropped=dropped(handed, COMMON_KEYS))


def mlx_0_32(handed: Handed, n: int) -> Found:
    """MLX-LM 0.32 (read in 0.32.2)."""
    kind = handed.kind
    if kind not in MLX_KNOWN:
        raise unread(handed, "MLX-LM", MLX_KNOWN)
    if kind == "dynamic":
        length = handed.max_positions
        inv, _ = rope.dynamic(handed.dim, handed.base, handed.factor(), length, seq_len=n)  # the last token's call
        switch = (
            f"per call: the base from offset + chunk length past max_position_embeddings = {length}; the prompt "
            f"prefilled in chunks of {PREFILL} then its last token alone, so one prompt's keys carry several bases"
        )
        return Found(inv, 1.0, switch, dropped(handed, COMMON_KEYS | {"factor"}), uniform=n <= length)
    if kind == "yarn":
        return ratio_yarn(handed, RATIO_KEYS | {"beta_fast", "beta_slow"})
    if kind == "longrope":
        l0 = handed.orig
        read = COMMON_KEYS | {"long_factor", "original_max_position_embeddings"}
        switch = "never: long_factor at every length (short_factor is not used)"
        af = sqrt_scale(handed.max_positions / l0, l0)
        return Found(plain_inv_freq(handed) / factors(handed, "long_factor"), af, switch, dropped(handed, read))
    if kind == "linear":
        return Found(plain_inv_freq(handed) / handed.factor(), dropped=dropped(handed, COMMON_KEYS | {"factor"}))
    return Found(plain_inv_freq(handed), dropped=dropped(handed, COMMON_KEYS))


TGI = Reader("TGI", "3.3.x", TGI_SOURCE, tgi_3_3)
MLX = Reader("MLX-LM", "0.32.x", MLX_SOURCE, mlx_0_32)
