"""Ship a position-dependent spec to transformers: a checkpoint that carries its schedule as remote code.

A checkpoint has no per-position q scale, so ``bake`` refuses schedules whose m changes with the
query (logn, sqrt_logn, llama4, ssmax, log_length). This writes them anyway, as transformers'
remote code: the static part of the spec (multiplier, layers, heads, RoPE) is baked into q_proj
as usual, and a small self-contained ``modeling_attntemp_schedule.py`` (torch + transformers
only, no attntemp) subclasses ``LlamaForCausalLM`` and multiplies each head's q rows by the
schedule's m(position, visible keys) on every forward. ``config.json`` names it in ``auto_map``,
so ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`` loads it; positions come
from ``position_ids`` (absolute), so generation with a KV cache is scheduled correctly. The saved
folder is reloaded that way and its logits checked against ``attntemp.patch`` before it appears.
Llama-architecture models only (``model_type`` llama).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..hf import patch
from ..hf.introspect import text_config
from ..ops.spec import TemperatureSpec
from .bake import BAKED, SPEC_FILE, BakeResult, bake, check_out_dir, fixed_input, logits

MODULE = "modeling_attntemp_schedule"
CLASS = "AttntempScheduleLlamaForCausalLM"
CONFIG_CLASS = "AttntempScheduleLlamaConfig"
# The checkpoint's own model_type: transformers knows no such type, so a load without
# trust_remote_code=True stops (it would otherwise load the folder as a plain, unscheduled Llama).
MODEL_TYPE = "attntemp_schedule_llama"
SCHEDULED = ("logn", "sqrt_logn", "llama4", "ssmax", "log_length")

# The remote code, written as is into the checkpoint. Each formula is the one of
# attntemp.ops.schedules (tests compare the logits with attntemp.patch).
SOURCE = '''"""Position-dependent attention temperature written by attntemp (needs torch and transformers only).

config.attntemp_schedule = {"name": ..., "params": {...}} gives m = 1/T per query, multiplied into
each head's q rows (the static part of the temperature is already in q_proj's weights):
  logn       m = log_L0(p) for 1-indexed position p > L0, else 1 (Qwen v1 use_logn_attn)
  sqrt_logn  m = sqrt(log_L0(p)) for p > L0, else 1
  llama4     m = 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)) (Llama 4)
  ssmax      m = s * ln n over the n visible keys, floored at 1e-6 (arXiv:2501.19399)
  log_length ln m = a + b ln(max(1, n / L0)), a and b a number, one per layer or per (layer, head)
"""

import math

import torch
from transformers import LlamaForCausalLM


def _coefficient(c, layer, device):
    """A number, one per layer, or one per (layer, head) as [H or 1, 1]."""
    if isinstance(c, (int, float)):
        return torch.tensor([[float(c)]], device=device)
    row = c[layer]
    if isinstance(row, (list, tuple)):
        return torch.tensor(row, dtype=torch.float32, device=device).reshape(-1, 1)
    return torch.tensor([[float(row)]], device=device)


def schedule(name, params, layer, positions, n_keys):
    """m for each query: [H or 1, Lq] from 0-indexed positions and visible keys [Lq]."""
    p = positions.to(torch.float32)
    if name in ("logn", "sqrt_logn"):
        l0 = params.get("trained_len", 2048)
        q = p + 1.0
        m = torch.where(q > l0, torch.log(q) / math.log(l0), torch.ones_like(q))
        return (m.sqrt() if name == "sqrt_logn" else m).unsqueeze(0)
    if name == "llama4":
        floor_scale, attn_scale = params.get("floor_scale", 8192.0), params.get("attn_scale", 0.1)
        return (1.0 + attn_scale * torch.log1p(torch.floor((p + 1.0) / floor_scale))).unsqueeze(0)
    if name == "ssmax":
        return (params.get("s", 0.43) * torch.log(n_keys.to(torch.float32))).clamp_min(1e-6).unsqueeze(0)
    if name == "log_length":
        x = (n_keys.to(torch.float32) / params.get("trained_len", 2048)).clamp_min(1.0).log().unsqueeze(0)
        a = _coefficient(params.get("a", 0.0), layer, n_keys.device)
        b = _coefficient(params.get("b", 0.0), layer, n_keys.device)
        return (a + b * x).exp()
    raise ValueError(f"attntemp_schedule name={name!r} is not one of logn, sqrt_logn, llama4, ssmax, log_length")


def _positions(kwargs, hidden):
    pos = kwargs.get("position_ids")
    if pos is None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        start = cache.get_seq_length() if cache is not None else 0
        pos = torch.arange(start, start + hidden.shape[1], device=hidden.device).unsqueeze(0)
    return pos.reshape(-1, hidden.shape[1])


from transformers import LlamaConfig  # noqa: E402


class AttntempScheduleLlamaConfig(LlamaConfig):
    """A Llama config with its own model_type: without trust_remote_code=True transformers refuses
    the folder instead of loading it as a plain Llama, without the schedule."""

    model_type = "attntemp_schedule_llama"


class AttntempScheduleLlamaForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM whose q rows are multiplied by the schedule's m(position, visible keys)."""

    config_class = AttntempScheduleLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        spec = config.attntemp_schedule
        window = getattr(config, "sliding_window", None)
        for layer in self.model.layers:
            attn = layer.self_attn
            attn.register_forward_pre_hook(self._pre_hook(spec, attn.layer_idx, window), with_kwargs=True)
            attn.q_proj.register_forward_hook(self._q_hook(attn))

    @staticmethod
    def _pre_hook(spec, layer, window):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            pos = _positions(kwargs, hidden)  # [B or 1, Lq]
            n = pos + 1
            n = n.clamp_max(int(window)) if window else n
            b, lq = pos.shape
            m = schedule(spec["name"], spec.get("params", {}), layer, pos.reshape(-1), n.reshape(-1))
            module._attntemp_m = m.reshape(m.shape[0], b, lq).transpose(0, 1)  # [B, H or 1, Lq]
        return hook

    @staticmethod
    def _q_hook(attn):
        def hook(module, inputs, out):
            m = attn._attntemp_m  # [B, H or 1, Lq]
            b, lq = out.shape[0], out.shape[1]
            q = out.view(b, lq, -1, attn.head_dim)  # [B, Lq, H, D]
            return (q * m.transpose(1, 2).unsqueeze(-1).to(q.dtype)).reshape(out.shape)
        return hook
'''


# vLLM: the same schedule through its model-registration plugin entry point (``vllm.general_plugins``).
# ``pip install`` the folder :func:`write_vllm_plugin` writes into vLLM's environment; it registers
# CLASS (the architecture a schedule checkpoint names), a vLLM LlamaForCausalLM whose attention
# layers multiply q by m(position, position + 1) after vLLM's rotary embedding (RoPE is linear).
PLUGIN = "attntemp_vllm_schedule"
PLUGIN_PYPROJECT = f"""[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "attntemp-vllm-schedule"
version = "0.1.0"
description = "vLLM plugin: the position schedule of attntemp schedule checkpoints"

[project.entry-points."vllm.general_plugins"]
attntemp_schedule = "{PLUGIN}:register"
"""
PLUGIN_INIT = f"""\"\"\"Registers {CLASS} with vLLM (written by attntemp).\"\"\"


def register():
    from vllm import ModelRegistry

    if "{CLASS}" not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model("{CLASS}", "{PLUGIN}.model:{CLASS}")
"""
_PLUGIN_CLASSES = f"""

class _Scheduled(torch.nn.Module):
    \"\"\"vLLM's rotary embedding, then q [tokens, H * D] times m(position, position + 1) per head.\"\"\"

    def __init__(self, rope, spec, layer, head_dim):
        super().__init__()
        self.rope, self.spec, self.layer, self.head_dim = rope, spec, layer, head_dim

    def forward(self, positions, q, k, *args, **kwargs):
        q, k = self.rope(positions, q, k, *args, **kwargs)
        pos = positions.reshape(-1)
        m = schedule(self.spec["name"], self.spec.get("params", {{}}), self.layer, pos, pos + 1)  # [H or 1, T]
        qh = q.view(q.shape[0], -1, self.head_dim)  # [T, H, D]
        return (qh * m.t().unsqueeze(-1).to(q.dtype)).reshape(q.shape), k


class {CLASS}(LlamaForCausalLM):
    \"\"\"vLLM's Llama with the attntemp schedule of config.attntemp_schedule on q.\"\"\"

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        spec = vllm_config.model_config.hf_config.attntemp_schedule
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            attn.rotary_emb = _Scheduled(attn.rotary_emb, spec, i, attn.head_dim)
"""
PLUGIN_MODEL = (
    SOURCE.split("\n\ndef _positions")[0].replace(
        "from transformers import LlamaForCausalLM", "from vllm.model_executor.models.llama import LlamaForCausalLM"
    )
    + _PLUGIN_CLASSES
)


def write_vllm_plugin(folder: str | Path) -> Path:
    """The vLLM plugin package (``pip install FOLDER`` into vLLM's environment); returns ``folder``."""
    root = Path(folder)
    (root / PLUGIN).mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (root / PLUGIN / "__init__.py").write_text(PLUGIN_INIT)
    (root / PLUGIN / "model.py").write_text(PLUGIN_MODEL)
    return root


def schedule_config(spec: TemperatureSpec) -> dict[str, Any]:
    """``config.attntemp_schedule``: the schedule's name and parameters as JSON values."""
    return {"name": spec.schedule, "params": spec.to_dict()["schedule_params"]}


def _static_part(spec: TemperatureSpec) -> TemperatureSpec:
    d = spec.to_dict()
    d.update(schedule="constant", schedule_params={})
    return TemperatureSpec.from_dict(d)


def schedule_start(spec: TemperatureSpec) -> int:
    """The first position where the schedule can differ from its static part: the trained length
    L0 of logn, sqrt_logn and log_length's slope, llama4's floor_scale; 0 for ssmax (every n)."""
    params = spec.to_dict()["schedule_params"]
    if spec.schedule == "llama4":
        return int(params.get("floor_scale", 8192))
    if spec.schedule in ("logn", "sqrt_logn", "log_length"):
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
    (folder / f"{MODULE}.py").write_text(SOURCE)
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
    check_out_dir(out, overwrite)
    check_schedule_spec(model, spec)
    check_tokens = tokens_past_start(spec, check_tokens)
    ids = fixed_input(model, check_tokens)  # [1, L]
    with patch.patch(model, spec):
        want = logits(model, ids)  # [1, L, V]
    bake(model, _static_part(spec))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
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
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    steps = tuple(dataclasses.replace(s, target=f"{s.target} + {MODULE}") for s in getattr(model, BAKED))
    return BakeResult(out, diff, check_tokens, steps)
