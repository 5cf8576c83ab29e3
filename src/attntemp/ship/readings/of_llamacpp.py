"""llama.cpp's reading, read at ggml-org/llama.cpp 0c1e57098 as vendored in the llama-cpp-python 0.3.36 sdist.

What it is handed is a GGUF converted from the HF config plus run-time flags, written here as one
dict: the HF keys as ``convert_hf_to_gguf.py`` converts them (``rope_type``, ``factor``,
``original_max_position_embeddings``, ``rope_theta``; ``short_factor``/``long_factor`` as the Phi-3
converter's ``rope_factors_short/long`` tensors), GGUF keys set with ``--override-kv`` under their GGUF
name (``rope.scaling.attn_factor``), a ``rope_freqs`` tensor (per-pair divisors), and the flags
``--yarn-beta-fast``/``--yarn-beta-slow``/``--yarn-attn-factor`` under their own names. ``positions``
is the GGUF's ``context_length`` (``n_ctx_train``), ``limit`` is ``-c`` (0 or None: ``n_ctx_train``).

Read: ``conversion/base.py`` (``set_gguf_parameters``: ``dynamic`` writes nothing; yarn writes
``attention_factor``/``attn_factor`` and the betas as ``rope.scaling.yarn_*``), ``conversion/phi.py``
(longrope: ``rope.scaling.attn_factor = sqrt(1 + ln(max_position_embeddings / original) / ln original)``),
``src/llama-model.cpp`` (the loader reads ``rope.scaling.attn_factor`` but the ``yarn_*`` keys only in
``src/models/grok.cpp``; ``get_rope_factors``: ``rope_freqs`` if present, else long iff ``n_ctx_seq >
n_ctx_orig_yarn``), ``src/llama-context.cpp`` (with YaRN, ``yarn_attn_factor = get_mscale(s) / (1 + 0.1 ln
s)`` replaces ``--yarn-attn-factor``, times ``rope.scaling.attn_factor``; custom YaRN raises
``n_ctx_train`` to ``original / freq_scale``), ``ggml/src/ggml-cpu/ops.cpp`` ``rope_yarn`` (cos/sin times
``attn_factor * (1 + 0.1 ln s)`` when ``ext_factor != 0``), ``ggml/src/ggml.c``
``ggml_rope_yarn_corr_dims`` (always floor/ceil), ``common/arg.cpp`` (``-c`` default 0: the model's) and
``tools/server/server-context.cpp`` (``n_ctx_slot``: capped at ``n_ctx_train``).
"""

from __future__ import annotations

from ...ops import rope
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

LLAMACPP_SOURCE = (
    "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist): conversion/base.py + phi.py, src/llama-model.cpp "
    "get_rope_factors, src/llama-context.cpp, ggml/src/ggml-cpu/ops.cpp rope_yarn, ggml/src/ggml.c, "
    "tools/server/server-context.cpp n_ctx_slot"
)
LLAMACPP_KNOWN = ("default", "none", "linear", "dynamic", "yarn", "longrope")
GGUF_FACTOR = "rope.scaling.attn_factor"  # <arch>.rope.scaling.attn_factor, through --override-kv or a converter
LLAMACPP_FLAGS = frozenset({"--yarn-beta-fast", "--yarn-beta-slow", "--yarn-attn-factor"})
OWN = COMMON_KEYS | LLAMACPP_FLAGS | {GGUF_FACTOR, "rope_freqs"}
YARN_READ = (OWN - {"--yarn-attn-factor"}) | {"factor", "original_max_position_embeddings"}  # the flag replaced
LONGROPE_READ = OWN | {"short_factor", "long_factor", "original_max_position_embeddings"}
SERVER_CAP = (
    "llama-server caps each slot at n_ctx_train = {cap} (the GGUF's context_length; --override-kv "
    "<arch>.context_length=int:N raises it; llama-cli and the library only warn)"
)


def train_context(handed: Handed) -> int:
    """``n_ctx_train``: the GGUF's ``context_length``, raised to ``original * s`` by a custom YaRN scale."""
    if handed.kind == "yarn":
        return max(handed.max_positions, round(handed.orig * handed.factor()))
    return handed.max_positions


def gguf_factor(handed: Handed, default: float = 1.0) -> float:
    """``hparams.rope_attn_factor``: the GGUF's ``rope.scaling.attn_factor`` (``default`` where absent)."""
    return float(handed.rope.get(GGUF_FACTOR, default))


def llamacpp_yarn(handed: Handed) -> Found:
    """YaRN (``ext_factor`` 1): betas from the flags only, the correction range always truncated, cos/sin
    times ``(1 + 0.1 ln s)`` times the GGUF factor (``--yarn-attn-factor`` replaced)."""
    r = handed.rope
    s = handed.factor()
    beta_fast, beta_slow = float(r.get("--yarn-beta-fast", 32)), float(r.get("--yarn-beta-slow", 1))
    inv, _ = rope.yarn(handed.dim, handed.base, s, handed.orig, beta_fast, beta_slow, True)
    return Found(inv, rope.yarn_attention_factor(s) * gguf_factor(handed), STATIC, dropped(handed, YARN_READ))


def llamacpp_longrope(handed: Handed, n_ctx: int) -> Found:
    """Phi-3's converted factors: long for every position iff ``-c`` exceeds the original length."""
    l0 = handed.orig
    long = n_ctx > l0
    key = "long_factor" if long else "short_factor"
    af = gguf_factor(handed, sqrt_scale(handed.max_positions / l0, l0))
    switch = (
        f"fixed per context by -c: {key} for every position since n_ctx = {n_ctx} "
        f"{'>' if long else '<='} original context {l0}"
    )
    return Found(plain_inv_freq(handed) / factors(handed, key), af, switch, dropped(handed, LONGROPE_READ))


def llamacpp_0c1e570(handed: Handed, n: int) -> Found:
    """llama.cpp at 0c1e57098: llama-server's reading of the GGUF and flags handed."""
    kind = handed.kind
    if kind not in LLAMACPP_KNOWN:
        raise unread(handed, "llama.cpp", LLAMACPP_KNOWN)
    cap = train_context(handed)
    n_ctx = handed.limit or cap
    over = past_limit(n, n_ctx, "-c") or (f"refuses: n = {n} > {SERVER_CAP.format(cap=cap)}" if n > cap else "")
    if over:
        return refusal(handed, over)
    freqs = handed.rope.get("rope_freqs")
    if kind == "yarn":
        return llamacpp_yarn(handed)
    if kind == "longrope" and freqs is None:
        return llamacpp_longrope(handed, n_ctx)
    inv = plain_inv_freq(handed)  # [dim/2]
    if freqs is not None:
        inv = inv / factors(handed, "rope_freqs")  # [dim/2]: every context size, no short/long switch
    if kind == "linear":
        inv = inv / handed.factor()
    flag = float(handed.rope.get("--yarn-attn-factor", 1.0))  # ext_factor 0: the flag is kept, and multiplies
    af = flag * gguf_factor(
        handed, sqrt_scale(handed.max_positions / handed.orig, handed.orig) if kind == "longrope" else 1.0
    )
    read = (
        OWN
        | ({"factor"} if kind == "linear" else set())
        | ({"original_max_position_embeddings"} if kind == "longrope" else set())
    )
    found = Found(inv, af, STATIC, dropped(handed, read))
    if kind == "dynamic":
        return Found(inv, af, "never: the converter writes no scaling for dynamic (plain RoPE)", found.dropped)
    return found


LLAMACPP = Reader("llama.cpp", "0c1e57098", LLAMACPP_SOURCE, llamacpp_0c1e570)
