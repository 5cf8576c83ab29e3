"""vLLM as an engine: its settings (``--hf-overrides``), its audit and its verify.

* export, ``vllm/model_executor/layers/rotary_embedding/yarn_scaling_rope.py`` and ``get_rope`` in
  ``.../rotary_embedding/__init__.py``, read at commit 0cd5784803d8: ``attention_factor`` replaces
  the default as in transformers (``attn_factor`` is not forwarded). Read at ffdc985737c9
  (``yarn_scaling_rope.py``) and 926c71f6f25f (``__init__.py``): ``mscale = yarn_get_mscale(s) *
  attn_factor``, i.e. ``attn_factor = sqrt(m) / (0.1 ln s + 1)`` (``attention_factor`` not
  forwarded). Each version read takes one of the two keys, so both are written. The attention
  factor is the only temperature setting: a multiplier without a YaRN rope is refused (bake it).
  A ``longrope`` spec (LongRoPE's per-frequency factors, arXiv:2402.13753):
  ``.../phi3_long_rope_scaled_rope.py`` (read at 17d618b0f944) uses ``long_factor`` for every
  position once ``--max-model-len`` exceeds L0, cos/sin times ``long_mscale`` (default
  ``sqrt(1 + ln s / ln L0)`` with s = max_position_embeddings / L0), so ``sqrt(m)`` goes there.
  Where the RoPE is per layer type (Gemma 3) the rope goes to the global layers, as in transformers.
  ``max_position_embeddings`` is raised with the rope to the context served (``--max-model-len``): from
  0.30 vLLM derives yarn's length from it alone, and it refuses a longer ``--max-model-len``
  (:mod:`attntemp.ship.readings.of_vllm`). attntemp's static ``ntk`` (and dynamic NTK's nearest static
  form, :mod:`.routes`) is plain RoPE at an explicit ``rope_theta``.
* Mistral 3's position schedule: the config's ``llama_4_scaling`` ``{original_max_position_embeddings,
  beta}`` (from Mistral's ``params.json``), read by ``deepseek_v2.py`` (``_get_llama_4_scaling``:
  DeepSeek-V2/V3-shaped models such as Mistral Large 3); set with ``--hf-overrides``.
* audit: the config's proxy (:mod:`attntemp.ship.engine_common`) served from a folder by
  ``scripts/vllm_logprobs.py`` in vLLM's own venv (``scripts/build_vllm_cpu.sh``; its CPU build
  needs AVX-512), the whole vocabulary's log-probabilities at every position; vLLM runs once and
  the factor c is fitted on the transformers side.
* verify: :mod:`attntemp.ship.vllm_venv` runs the windows; a global spec with YaRN runs the original
  checkpoint with the export's ``--hf-overrides``; anything else (m without YaRN, per-layer,
  per-head) is baked first and served as is, with the overrides of the RoPE it carries. A position
  schedule is saved as a schedule checkpoint (:mod:`attntemp.ship.remote_code`) and served through
  attntemp's vLLM plugin, installed into vLLM's venv on the way. With ``top = -1`` (the whole
  vocabulary, for small vocabularies) the KL is exact; otherwise it is the KL over the 20 tokens
  vLLM returned per position plus one bucket for the rest, a lower bound of the true KL (said so in
  its interval's method); the perplexities use the exact log-probability of each scored token
  either way. vLLM's CPU attention has no kernel for head_dim 16, so the shipped tiny model cannot
  run there (SmolLM2, head_dim 64, does).
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...hf import loading
from ...hf.introspect import text_config, trained_length
from ...hf.loading import load_model
from ...ops import rope
from ...ops.geometry import stated_context
from ...ops.intervals import Interval, mean_interval, perplexity_interval
from ...ops.rope.params import Rope
from ...ops.spec import TemperatureSpec
from ...utils.errors import ExternalToolError
from ...utils.resources import vllm_cpu_refusal
from .. import remote_code, vllm_venv
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
from ..engine_common import (
    LENGTH,
    cannot,
    engine_rows,
    engines_cache,
    kl_verdict,
    mean_kl,
    proxy_logp,
    random_ids,
    save_proxy,
    scored,
)
from ..readings import Handed, in_vllm
from .base import (
    EPS,
    GLOBAL,
    AuditRun,
    Engine,
    ExportResult,
    ExportTarget,
    context_length,
    export_target,
    need_l0,
    no_knob,
    ntk_note,
    per_layer_type,
    rope_dict,
    same_past_l0,
    static_ntk,
    theta_note,
)
from .base import attn_factor as attn_factor  # the engine's own knob: llama.cpp and vLLM share its math
from .base import logit_multiplier as logit_multiplier
from .routes import export_spec

NAME = "vllm"
SOURCE = (
    "vLLM rotary_embedding/yarn_scaling_rope.py + __init__.py get_rope "
    "(commit 0cd5784803d8: attention_factor; ffdc985737c9/926c71f6f25f: attn_factor)"
)
LONGROPE_SOURCE = "vLLM rotary_embedding/phi3_long_rope_scaled_rope.py (17d618b0f944)"
SCHEDULE_READERS = (
    "read by vLLM's DeepSeek-V2/V3 models (Mistral Large 3, deepseek_v2.py _get_llama_4_scaling); its "
    "other architectures have no key for it"
)
PASS_THROUGH = ("linear", "dynamic", "llama3")  # no attention factor: exportable only with m = 1
FULL_VOCAB = 4096  # up to this vocabulary size, ask vLLM for every log-probability (exact KL)


# ----------------------------------------------------------------------------- export
def longrope_settings(params: Rope, m: float, rope_theta: float | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``(rope_parameters, notes)`` of a longrope spec: the factors as they are, the cos/sin factor
    ``sqrt(m)`` as ``attention_factor`` and as ``short_mscale``/``long_mscale``."""
    f = rope.cos_sin_factor(m)
    rp = rope_dict(params, rope_theta, attention_factor=f, short_mscale=f, long_mscale=f)
    notes = (
        f"cos/sin factor sqrt(m) = {f:.6g} as long_mscale/short_mscale (vLLM's default would be "
        "sqrt(1 + ln s / ln L0) from max_position_embeddings / L0)",
        same_past_l0("vLLM", "at every position once --max-model-len exceeds L0", params),
    )
    return rp, notes


def overrides(rp: dict[str, Any], target: ExportTarget, positions: int | None = None) -> str:
    """``--hf-overrides``' JSON for the rope dict ``rp`` (per layer type where the model has that), with
    ``max_position_embeddings`` raised to ``positions`` where given (vLLM refuses a ``--max-model-len``
    past the length it derives from it)."""
    body: dict[str, Any] = {"rope_parameters": per_layer_type(rp, target.layer_ropes)}
    return json.dumps(body if positions is None else {**body, "max_position_embeddings": positions})


def served(positions: int) -> tuple[str, ...]:
    """``--max-model-len`` at the context the overrides' ``max_position_embeddings`` allows."""
    return ("--max-model-len", str(positions))


def static_ntk_settings(m: float, params: Rope, target: ExportTarget) -> ExportResult:
    """attntemp's static ``ntk`` as plain RoPE at an explicit ``rope_theta``, served to its context."""
    if abs(m - 1) > EPS:
        raise no_knob(NAME, "ntk", m)
    theta, length = static_ntk(params, target, NAME)
    rp = {"rope_type": "default", "rope_theta": theta}
    args = ("--hf-overrides", overrides(rp, target, length), *served(length))
    return ExportResult(NAME, m, per_layer_type(rp, target.layer_ropes), args, (ntk_note(theta, params),), SOURCE)


def export_settings(m: float, params: Rope, target: ExportTarget) -> ExportResult:
    """``--hf-overrides`` (and ``--max-model-len``) carrying the total logit multiplier ``m``."""
    kind, rope_theta = params.get("rope_type"), target.rope_theta
    if kind == "longrope":
        need_l0(params, NAME)
        lr, said = longrope_settings(params, m, rope_theta)
        context = context_length(params, NAME)
        flags = ("--hf-overrides", overrides(lr, target, context), *served(context))
        said += theta_note(rope_theta, "vLLM --hf-overrides")
        return ExportResult(NAME, m, per_layer_type(lr, target.layer_ropes), flags, said, LONGROPE_SOURCE)
    if kind == "ntk":
        return static_ntk_settings(m, params, target)
    if kind != "yarn" and (abs(m - 1) > EPS or kind not in (None, *PASS_THROUGH)):
        raise no_knob(NAME, kind, m)
    if kind is None:
        if target.length is None:
            return ExportResult(NAME, m, None, notes=("m = 1: nothing to change",), source=SOURCE)
        args = ("--hf-overrides", json.dumps({"max_position_embeddings": target.length}), *served(target.length))
        return ExportResult(NAME, m, None, args, (f"m = 1: the model as it is, served to {target.length}",), SOURCE)
    positions = target.length
    if kind in ("yarn", "llama3"):  # the derived length is max_position_embeddings (yarn: from 0.30)
        positions = target.length or round(params.factor * need_l0(params, NAME))
    limit = served(positions) if positions else ()
    new = {"attention_factor": rope.cos_sin_factor(m)} if kind == "yarn" else {}
    old = {"attn_factor": attn_factor(m, params.factor)} if kind == "yarn" else {}  # transformers 4 releases: no new
    rp = rope_dict(params, rope_theta, **new, **old)
    legacy = json.dumps({"rope_scaling": rope_dict(params, rope_theta, **old)})
    yarn_note = (
        "attention_factor replaces vLLM's default on cos/sin (0cd5784803d8); attn_factor multiplies "
        "0.1 ln s + 1 (ffdc985737c9): each release reads one of them, both give this m"
    )
    notes = (
        *((yarn_note,) if kind == "yarn" else ()),
        f"releases on transformers 4 read rope_scaling instead: --hf-overrides {shlex.quote(legacy)}",
        *theta_note(rope_theta, "vLLM --hf-overrides"),
    )
    args = ("--hf-overrides", overrides(rp, target, positions), *limit)
    return ExportResult(NAME, m, per_layer_type(rp, target.layer_ropes), args, notes, SOURCE)


def handed_to_vllm(result: ExportResult, model: Handed) -> Handed:
    """What vLLM is handed: ``--hf-overrides``' rope (the global layers' where per layer type) and
    ``max_position_embeddings``, and ``--max-model-len`` as the serving limit."""
    args = list(result.args)
    given = json.loads(args[args.index("--hf-overrides") + 1]) if "--hf-overrides" in args else {}
    rp = dict(given.get("rope_parameters") or {})
    if rp and all(isinstance(v, dict) for v in rp.values()):
        rp = dict(rp.get(GLOBAL, {}))
    limit = int(args[args.index("--max-model-len") + 1]) if "--max-model-len" in args else None
    return replace(model, rope=rp, positions=stated_context(given) or model.positions, limit=limit)


def with_schedule(result: ExportResult, beta: float, l0: int, target: ExportTarget) -> ExportResult:
    """``result`` with ``llama_4_scaling`` added to its ``--hf-overrides`` (one is added if none)."""
    scaling = {"original_max_position_embeddings": l0, "beta": beta}
    out = list(result.args)
    if "--hf-overrides" in out:
        i = out.index("--hf-overrides") + 1
        out[i] = json.dumps({**json.loads(out[i]), "llama_4_scaling": scaling})
        return replace(result, args=tuple(out))
    return replace(result, args=(*out, "--hf-overrides", json.dumps({"llama_4_scaling": scaling})))


# ----------------------------------------------------------------------------- availability
def unavailable() -> str | None:
    """Why vLLM cannot be audited here (no AVX-512, or not installed: scripts/build_vllm_cpu.sh's
    venv); None when it can."""
    cpuinfo = Path("/proc/cpuinfo")
    if "avx512f" not in (cpuinfo.read_text().split() if cpuinfo.is_file() else []):
        return "this CPU lacks avx512f, which vLLM's CPU build needs"
    cache = engines_cache()
    if not any(p.is_file() for p in cache.glob("vllm-cpu-*/bin/python")):
        return f"vLLM is not installed (no {cache}/vllm-cpu-*; `bash scripts/build_vllm_cpu.sh`)"
    return None


def check_cpu(device: str | None, cpuinfo: str = "/proc/cpuinfo") -> None:
    """On the CPU, refuse ``--engine vllm`` in one line before any work where vLLM's CPU build
    cannot run (no AVX-512); on a CUDA device vLLM's GPU build has no such need."""
    why = None if (device or "cpu").startswith("cuda") else vllm_cpu_refusal(cpuinfo)
    if why:
        raise ValueError(f"engine='vllm' cannot run on this machine: {why}; use --engine llama.cpp")


# ----------------------------------------------------------------------------- audit
def audit(run: AuditRun) -> dict[str, Any]:
    """vLLM's verdict on the config (see the module doc)."""
    reason = unavailable()
    if reason is not None:
        return {"verdict": "cannot run", "reason": reason}
    try:
        python = vllm_venv.find_vllm(None)
    except FileNotFoundError as exc:
        return cannot(str(exc))
    if run.base["verdict"] != "agrees":
        return cannot("its base, the transformers proxy, differs from the reference (see transformers)")
    with tempfile.TemporaryDirectory(prefix="attntemp-audit-vllm-") as tmp:
        return _audit_run(run.config, python, Path(tmp))


def engine_logp(got: dict[str, Any], vocab: int, length: int) -> list[torch.Tensor]:
    """vLLM's log-probabilities ``[n, V]`` per row at the scored positions: its ``top[p]`` is the
    distribution predicted at position p (of token p + 1), as the proxy's logits at p."""
    part = scored(length)
    return [dense[part] for dense in engine_rows(got, vocab)]  # [n, V] each


def _audit_run(config: dict[str, Any], python: Path, work: Path) -> dict[str, Any]:
    model = save_proxy(config, work / "proxy")
    ids = random_ids()  # [C, L]
    try:
        model(ids[:1, :4])
    except (RuntimeError, TypeError, ValueError) as exc:
        return cannot(f"the proxy's own forward fails in transformers ({type(exc).__name__}: {str(exc)[:160]})")
    try:
        got = vllm_venv.run_logprobs(python, work / "proxy", ids, None, -1, work)
    except ExternalToolError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        said = [line for line in lines if "Error" in line] or lines or [""]  # its exception, not a last warning
        return cannot(f"vLLM cannot run this proxy: {said[-1].strip()[-240:]}")
    theirs = engine_logp(got, model.config.vocab_size, LENGTH)
    fit = functools.cache(lambda log_c: mean_kl(proxy_logp(model, ids, math.exp(log_c)), theirs))
    entry = {"version": f"vllm {got['vllm']}", "kl": fit(0.0), "positions": [LENGTH // 2, LENGTH - 2],
             "command": " ".join(got["command"])}  # fmt: skip
    return kl_verdict(fit, "vLLM", entry)


# ----------------------------------------------------------------------------- verify
def _overrides(spec: TemperatureSpec, trained: int, config: dict[str, Any]) -> dict[str, Any] | None:
    """The export's ``--hf-overrides`` for vLLM: its rope_parameters with the model's rope_theta (they
    replace the whole dict) and its RoPE per layer type, and ``max_position_embeddings`` where the
    export raises it; None: serve the checkpoint's own config."""
    args = list(export_spec(spec, ENGINE, fill_l0(spec, trained), export_target(config)).args)
    return json.loads(args[args.index("--hf-overrides") + 1]) if "--hf-overrides" in args else None


def route(spec: TemperatureSpec, trained: int, config: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """("export", the spec's overrides) when vLLM's settings express it, ("schedule plugin", the
    RoPE's) for a position schedule, else ("bake", the RoPE's)."""
    if spec.position_dependent:
        return "schedule plugin", _overrides(TemperatureSpec(rope=spec.rope), trained, config)
    try:
        return "export", _overrides(spec, trained, config)
    except ValueError:
        return "bake", _overrides(TemperatureSpec(rope=spec.rope), trained, config)


def bucket_kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL of log-probabilities ``p``, ``q`` ``[K]`` over K tokens plus one bucket for all the rest:
    the exact KL when K is the vocabulary, otherwise a lower bound of it (coarse-graining never
    raises a KL), never negative."""
    rest_p = torch.clamp(1 - p.exp().sum(), min=1e-30)
    rest_q = torch.clamp(1 - q.exp().sum(), min=1e-30)
    kl = (p.exp() * (p - q)).sum() + rest_p * (rest_p.log() - rest_q.log())
    return max(float(kl), 0.0)


def kl_rows(ref: torch.Tensor, top: list, first: int) -> tuple[list[float], list[bool]]:
    """Per scored position: KL(attntemp || vLLM) over the tokens vLLM returned (and the rest as one
    bucket), and whether both put their largest probability on the same token."""
    kl, same = [], []
    for i, row in enumerate(ref):  # [V]
        entry = top[first - 1 + i]  # the output's row p - 1 holds prompt_logprobs[p]: token p given < p
        ids = torch.tensor([k for k, _ in entry])  # [K]
        q = torch.tensor([v for _, v in entry], dtype=torch.float64)  # [K]
        kl.append(bucket_kl(row[ids], q) if len(entry) < row.numel() else bucket_kl(row, q[ids.argsort()]))
        same.append(int(ids[q.argmax()]) == int(row.argmax()))
    return kl, same


def _compare(label: str, ref: EngineReference, got: dict, ids: torch.Tensor, full: bool) -> Comparison:
    length = ids.shape[1]
    first = length // 2
    part = scored(length)
    nll = tuple(-sum(r["token"][part.start : part.stop]) for r in got["rows"])  # token p+1 given < p+1
    kl: list[float] = []
    same: list[bool] = []
    for r, lp in zip(got["rows"], ref.logp, strict=True):
        k, s = kl_rows(lp, r["top"], first + 1)
        kl, same = kl + k, same + s
    per = [float(length - 1 - first)] * len(nll)
    kl_iv = mean_interval(kl)
    method = "bootstrap over tokens" + ("" if full else "; vLLM's top-20 tokens + the rest as one bucket (lower bound)")
    return Comparison(
        label,
        perplexity_interval(nll, per),
        perplexity_interval(ref.nll, per),
        Interval(kl_iv.value, kl_iv.low, kl_iv.high, method=method),
        sum(same) / len(same),
        nll,
        ref.nll,
        tuple(got["command"]),
    )


def verify(cfg: VerifyOptions, spec: TemperatureSpec) -> VerifyResult:
    """Both runs (m = 1 and the spec) on vLLM and in attntemp; see the module doc."""
    check_cpu(cfg.device)
    python = vllm_venv.find_vllm(cfg.engine_dir)  # before the model loads
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))
    trained = trained_length(model)
    length = cfg.window_length(spec, trained)
    ids = windows(tok, cfg.text, length, cfg.chunks)  # [C, L]
    vocab = int(text_config(model).vocab_size)
    top = -1 if vocab <= FULL_VOCAB else 20
    base_spec = baseline(spec)
    refs = {"m = 1": engine_reference(model, base_spec, ids), "spec": engine_reference(model, spec, ids)}
    folder = Path(loading.resolve(cfg.model))
    config = text_config(model).to_dict()
    how, over = route(spec, trained, config)
    with work_folder(cfg.work_dir) as work:
        served = folder
        if how == "bake":
            save_baked(model, tok, spec, work / "baked", overwrite=True)
            served = work / "baked"
        elif how == "schedule plugin":
            vllm_venv.ensure_plugin(python, work)
            remote_code.save_schedule_checkpoint(model, tok, spec, work / "scheduled", overwrite=True)
            served = work / "scheduled"
        base = vllm_venv.run_logprobs(python, folder, ids, _overrides(base_spec, trained, config), top, work)
        tempered = vllm_venv.run_logprobs(python, served, ids, over, top, work)
    runs = [_compare(label, refs[label], got, ids, top == -1) for label, got in (("m = 1", base), ("spec", tempered))]
    tokens = len(ids) * (length - 1 - length // 2)
    return VerifyResult(NAME, f"vllm {base['vllm']}", spec.to_dict(), how, tokens, runs[0], runs[1])


ENGINE = Engine(
    name=NAME,
    export=export_settings,
    with_schedule=with_schedule,
    schedule_readers=SCHEDULE_READERS,
    audit=audit,
    rope_per_layer_type=True,
    verify=verify,
    reads_back=handed_to_vllm,
    check_readings=lambda engine_dir: in_vllm.check_vllm_installed(engine_dir, unavailable()),
)
