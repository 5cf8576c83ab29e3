"""transformers' reading: the reference every other engine's reading is compared with.

Read in transformers 5.24.0 (the wheel this project installs), ``src/transformers/modeling_rope_utils.py``:
``_compute_dynamic_ntk_parameters`` (the base grown from ``config.max_position_embeddings``, not
``original_max_position_embeddings``), ``dynamic_rope_update`` (``dynamic_frequency_update``: recomputed
when the forward's ``max(position_ids) + 1`` grows past the cached length, reset below
``max_position_embeddings``; ``longrope_frequency_update``: long factors iff that length exceeds
``original_max_position_embeddings``), ``_compute_yarn_parameters`` and ``_compute_longrope_parameters``
(an explicit ``attention_factor`` replaces the default; ``factor`` None is ``max_position_embeddings /
original``), the ``_validate_*_rope_parameters`` key sets; ``models/llama/modeling_llama.py``
``LlamaRotaryEmbedding.forward``: cos and sin times ``attention_scaling``. The 5.25.0 wheel reads the
same (``../shared/reference/engine_readings.md`` section 1).
"""

from __future__ import annotations

from ...ops import rope
from .base import STATIC, Found, Handed, Reader, dropped, plain_inv_freq, unread

TRANSFORMERS_SOURCE = (
    "transformers 5.24.0 src/transformers/modeling_rope_utils.py (_compute_*_parameters, dynamic_rope_update, "
    "_validate_*_rope_parameters) + models/llama/modeling_llama.py LlamaRotaryEmbedding.forward"
)
# the keys each rope type's validator names (required and optional), rope_theta and partial_rotary_factor with them
COMMON_KEYS = frozenset({"rope_theta", "partial_rotary_factor"})
HF_KEYS = {
    "default": COMMON_KEYS,
    "linear": COMMON_KEYS | {"factor"},
    "dynamic": COMMON_KEYS | {"factor"},
    "yarn": COMMON_KEYS
    | {
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
    },
    "longrope": COMMON_KEYS
    | {"short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor"},
    "llama3": COMMON_KEYS | {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
}
PER_FORWARD_DYNAMIC = (
    "per forward: the base grows with the batch's max(position_ids) + 1 past max_position_embeddings = {L}, "
    "back to plain below it (cached keys keep their base)"
)
PER_FORWARD_LONGROPE = (
    "per forward: long_factor for the whole batch iff max(position_ids) + 1 > original_max_position_embeddings "
    "= {L} (the attention factor is fixed at init)"
)


def hf_yarn(handed: Handed) -> tuple:
    """transformers' YaRN ``(inv_freq [dim/2], cos/sin factor)`` of the rope handed (also what the
    engines that follow it compute)."""
    r = handed.rope
    s = handed.factor(handed.max_positions / handed.orig)
    return rope.yarn(
        handed.dim,
        handed.base,
        s,
        handed.orig,
        float(r.get("beta_fast") or 32),
        float(r.get("beta_slow") or 1),
        bool(r.get("truncate", True)),
        r.get("mscale"),
        r.get("mscale_all_dim"),
        r.get("attention_factor"),
    )


def transformers_5(handed: Handed, n: int) -> Found:
    """transformers 5.x: what its rotary module computes for one forward of ``n`` tokens."""
    kind, r = handed.kind, handed.rope
    if kind not in HF_KEYS:
        raise unread(handed, "transformers", tuple(HF_KEYS))
    drop = dropped(handed, HF_KEYS[kind])
    if kind == "default":
        return Found(plain_inv_freq(handed), dropped=drop)
    if kind == "linear":
        return Found(plain_inv_freq(handed) / handed.factor(), dropped=drop)
    if kind == "dynamic":
        length = handed.max_positions
        inv, _ = rope.dynamic(handed.dim, handed.base, handed.factor(), length, seq_len=n)
        return Found(inv, switch=PER_FORWARD_DYNAMIC.format(L=length), dropped=drop)
    if kind == "yarn":
        inv, af = hf_yarn(handed)
        return Found(inv, af, STATIC, drop)
    if kind == "longrope":
        inv, af = rope.longrope(
            handed.dim,
            handed.base,
            r["short_factor"],
            r["long_factor"],
            handed.orig,
            r.get("factor"),
            handed.max_positions,
            seq_len=n,
            attention_factor=r.get("attention_factor"),
        )
        return Found(inv, af, PER_FORWARD_LONGROPE.format(L=handed.orig), drop)
    inv, _ = rope.llama3(
        handed.dim,
        handed.base,
        handed.factor(),
        handed.orig,
        float(r.get("low_freq_factor", 1.0)),
        float(r.get("high_freq_factor", 4.0)),
    )
    return Found(inv, dropped=drop)


TRANSFORMERS = Reader("transformers", "5.x", TRANSFORMERS_SOURCE, transformers_5)
