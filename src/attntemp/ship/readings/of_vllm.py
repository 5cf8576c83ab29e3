"""vLLM's readings, three version ranges, read in the released wheels (0.21.0, 0.22.0, 0.29.0, 0.30.0, 0.32.0).

Paths under ``vllm/model_executor/layers/rotary_embedding/``: ``__init__.py`` (``get_rope``: which keys
reach which class), ``dynamic_ntk_scaling_rope.py``, ``yarn_scaling_rope.py``, ``phi3_long_rope_scaled_rope.py``,
``linear_scaling_rope.py``, ``llama3_rope.py``, ``common.py`` (``yarn_get_mscale``, the correction range);
``vllm/config/model.py`` ``_get_and_verify_max_len`` (the derived ``max_model_len``: ``max_position_embeddings``
times ``factor`` except for the types it lists; a larger ``--max-model-len`` is refused unless
``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``); ``vllm/model_executor/models/llama.py`` (``get_rope(max_position=
config.max_position_embeddings)``). Native model classes; ``model_impl=transformers`` runs transformers' code.

* dynamic: 0.11-0.21 static NTK with alpha = s^2 - s + 1 at every position, a cos/sin cache of s L rows;
  0.22+ ``alpha = s * max_position / max_trained_positions - (s - 1)`` = 1 unless ``max_trained_positions`` is
  given, a cache of ``max_position_embeddings`` rows while the derived length is still s L.
* yarn: up to 0.29 ``get_rope`` forwards ``extrapolation_factor, attn_factor, beta_fast, beta_slow,
  apply_yarn_scaling, truncate``: cos/sin times ``(0.1 ln s + 1) * attn_factor``, HF's ``attention_factor``,
  ``mscale`` and ``mscale_all_dim`` dropped; the derived length is ``original * factor``. From 0.30 it forwards
  ``beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, truncate`` and computes as transformers;
  yarn joins the types whose derived length is ``max_position_embeddings`` alone.
* longrope (0.11.1+, the same file in every wheel read): long factors for every position of every request
  iff ``max_model_len > original_max_position_embeddings``; cos/sin times ``short_mscale``/``long_mscale``, else
  ``sqrt(1 + ln(max_position_embeddings / original) / ln original)``; ``factor`` and ``attention_factor`` dropped.
  0.11.0 (not read here; reference section 2.3) switched per batch instead.
"""

from __future__ import annotations

from ...ops import rope
from ...ops.rope.bases import ntk_base
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
from .of_transformers import COMMON_KEYS, hf_yarn

WHEEL = (
    "vllm {v} wheel: vllm/model_executor/layers/rotary_embedding/ (__init__.py get_rope, {files}) + "
    "vllm/config/model.py"
)
VLLM_OLD_SOURCE = WHEEL.format(
    v="0.21.0", files="dynamic_ntk_scaling_rope.py, yarn_scaling_rope.py, phi3_long_rope_scaled_rope.py"
)
VLLM_MID_SOURCE = WHEEL.format(
    v="0.22.0 and 0.29.0", files="dynamic_ntk_scaling_rope.py (max_trained_positions), yarn_scaling_rope.py"
)
VLLM_NEW_SOURCE = WHEEL.format(
    v="0.30.0 and 0.32.0", files="yarn_scaling_rope.py (attention_factor), dynamic_ntk_scaling_rope.py"
)
VLLM_KNOWN = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
OLD_YARN_KEYS = COMMON_KEYS | {
    "factor",
    "original_max_position_embeddings",
    "extrapolation_factor",
    "attn_factor",
    "beta_fast",
    "beta_slow",
    "apply_yarn_scaling",
    "truncate",
}
NEW_YARN_KEYS = COMMON_KEYS | {
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
}
LONGROPE_KEYS = COMMON_KEYS | {
    "short_factor",
    "long_factor",
    "original_max_position_embeddings",
    "short_mscale",
    "long_mscale",
}
PAST_CACHE = (
    "undefined past position {rows}: positions >= {rows} index past the cos/sin cache of {rows} rows "
    "(NaN in issue 51's run on 0.32.0's CPU build, finite garbage in `attntemp audit --readings`; an IndexError "
    "or device assert per vLLM PR #55910)"
)
NO_LENGTH_FACTOR = {"longrope", "llama3"}  # _get_and_verify_max_len: no factor on the derived length


def derived_length(handed: Handed, yarn_scaled: bool) -> int:
    """``_get_and_verify_max_len``'s derived ``max_model_len``: ``max_position_embeddings``, times ``factor``
    for the types not excluded; yarn's is ``original * factor`` up to 0.29 (``yarn_scaled``), its
    ``max_position_embeddings`` alone from 0.30."""
    kind = handed.kind
    if kind == "yarn":
        return round(handed.orig * handed.factor()) if yarn_scaled else handed.max_positions
    if kind in NO_LENGTH_FACTOR or kind == "default":
        return handed.max_positions
    return round(handed.max_positions * handed.factor())


def vllm_limit(handed: Handed, n: int, yarn_scaled: bool) -> tuple[int, str]:
    """``(max_model_len, refusal)``: the serving limit (``--max-model-len`` or the derived length) and
    "" or why the engine refuses the settings or a request of ``n`` tokens."""
    derived = derived_length(handed, yarn_scaled)
    limit = derived if handed.limit is None else handed.limit
    if limit > derived:
        return limit, (
            f"refuses at load: --max-model-len {limit} > the derived max_model_len {derived} (raise "
            "max_position_embeddings in --hf-overrides, or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    return limit, past_limit(n, limit, "--max-model-len")


def cache_break(n: int, rows: int) -> str:
    """The break of positions past a cos/sin cache of ``rows`` rows (empty where ``n`` fits)."""
    return PAST_CACHE.format(rows=rows) if n > rows else ""


def old_yarn(handed: Handed) -> Found:
    """vLLM up to 0.29: YaRN with vLLM's own keys; HF's attention factor keys dropped."""
    r = handed.rope
    s, l0 = handed.factor(), handed.orig
    inv = plain_inv_freq(handed)  # [dim/2]
    ramped, _ = rope.yarn(
        handed.dim,
        handed.base,
        s,
        l0,
        float(r.get("beta_fast", 32)),
        float(r.get("beta_slow", 1)),
        bool(r.get("truncate", True)),
    )
    extrapolation = float(r.get("extrapolation_factor", 1))
    inv_freq = inv / s + (ramped - inv / s) * extrapolation  # [dim/2]: the ramp mask times extrapolation_factor
    builtin = rope.yarn_attention_factor(s) if r.get("apply_yarn_scaling", True) else 1.0
    return Found(inv_freq, builtin * float(r.get("attn_factor", 1)), STATIC, dropped(handed, OLD_YARN_KEYS))


def new_yarn(handed: Handed) -> Found:
    """vLLM 0.30+: YaRN as transformers computes it (``attention_factor`` replaces the default)."""
    inv, af = hf_yarn(handed)
    return Found(inv, af, STATIC, dropped(handed, NEW_YARN_KEYS))


def vllm_longrope(handed: Handed, limit: int) -> Found:
    """vLLM 0.11.1+: long or short factors for every position, fixed at load by ``max_model_len``."""
    r, l0 = handed.rope, handed.orig
    default = sqrt_scale(handed.max_positions / l0, l0)
    long = limit > l0
    key = "long_factor" if long else "short_factor"
    af = float(r.get("long_mscale" if long else "short_mscale") or default)
    switch = (
        f"fixed at load by --max-model-len: {key} for every position since max_model_len = {limit} "
        f"{'>' if long else '<='} original_max_position_embeddings = {l0}"
    )
    return Found(plain_inv_freq(handed) / factors(handed, key), af, switch, dropped(handed, LONGROPE_KEYS))


def vllm_dynamic(handed: Handed, n: int, alpha: float, rows: int) -> Found:
    """Static NTK at ``alpha`` for every position, a cos/sin cache of ``rows`` rows."""
    switch = f"never: alpha = {alpha:.6g} at every position, prompts under L0 too"
    return Found(
        plain_inv_freq(handed, ntk_base(handed.base, alpha, handed.dim)),
        1.0,
        switch,
        dropped(handed, COMMON_KEYS | {"factor"}),
        cache_break(n, rows),
    )


def read_vllm(handed: Handed, n: int, version: str) -> Found:
    """What vLLM ``version`` ("old": 0.11-0.21, "mid": 0.22-0.29, "new": 0.30+) computes."""
    kind = handed.kind
    if kind not in VLLM_KNOWN:
        raise unread(handed, "vLLM", VLLM_KNOWN)
    limit, refused = vllm_limit(handed, n, yarn_scaled=version != "new")
    if refused:
        return refusal(handed, refused)
    if kind == "dynamic":
        s = handed.factor()
        if version == "old":
            return vllm_dynamic(handed, n, s * s - s + 1, round(handed.max_positions * s))
        trained = float(handed.rope.get("max_trained_positions", handed.max_positions))
        return vllm_dynamic(handed, n, s * handed.max_positions / trained - (s - 1), handed.max_positions)
    if kind == "yarn":
        return new_yarn(handed) if version == "new" else old_yarn(handed)
    if kind == "longrope":
        return vllm_longrope(handed, limit)
    if kind == "linear":
        return Found(plain_inv_freq(handed) / handed.factor(), dropped=dropped(handed, COMMON_KEYS | {"factor"}))
    if kind == "llama3":
        r = handed.rope
        inv, _ = rope.llama3(
            handed.dim,
            handed.base,
            handed.factor(),
            handed.orig,
            float(r["low_freq_factor"]),
            float(r["high_freq_factor"]),
        )
        return Found(inv, dropped=dropped(handed, COMMON_KEYS | {"factor", "original_max_position_embeddings",
                                                                  "low_freq_factor", "high_freq_factor"}))  # fmt: skip
    return Found(
        plain_inv_freq(handed), dropped=dropped(handed, COMMON_KEYS), breaks=cache_break(n, handed.max_positions)
    )


def vllm_up_to_0_21(handed: Handed, n: int) -> Found:
    """vLLM 0.11-0.21 (read in 0.21.0)."""
    return read_vllm(handed, n, "old")


def vllm_0_22_to_0_29(handed: Handed, n: int) -> Found:
    """vLLM 0.22-0.29 (read in 0.22.0 and 0.29.0)."""
    return read_vllm(handed, n, "mid")


def vllm_from_0_30(handed: Handed, n: int) -> Found:
    """vLLM 0.30+ (read in 0.30.0 and 0.32.0; 0.34.0 per the reference)."""
    return read_vllm(handed, n, "new")


VLLM_READERS = (
    Reader("vllm", "0.11-0.21", VLLM_OLD_SOURCE, vllm_up_to_0_21),
    Reader("vllm", "0.22-0.29", VLLM_MID_SOURCE, vllm_0_22_to_0_29),
    Reader("vllm", ">=0.30", VLLM_NEW_SOURCE, vllm_from_0_30),
)
