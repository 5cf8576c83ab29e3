"""The remote-code modules (attntemp.assets.remote_code) imported and run here: the schedules against
attntemp.ops.schedules, the transformers class on the tiny model against attntemp.patch, and the
vLLM plugin against a stand-in vLLM (the real one runs in `pytest -m engines`)."""

import importlib
import sys
import types

import pytest
import torch

from attntemp.assets.remote_code import attntemp_schedule, modeling_attntemp_schedule
from attntemp.hf.loading import load_model
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship import remote_code
from attntemp.ship.bake import fixed_input, logits

SCHEDULES = [
    ("logn", {"trained_len": 16}),
    ("sqrt_logn", {"trained_len": 16}),
    ("llama4", {"floor_scale": 8.0, "attn_scale": 0.2}),
    ("ssmax", {"s": 0.5}),
    ("log_length", {"trained_len": 16, "a": [0.0, 0.1], "b": [[0.3, -0.1, 0.2, 0.0], [0.1, 0.1, 0.1, 0.1]]}),
    ("gated_constant", {"trained_len": 16, "multiplier": 1.3}),
]


@pytest.mark.parametrize("name, params", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_the_shipped_schedules_are_attntemps(name, params):
    spec = TemperatureSpec(schedule=name, schedule_params=params)
    positions = torch.arange(0, 80, 3)  # [Lq]
    n_keys = (positions + 1).clamp_max(50)  # [Lq]: a window of 50 for ssmax and log_length
    for layer in (0, 1):
        want = spec.multipliers(layer, 4, positions, n_keys)  # [H, Lq]
        got = attntemp_schedule.schedule(name, params, layer, positions, n_keys)  # [H or 1, Lq]
        assert torch.allclose(got.expand_as(want), want, rtol=1e-6), (name, layer)
    with pytest.raises(ValueError, match="is not one of"):
        attntemp_schedule.schedule("constant", {}, 0, positions, n_keys)


def test_the_remote_code_class_on_the_tiny_model_is_the_patched_model():
    """The transformers class itself (no checkpoint, no trust_remote_code): the tiny model's weights
    under it give attntemp.patch's logits, past L0 where the schedule acts."""
    model, _ = load_model("tiny")
    spec = TemperatureSpec(schedule="log_length", schedule_params={"trained_len": 64, "a": 0.0, "b": 0.3})
    ids = fixed_input(model, 160)  # [1, 160]
    with patch(model, spec):
        want = logits(model, ids)  # [1, 160, V]
    config = modeling_attntemp_schedule.AttntempScheduleLlamaConfig(**model.config.to_dict())
    config.attntemp_schedule = remote_code.schedule_config(spec)
    scheduled = modeling_attntemp_schedule.AttntempScheduleLlamaForCausalLM(config)
    scheduled.load_state_dict(model.state_dict())
    got = logits(scheduled.eval(), ids)  # [1, 160, V]
    assert (got - want).abs().max() <= 1e-4
    plain = got - logits(model, ids)  # [1, 160, V]
    assert plain[:, :64].abs().max() <= 1e-5 < 1e-3 < plain[:, 64:].abs().max()  # it acts past L0 only
    assert modeling_attntemp_schedule.AttntempScheduleLlamaConfig.model_type == remote_code.MODEL_TYPE


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in for vLLM's ModelRegistry and Llama (the plugin modules import those only)."""
    registry: dict[str, str] = {}

    class ModelRegistry:
        @staticmethod
        def get_supported_archs():
            return list(registry)

        @staticmethod
        def register_model(arch, where):
            registry[arch] = where

    class LlamaForCausalLM(torch.nn.Module):
        def __init__(self, *, vllm_config, prefix=""):
            super().__init__()
            attn = types.SimpleNamespace(rotary_emb=lambda positions, q, k: (q, k), head_dim=2)
            self.model = types.SimpleNamespace(layers=[types.SimpleNamespace(self_attn=attn)])

    vllm = types.ModuleType("vllm")
    vllm.ModelRegistry = ModelRegistry
    llama = types.ModuleType("vllm.model_executor.models.llama")
    llama.LlamaForCausalLM = LlamaForCausalLM
    for name, module in [("vllm", vllm), ("vllm.model_executor", types.ModuleType("x")),
                         ("vllm.model_executor.models", types.ModuleType("x")),
                         ("vllm.model_executor.models.llama", llama)]:  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "attntemp.assets.remote_code.vllm_model", raising=False)
    return registry


def test_the_vllm_plugin_registers_the_schedule_class(fake_vllm):
    plugin = importlib.import_module("attntemp.assets.remote_code.vllm_plugin")
    plugin.register()
    plugin.register()  # once only
    assert fake_vllm == {remote_code.CLASS: f"{remote_code.PLUGIN}.model:{remote_code.CLASS}"}


def test_the_vllm_model_scales_q_after_the_rotary_embedding(fake_vllm):
    model_module = importlib.import_module("attntemp.assets.remote_code.vllm_model")
    spec = {"name": "logn", "params": {"trained_len": 4}}
    hf_config = types.SimpleNamespace(attntemp_schedule=spec)
    vllm_config = types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf_config))
    model = model_module.AttntempScheduleLlamaForCausalLM(vllm_config=vllm_config)
    rotary = model.model.layers[0].self_attn.rotary_emb
    positions = torch.arange(12)  # [T]
    q, k = torch.ones(12, 3 * 2), torch.ones(12, 2)  # [T, H * D], [T, D]
    got_q, got_k = rotary(positions, q, k)
    m = attntemp_schedule.schedule("logn", spec["params"], 0, positions, positions + 1)[0]  # [T]
    assert torch.allclose(got_q, m[:, None].expand(12, 6)) and torch.equal(got_k, k)
    assert m[3] == 1.0 and m[11] > 1.0  # log-n acts past L0 only
