"""exllamav2's and exllamav3's readings.

exllamav2 0.3.2 wheel: ``exllamav2/config.py`` (reads ``rope_scaling`` only, not ``rope_parameters``;
branches for linear, su/longrope, yarn, llama3 and mrope: ``dynamic`` falls through to plain RoPE;
longrope asserts a top-level ``original_max_position_embeddings``; ``max_seq_len`` defaults to
``max_position_embeddings``) and ``exllamav2/rope.py`` (``get_rope_params_yarn``: YaRN only when
``max_seq_len`` exceeds the original length, betas 32/1, the correction range from ``max_seq_len``, cos/sin
times ``0.1 ln s + 1``; ``get_rope_params_su``: long factors and ``sqrt(1 + ln(max_seq_len / original) /
ln original)`` iff ``max_seq_len`` exceeds the original length, else short factors and 1). Static NTK is
its ``-ra/--rope_alpha`` (``base * alpha^(d/(d-2))``).

exllamav3 1.6.5 wheel: ``exllamav3/util/rope.py`` (``match`` on the rope type: ``dynamic`` raises
``ValueError("Unknown rope_type")``; ``_rope_params_yarn``: ``factor = max_position_embeddings / original``
whenever the original is given, ``attention_factor`` honoured, else 0.1 ln s + 1 (1.0 with
``llama_4_scaling_beta``; the mscale ratio only for architectures that opt in); ``_rope_params_longrope``:
long factors iff the (overridden) ``max_position_embeddings`` exceeds the original, the scale from the
config's ``max_position_embeddings``) and ``exllamav3/architecture/phi3.py`` (``override_dynamic_seq_len``
sets the override from the serving length).
"""

from __future__ import annotations

from ...ops import rope
from ...ops.geometry import stated_l0
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

EXLLAMAV2_SOURCE = "exllamav2 0.3.2 wheel: exllamav2/config.py (rope_scaling) + exllamav2/rope.py get_rope_params_*"
EXLLAMAV3_SOURCE = (
    "exllamav3 1.6.5 wheel: exllamav3/util/rope.py (RoPE._rope_params_*) + exllamav3/architecture/phi3.py"
)
V2_KNOWN = ("default", "dynamic", "yarn", "longrope")
V3_KNOWN = ("default", "linear", "yarn", "longrope")
LONG_KEYS = COMMON_KEYS | {"short_factor", "long_factor", "original_max_position_embeddings"}


def exllamav2_0_3(handed: Handed, n: int) -> Found:
    """exllamav2 0.3.x (read in 0.3.2): ``limit`` is its ``max_seq_len``."""
    kind = handed.kind
    if kind not in V2_KNOWN:
        raise unread(handed, "exllamav2", V2_KNOWN)
    seq = handed.limit or handed.max_positions
    if past_limit(n, seq, "max_seq_len"):
        return refusal(handed, past_limit(n, seq, "max_seq_len"))
    if kind == "yarn":
        s, l0 = handed.factor(), handed.orig
        read = COMMON_KEYS | {"factor", "original_max_position_embeddings"}
        if seq <= l0:
            return Found(
                plain_inv_freq(handed),
                1.0,
                f"fixed at load: plain RoPE since max_seq_len = {seq} <= {l0}",
                dropped(handed, read),
            )
        inv, _ = rope.yarn(handed.dim, handed.base, s, seq, 32.0, 1.0, True)  # the ramp from max_seq_len, not L0
        switch = f"fixed at load: YaRN since max_seq_len = {seq} > {l0}, its ramp from max_seq_len"
        return Found(inv, rope.yarn_attention_factor(s), switch, dropped(handed, read))
    if kind == "longrope":
        l0 = handed.orig
        long = seq > l0
        af = sqrt_scale(seq / l0, l0) if long else 1.0
        key = "long_factor" if long else "short_factor"
        switch = f"fixed at load by max_seq_len = {seq}: {key} for every position"
        return Found(plain_inv_freq(handed) / factors(handed, key), af, switch, dropped(handed, LONG_KEYS))
    switch = (
        "never: dynamic is not read (plain RoPE); static NTK only through -ra/--rope_alpha"
        if kind == "dynamic"
        else STATIC
    )
    return Found(plain_inv_freq(handed), 1.0, switch, dropped(handed, COMMON_KEYS))


def exllamav3_1_6(handed: Handed, n: int) -> Found:
    """exllamav3 1.6.x (read in 1.6.5): ``limit`` overrides ``max_position_embeddings`` where the
    architecture takes the serving length (Phi-3's ``override_dynamic_seq_len``)."""
    kind, r = handed.kind, handed.rope
    if kind == "dynamic":
        return refusal(handed, "the model does not load: ValueError('Unknown rope_type: dynamic')")
    if kind not in V3_KNOWN:
        raise unread(handed, "exllamav3", V3_KNOWN)
    if kind == "yarn":
        given = stated_l0(r) is not None
        s = handed.max_positions / handed.orig if given else handed.factor()
        read = COMMON_KEYS | {
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "truncate",
        }
        read = read | (set() if given else {"factor"})
        af = r.get("attention_factor")
        if af is None:
            af = 1.0 if r.get("llama_4_scaling_beta") else rope.yarn_attention_factor(s)
        inv, _ = rope.yarn(
            handed.dim, handed.base, s, handed.orig, float(r.get("beta_fast", 32)), float(r.get("beta_slow", 1)),
            bool(r.get("truncate", True)),
        )  # fmt: skip
        switch = STATIC + (
            f"; factor = max_position_embeddings / original = {s:.6g} (the key replaced)" if given else ""
        )
        return Found(inv, float(af), switch, dropped(handed, read | {"llama_4_scaling_beta"}))
    if kind == "longrope":
        l0, a = handed.orig, handed.max_positions
        a_override = handed.limit or a
        key = "long_factor" if a_override > l0 else "short_factor"
        switch = f"fixed at load: {key} for every position since max_position_embeddings = {a_override}"
        return Found(
            plain_inv_freq(handed) / factors(handed, key), sqrt_scale(a / l0, l0), switch, dropped(handed, LONG_KEYS)
        )
    inv = plain_inv_freq(handed) / (handed.factor() if kind == "linear" else 1.0)
    return Found(inv, 1.0, STATIC, dropped(handed, COMMON_KEYS | ({"factor"} if kind == "linear" else set())))


EXLLAMAV2 = Reader("exllamav2", "0.3.x", EXLLAMAV2_SOURCE, exllamav2_0_3)
EXLLAMAV3 = Reader("exllamav3", "1.6.x", EXLLAMAV3_SOURCE, exllamav3_1_6)
