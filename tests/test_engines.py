"""attntemp.engines: engine conventions on known values, round trips, a fresh load, refusals."""

import dataclasses
import math

import pytest
import torch
from tiny_configs import config
from transformers import AutoModelForCausalLM

import attntemp.ship.export as E
from attntemp.hf.patch import patch
from attntemp.ops.schedules import yarn_mscale, yarn_multiplier
from attntemp.ops.spec import TemperatureSpec

X = torch.randint(1, 97, (2, 48), generator=torch.Generator().manual_seed(1))  # [2, 48]


def test_known_values_for_s_4():
    assert E.transformers_logit_multiplier(1.1386) == pytest.approx(1.2965, abs=2e-4)
    assert E.transformers_logit_multiplier(yarn_mscale(4)) == pytest.approx(yarn_multiplier(4), rel=1e-12)
    assert yarn_multiplier(4) == pytest.approx(1.2965, abs=1e-4)
    # the plain YaRN temperature is each engine's default: vLLM's attn_factor and llama.cpp's f are 1
    assert E.vllm_attn_factor(yarn_multiplier(4), 4) == pytest.approx(1.0, rel=1e-12)
    assert E.llamacpp_attn_factor(yarn_multiplier(4), 4) == pytest.approx(1.0, rel=1e-12)
    assert E.vllm_logit_multiplier(1.0, 4) == pytest.approx(1.2965, abs=1e-4)
    assert E.llamacpp_logit_multiplier(1.0, 4) == pytest.approx(1.2965, abs=1e-4)
    # no scaling (s = 1): every factor is sqrt(m)
    assert E.vllm_attn_factor(1.44, 1) == E.llamacpp_attn_factor(1.44, 1) == pytest.approx(1.2)


@pytest.mark.parametrize("m", [0.5, 1.0, 1.2965, 2.0])
@pytest.mark.parametrize("s", [1.0, 4.0, 32.0])
def test_round_trips(m, s):
    assert E.transformers_logit_multiplier(E.transformers_attention_factor(m)) == pytest.approx(m, rel=1e-12)
    assert E.vllm_logit_multiplier(E.vllm_attn_factor(m, s), s) == pytest.approx(m, rel=1e-12)
    assert E.llamacpp_logit_multiplier(E.llamacpp_attn_factor(m, s), s) == pytest.approx(m, rel=1e-12)


def test_bad_conversion_inputs_name_the_argument():
    with pytest.raises(ValueError, match=r"multiplier=0"):
        E.transformers_attention_factor(0)
    with pytest.raises(ValueError, match=r"s=0.5 .*>= 1.0"):
        E.vllm_attn_factor(1.2, 0.5)


def yarn_spec(multiplier=1.15):
    return dataclasses.replace(TemperatureSpec.yarn(4, 32), multiplier=multiplier)


def test_transformers_export_loaded_fresh_equals_the_patched_model():
    cfg = config("llama")
    cfg.max_position_embeddings = 32
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(4)  # peaked attention: the temperature moves the logits by far more than 1e-4
        base = m(X).logits
        with patch(m, yarn_spec()):
            want = m(X).logits
    assert (want - base).abs().max() > 1e-2
    result = E.export(yarn_spec(), "transformers", rope_theta=cfg.rope_parameters["rope_theta"])
    assert result.logit_multiplier == pytest.approx(1.15 * yarn_multiplier(4), rel=1e-12)
    fresh_cfg = config("llama")
    fresh_cfg.max_position_embeddings = 32
    fresh_cfg.rope_parameters = result.rope_parameters  # no attntemp patch from here on
    fresh = AutoModelForCausalLM.from_config(fresh_cfg, attn_implementation="sdpa").eval()
    fresh.load_state_dict(m.state_dict())
    with torch.no_grad():
        got = fresh(X).logits
    assert (got - want).abs().max() <= 1e-4


def test_vllm_writes_both_spellings_of_the_same_temperature():
    result = E.export(yarn_spec(), "vllm", rope_theta=10000.0)
    rp, m = result.rope_parameters, 1.15 * yarn_multiplier(4)
    assert E.transformers_logit_multiplier(rp["attention_factor"]) == pytest.approx(m, rel=1e-12)
    assert E.vllm_logit_multiplier(rp["attn_factor"], 4.0) == pytest.approx(m, rel=1e-12)
    assert result.args[-2:] == ("--max-model-len", "128") and rp["rope_theta"] == 10000.0
    assert "mscale" not in rp and '"rope_scaling"' in result.render()


def test_llamacpp_flags_encode_the_multiplier():
    result = E.export(yarn_spec(), "llama.cpp", gguf_arch="llama")
    args = list(result.args)
    assert args[:6] == ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32"]
    key, value = args[args.index("--override-kv") + 1].split("=float:")
    assert key == "llama.rope.scaling.attn_factor"
    m = E.llamacpp_logit_multiplier(float(value), 4.0)
    assert m == pytest.approx(1.15 * yarn_multiplier(4), rel=1e-8)
    plain = E.export(TemperatureSpec.yarn(4, 32), "llama.cpp")  # f = 1: the built-in factor
    assert "--override-kv" not in plain.args


def test_trained_length_fills_the_rope_and_render_states_m():
    spec = TemperatureSpec(multiplier=1.1, rope={"rope_type": "yarn", "factor": 4.0})
    result = E.export(spec, "transformers", trained_length=32)
    assert result.rope_parameters["original_max_position_embeddings"] == 32
    m = 1.1 * yarn_multiplier(4)  # the rope's default factor lands on top of the spec's m
    assert result.logit_multiplier == pytest.approx(m, rel=1e-12)
    assert result.rope_parameters["attention_factor"] == pytest.approx(math.sqrt(m), rel=1e-12)
    first = result.render().splitlines()[0]
    assert first.startswith(f"# logit multiplier m = {m:.6g} (temperature T = {1 / m:.6g})")


@pytest.mark.parametrize("engine", E.ENGINES)
def test_refusals_say_why(engine):
    heads = TemperatureSpec.per_head([[1.0, 1.2], [1.0, 1.0]], rope=dict(TemperatureSpec.yarn(4, 32).rope))
    with pytest.raises(ValueError, match=r"per-head multipliers.*bake them into q_proj with `attntemp bake`"):
        E.export(heads, engine)
    with pytest.raises(ValueError, match=r"schedule='logn' is position-dependent"):
        E.export(TemperatureSpec(schedule="logn", schedule_params={"trained_len": 32}), engine)
    with pytest.raises(ValueError, match=r"the spec has no RoPE, and the YaRN attention factor is the only"):
        E.export(TemperatureSpec(multiplier=1.2), engine)
    with pytest.raises(ValueError, match=r"trained_length=64 disagrees.*original_max_position_embeddings=32"):
        E.export(yarn_spec(), engine, trained_length=64)
    with pytest.raises(ValueError, match=r"needs original_max_position_embeddings.*--trained-length"):
        E.export(TemperatureSpec(rope={"rope_type": "yarn", "factor": 4.0}), engine)
    assert E.export(TemperatureSpec(), engine).notes == ("m = 1: nothing to change",)


def test_engine_specific_refusals():
    with pytest.raises(ValueError, match=r"engine='tgi' is not allowed"):
        E.export(TemperatureSpec(), "tgi")
    linear = TemperatureSpec(multiplier=1.2, rope={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match=r"vllm reads no attention factor for rope_type='linear'"):
        E.export(linear, "vllm")
    longrope = TemperatureSpec(rope={"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0] * 8,
                                     "long_factor": [2.0] * 8, "original_max_position_embeddings": 32})
    with pytest.raises(ValueError, match=r"llama.cpp reads no attention factor for rope_type='longrope'"):
        E.export(longrope, "llama.cpp")
    expected = 1 + math.log(2.0) / math.log(32)  # longrope's own factor, squared on the logits
    assert E.export(longrope, "transformers").logit_multiplier == pytest.approx(expected, rel=1e-12)
