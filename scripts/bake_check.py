"""Print, as JSON, how exactly baked checkpoints and exported settings reproduce the patched model.

For each architecture of tests/tiny_configs.py (random weights x4 so attention is peaked): the max
abs logit change the spec makes (patched vs plain, the size of the effect), and the max abs diff of
the baked checkpoint reloaded with plain transformers vs the patched model (fp32). Then a YaRN spec
baked into a llama, the transformers export loaded fresh, the refusals, and the engine factors for
s = 4. Run: ``.venv/bin/python scripts/bake_check.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny_configs import config, model
from transformers import AutoModelForCausalLM

from attntemp.hf.patch import patch
from attntemp.ops.schedules import yarn_multiplier
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship import bake, export
from attntemp.ship.engines import llamacpp, vllm
from attntemp.ship.engines import transformers as transformers_engine
from attntemp.utils.options import from_argv

X = torch.randint(1, 97, (2, 48), generator=torch.Generator().manual_seed(1))  # [2, 48]
PER_HEAD = ("llama", "mistral", "qwen2", "phi3", "gpt_neox")
PER_LAYER = ("qwen3", "gemma3_text")


def sharp(m: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(4)
    return m


def logits(m: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return m(X).logits


def spec_for(m: torch.nn.Module, arch: str) -> TemperatureSpec:
    if arch in PER_LAYER:
        return TemperatureSpec(layers=(0.7, 1.6))
    cfg, g = m.config, torch.Generator().manual_seed(2)
    return TemperatureSpec.per_head(0.5 + 1.5 * torch.rand(cfg.num_hidden_layers, cfg.num_attention_heads, generator=g))


def bake_row(m: torch.nn.Module, spec: TemperatureSpec) -> dict:
    base = logits(m)
    with patch(m, spec):
        want = logits(m)
    with tempfile.TemporaryDirectory() as tmp:
        result = bake.save_baked(m, None, spec, Path(tmp) / "out")
        fresh = AutoModelForCausalLM.from_pretrained(result.path, dtype=torch.float32).eval()
        diff = float((logits(fresh) - want).abs().max())
    return {
        "target": result.layers[0].target,
        "effect": float((want - base).abs().max()),
        "save_check_max_abs_diff": result.max_abs_diff,
        "reload_max_abs_diff": diff,
    }


def llama32() -> torch.nn.Module:
    cfg = config("llama")
    cfg.max_position_embeddings = 32
    torch.manual_seed(0)
    return sharp(AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval())


def export_row() -> dict:
    m, spec = llama32(), dataclasses.replace(TemperatureSpec.yarn(4, 32), multiplier=1.15)
    with patch(m, spec):
        want = logits(m)
    result = export.export(spec, "transformers", rope_theta=10000.0)
    cfg = config("llama")
    cfg.max_position_embeddings, cfg.rope_parameters = 32, result.rope_parameters
    fresh = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    fresh.load_state_dict(m.state_dict())
    return {
        "logit_multiplier": result.logit_multiplier,
        "rope_parameters": result.rope_parameters,
        "fresh_load_max_abs_diff": float((logits(fresh) - want).abs().max()),
    }


def refusal(fn) -> str:
    try:
        fn()
    except ValueError as exc:
        return str(exc)
    return "NOT REFUSED"


@dataclasses.dataclass(frozen=True)
class BakeCheckConfig:
    """No options: every architecture of tests/tiny_configs.py and the same specs, each run."""


def main(argv: list[str] | None = None) -> None:
    from_argv(BakeCheckConfig, argv, __doc__.split("\n\n")[0])  # --help, and no other flag
    out: dict = {"bake": {}}
    for arch in PER_HEAD + PER_LAYER:
        m = sharp(model(arch))
        kind = "per-layer" if arch in PER_LAYER else "per-head"
        out["bake"][arch] = {"spec": kind, **bake_row(m, spec_for(m, arch))}
    out["bake"]["llama_yarn_4_32"] = bake_row(llama32(), TemperatureSpec.yarn(4, 32))
    out["export_transformers_yarn_4_32_m_1.15"] = export_row()
    qwen3 = model("qwen3")
    out["refusals"] = {
        "qwen3_per_head": refusal(lambda: bake.plan(qwen3, spec_for(qwen3, "llama"))),
        "gemma2_m_1.3": refusal(lambda: bake.plan(model("gemma2"), TemperatureSpec(multiplier=1.3))),
        "logn": refusal(lambda: bake.plan(model("llama"), TemperatureSpec(schedule="logn"))),
        "export_m_without_yarn": refusal(lambda: export.export(TemperatureSpec(multiplier=1.2), "vllm")),
    }
    m4 = yarn_multiplier(4)
    out["factors_s4_plain_yarn"] = {
        "logit_multiplier": m4,
        "transformers_attention_factor": transformers_engine.attention_factor(m4),
        "vllm_attn_factor": vllm.attn_factor(m4, 4),
        "llamacpp_attn_factor": llamacpp.attn_factor(m4, 4),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
