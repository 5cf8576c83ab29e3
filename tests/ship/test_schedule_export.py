"""Mistral 3's ``llama_4_scaling_beta`` schedule: its values by hand, and each engine's key for it."""

import json
import math

import pytest
import torch

from attntemp.ops.attention_config import mistral_position_scale
from attntemp.ops.schedules import Llama4, Llama4Scaling
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship.export import export

YARN = {"rope_type": "yarn", "factor": 36.0, "original_max_position_embeddings": 8192}


def spec(l0=8192, rope=YARN, m=1.0):
    params = {"beta": 0.1, "original_max_position_embeddings": l0}
    return TemperatureSpec(m, schedule="llama_4_scaling", schedule_params=params, rope=rope)


def test_the_schedule_is_one_plus_beta_log1p_floor_p_over_l0():
    pos = torch.tensor([0, 8191, 8192, 16383, 16384, 294911])  # [6]
    got = Llama4Scaling(0.1, 8192.0)(0, 4, pos, pos + 1)[0]  # [6]
    want = [1, 1, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3), 1 + 0.1 * math.log(36)]
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=0)
    assert [mistral_position_scale(int(p), 0.1, 8192) for p in pos] == pytest.approx(want, rel=1e-12)  # the audit's
    # Llama 4 counts from p + 1: at 8191 it has stepped already, Mistral's has not
    assert float(Llama4(8192.0, 0.1)(0, 4, pos[1:2], pos[1:2])[0, 0]) == pytest.approx(1 + 0.1 * math.log(2))


def test_transformers_gets_the_beta_in_its_yarn_rope_parameters():
    out = export(spec(), "transformers")
    rp = out.rope_parameters
    assert rp["llama_4_scaling_beta"] == 0.1 and rp["original_max_position_embeddings"] == 8192
    assert out.logit_multiplier == pytest.approx((0.1 * math.log(36) + 1) ** 2)  # the static part: YaRN's own
    assert "deepseek_v3" in out.notes[-1] and "mistral4" in out.notes[-1]


def test_vllm_gets_llama_4_scaling_in_its_hf_overrides():
    out = export(spec(m=1.2), "vllm")
    overrides = json.loads(out.args[out.args.index("--hf-overrides") + 1])
    assert overrides["llama_4_scaling"] == {"original_max_position_embeddings": 8192, "beta": 0.1}
    assert overrides["rope_parameters"]["attention_factor"] == pytest.approx(math.sqrt(1.2) * (0.1 * math.log(36) + 1))
    assert "DeepSeek-V2/V3" in out.notes[-1]


def test_llamacpp_gets_the_temperature_keys_in_both_commands():
    out = export(spec(), "llama.cpp", gguf_arch="deepseek2")
    keys = ["deepseek2.attention.temperature_scale=float:0.1", "deepseek2.attention.temperature_length=int:8192"]
    for key in keys:
        assert key in out.args and key in out.perplexity
    assert "mistral4" in out.notes[-1]


def test_refused_where_no_engine_key_can_carry_it():
    with pytest.raises(ValueError, match="differs from the rope's original_max_position_embeddings=8192"):
        export(spec(l0=16384), "vllm")
    with pytest.raises(ValueError, match="inside a yarn rope_parameters"):
        export(spec(rope=None), "transformers")
    with pytest.raises(ValueError, match="position-dependent"):  # Llama 4's own schedule still has no engine key
        export(TemperatureSpec(schedule="llama4"), "vllm")
