"""Ship a position-dependent spec to transformers: a checkpoint that carries its schedule as remote code.

A checkpoint has no per-position q scale, so ``bake`` refuses schedules whose m changes with the
query (logn, sqrt_logn, llama4, ssmax, log_length, gated_constant). This writes them anyway, as transformers'
remote code: the static part of the spec (multiplier, layers, heads, RoPE) is baked into q_proj
as usual, and two small self-contained modules copied from :mod:`attntemp.assets.remote_code`
(torch + transformers only, no attntemp), ``modeling_attntemp_schedule.py`` and the schedules'
``attntemp_schedule.py``, subclass ``LlamaForCausalLM`` and multiply each head's q rows by the
schedule's m(position, visible keys) on every forward. ``config.json`` names it in ``auto_map``,
so ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`` loads it; positions come
from ``position_ids`` (absolute), so generation with a KV cache is scheduled correctly. The saved
folder is reloaded that way and its logits checked against ``attntemp.patch`` before it is put in
place atomically (:func:`attntemp.utils.install.install`, as ``bake`` does). Llama-architecture
models only (``model_type`` llama).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ..assets import remote_code_path
from ..assets.remote_code.vllm_plugin import CLASS  # the architecture a schedule checkpoint names
from ..hf import patch
from ..hf.introspect import text_config
from ..ops.spec import TemperatureSpec
from ..utils import install
from .bake import BAKED, SPEC_FILE, BakeResult, bake, check_out_dir, fixed_input, logits

MODULE = "modeling_attntemp_schedule"
CONFIG_CLASS = "AttntempScheduleLlamaConfig"
# The checkpoint's own model_type: transformers knows no such type, so a load without
# trust_remote_code=True stops (it would otherwise load the folder as a plain, unscheduled Llama).
MODEL_TYPE = "attntemp_schedule_llama"
SCHEDULED = ("logn", "sqrt_logn", "llama4", "ssmax", "log_length", "gated_constant")

# The remote code and the vLLM plugin are real modules of attntemp.assets.remote_code, copied as
# they are (each formula is the one of attntemp.ops.schedules; tests compare the logits with
# attntemp.patch): the checkpoint gets SCHEDULE_FILE and f"{MODULE}.py"; vLLM's environment a
# package PLUGIN whose __init__ registers CLASS (the architecture a schedule checkpoint names), a
# vLLM LlamaForCausalLM whose attention layers multiply q by m(position, position + 1) after vLLM's
# rotary embedding (RoPE is linear).
SCHEDULE_FILE = "attntemp_schedule.py"
PLUGIN = "attntemp_vllm_schedule"
PLUGIN_FILES = {  # the plugin's files: what each is copied from
    "pyproject.toml": "vllm_pyproject.toml",
    f"{PLUGIN}/__init__.py": "vllm_plugin.py",
    f"{PLUGIN}/model.py": "vllm_model.py",
    f"{PLUGIN}/{SCHEDULE_FILE}": SCHEDULE_FILE,
}


def source(name: str) -> str:
    """The text of ``name`` in :mod:`attntemp.assets.remote_code`."""
    return (remote_code_path() / name).read_text(encoding="utf-8")


def write_vllm_plugin(folder: str | Path) -> Path:
    """The vLLM plugin package (``pip install FOLDER`` into vLLM's environment); returns ``folder``."""
    root = Path(folder)
    (root / PLUGIN).mkdir(parents=True, exist_ok=True)
    for name, asset in PLUGIN_FILES.items():
        (root / name).write_text(source(asset), encoding="utf-8")
    return root


def schedule_config(spec: TemperatureSpec) -> dict[str, Any]:
    """``config.attntemp_schedule``: the schedule's name and parameters as JSON values."""
    return {"name": spec.schedule, "params": spec.to_dict()["schedule_params"]}


def _static_part(spec: TemperatureSpec) -> TemperatureSpec:
    """``spec`` without its position schedule (what is baked into the weights)."""
    return dataclasses.replace(spec, schedule="constant", schedule_params=())


def schedule_start(spec: TemperatureSpec) -> int:
    """The first position where the schedule can differ from its static part: the trained length
    L0 of logn, sqrt_logn and log_length's slope, llama4's floor_scale; 0 for ssmax (every n)."""
    params = spec.to_dict()["schedule_params"]
    if spec.schedule == "llama4":
        return int(params.get("floor_scale", 8192))
    if spec.schedule in ("logn", "sqrt_logn", "log_length", "gated_constant"):
        return int(params.get("trained_len", 2048))
    return 0


def tokens_past_start(spec: TemperatureSpec, tokens: int) -> int:
    """The tokens a schedule checkpoint is checked on: ``tokens`` past :func:`schedule_start`, so
    the check covers positions where the schedule acts (a check up to L0 compares two models that
    agree there by construction)."""
    return schedule_start(spec) + tokens


def check_schedule_spec(model: torch.nn.Module, spec: TemperatureSpec) -> None:
    """Raise unless ``spec`` has a position-dependent schedule and ``model`` is a Llama."""
    if spec.schedule not in SCHEDULED and spec.position_dependent:
        raise ValueError(
            f"schedule={spec.schedule!r} has no schedule checkpoint (it carries one of {list(SCHEDULED)}); "
            "export it to the engines' own keys with `attntemp export`"
        )
    if spec.schedule not in SCHEDULED:
        raise ValueError(
            f"schedule={spec.schedule!r} is not position-dependent; bake it with `attntemp bake` "
            f"(a schedule checkpoint carries one of {list(SCHEDULED)})"
        )
    mt = text_config(model).model_type
    if mt != "llama":
        raise ValueError(
            f"model_type={mt!r}: the schedule checkpoint's remote code subclasses Llama; use a llama model"
        )


def _write_remote(folder: Path, spec: TemperatureSpec) -> None:
    """The remote code's modules into the checkpoint ``folder``, its config naming them."""
    for name in (SCHEDULE_FILE, f"{MODULE}.py"):
        (folder / name).write_text(source(name), encoding="utf-8")
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["attntemp_schedule"] = schedule_config(spec)
    cfg["auto_map"] = {"AutoConfig": f"{MODULE}.{CONFIG_CLASS}", "AutoModelForCausalLM": f"{MODULE}.{CLASS}"}
    cfg["architectures"] = [CLASS]
    cfg["model_type"] = MODEL_TYPE
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def remote_logits(path: Path, ids: torch.Tensor) -> torch.Tensor:
    """Load ``path`` with plain ``AutoModelForCausalLM`` (trust_remote_code) and return fp32 logits."""
    from transformers import AutoModelForCausalLM

    fresh: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=True)
    return logits(fresh.eval(), ids)


def save_schedule_checkpoint(
    model: torch.nn.Module,
    tokenizer: Any,
    spec: TemperatureSpec,
    out_dir: str | Path,
    overwrite: bool = False,
    check_tokens: int = 64,
    atol: float = 1e-4,
) -> BakeResult:
    """Bake the static part of ``spec`` into the ORIGINAL fp32 ``model`` (in place), write the
    schedule as remote code and check the reloaded folder against ``attntemp.patch(model, spec)`` on
    ``check_tokens`` tokens past where the schedule starts to act (:func:`tokens_past_start`);
    nothing appears at ``out_dir`` unless the logits agree within ``atol``."""
    out = Path(out_dir)
    install.recover(out.absolute().parent)
    check_out_dir(out, overwrite)
    check_schedule_spec(model, spec)
    check_tokens = tokens_past_start(spec, check_tokens)
    ids = fixed_input(model, check_tokens)  # [1, L]
    with patch.patch(model, spec):
        want = logits(model, ids)  # [1, L, V]
    bake(model, _static_part(spec))
    tmp = install.staging(out)
    try:
        hf_model: Any = model
        hf_model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _write_remote(tmp, spec)
        diff = float((remote_logits(tmp, ids) - want).abs().max())
        if not diff <= atol:
            raise ValueError(f"schedule checkpoint differs from the patched model: max abs diff {diff:.3g} > {atol}")
        record = {"format": "attntemp.ScheduleCheckpoint/1", "spec": spec.to_dict(), "max_abs_diff": diff}
        (tmp / SPEC_FILE).write_text(json.dumps(record, indent=2) + "\n")
        install.install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    steps = tuple(dataclasses.replace(s, target=f"{s.target} + {MODULE}") for s in getattr(model, BAKED))
    return BakeResult(out, diff, check_tokens, steps)
