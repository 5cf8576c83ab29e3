"""extend_context: same logits as the model loaded with that rope configuration; YaRN's factor."""

import copy

import pytest
import torch
import transformers as tf
from tiny_configs import model

import attntemp.hf.patch as P
from attntemp.hf.rope_scaling import extend_context, extended, restore_rope
from attntemp.ops import rope
from attntemp.ops.spec import TemperatureSpec

X = torch.randint(1, 97, (1, 120), generator=torch.Generator().manual_seed(3))
LONG = dict(short_factor=[1.0 + 0.1 * i for i in range(8)], long_factor=[2.0 + 0.5 * i for i in range(8)])
CASES = [
    ("linear", 4.0, {}, {"rope_type": "linear", "factor": 4.0}),
    ("ntk", 4.0, {}, {"rope_type": "default", "rope_theta": 10000.0 * 4 ** (16 / 14)}),
    ("dynamic", 4.0, {}, {"rope_type": "dynamic", "factor": 4.0}),
    ("yarn", 4.0, {}, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
    (
        "yarn",
        8.0,
        {"beta_fast": 16.0, "beta_slow": 2.0},
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 32,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
        },
    ),
    (
        "llama3",
        4.0,
        {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 4.0,
            "original_max_position_embeddings": 32,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    ),
    ("longrope", 4.0, LONG, {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 32, **LONG}),
]


def reference_model(m, rope_parameters, max_pos):
    cfg = copy.deepcopy(m.config)
    cfg.rope_parameters = {"rope_theta": 10000.0, **rope_parameters}
    cfg.max_position_embeddings = max_pos
    fresh = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    fresh.load_state_dict(m.state_dict())
    return fresh


@pytest.mark.parametrize("method, s, params, expect", CASES)
def test_logits_equal_model_loaded_with_that_rope(method, s, params, expect):
    m = model("llama")
    base = m(X).logits.detach()
    m.config.max_position_embeddings = 32  # the "trained" length
    l0 = 32
    extend_context(m, method, s, original_max_position_embeddings=l0, **params)
    ref = reference_model(m, expect, 32)
    with torch.no_grad():
        assert (m(X).logits - ref(X).logits).abs().max() < 1e-5
    inv, _ = rope.compute_inv_freq(
        method,
        16,
        10000.0,
        factor=s,
        **(
            {"max_position_embeddings": l0, "seq_len": X.shape[1]}
            if method == "dynamic"
            else {}
            if method in ("linear", "ntk")
            else {"original_max_position_embeddings": l0}
        ),
        **({"seq_len": X.shape[1]} if method == "longrope" else {}),
        **params,
    )
    assert torch.allclose(m.model.rotary_emb.inv_freq, inv, rtol=1e-6)
    restore_rope(m)
    m.config.max_position_embeddings = 128
    assert torch.equal(m(X).logits.detach(), base)


def test_yarn_attention_factor_lands_squared_on_the_logits():
    """transformers' yarn (factor 0.1 ln s + 1 on cos and sin) == yarn with factor 1 plus our
    temperature m = (0.1 ln s + 1)^2 folded into q; the sqrt variant and m = t are different."""
    m = model("llama")
    with torch.no_grad(), extended(m, "yarn", 4.0, original_max_position_embeddings=32):
        hf_yarn = m(X).logits
    with torch.no_grad(), P.patch(m, TemperatureSpec.yarn(4.0, 32)):
        ours = m(X).logits
    assert (hf_yarn - ours).abs().max() < 1e-5
    for wrong in ("yarn_sqrt",):
        spec = TemperatureSpec(
            schedule=wrong, schedule_params={"s": 4.0}, rope=dict(TemperatureSpec.yarn(4.0, 32).rope)
        )
        with torch.no_grad(), P.patch(m, spec):
            assert (m(X).logits - hf_yarn).abs().max() > 1e-3
    once = TemperatureSpec(multiplier=1.1386294, rope=dict(TemperatureSpec.yarn(4.0, 32).rope))
    with torch.no_grad(), P.patch(m, once):
        assert (m(X).logits - hf_yarn).abs().max() > 1e-3  # t once is not t^2


def test_partial_rotary_gpt_neox():
    m = model("gpt_neox")
    extend_context(m, "yarn", 4.0, original_max_position_embeddings=32)
    inv, f = rope.yarn(4, 10000.0, factor=4.0, original_max_position_embeddings=32)  # 16 * 0.25 = 4
    rot = m.gpt_neox.rotary_emb
    assert torch.allclose(rot.inv_freq, inv) and rot.attention_scaling == f
    restore_rope(m)


def test_bad_requests():
    m = model("llama")
    with pytest.raises(ValueError, match="Did you mean 'yarn'"):
        extend_context(m, "yarm", 4.0)
    with pytest.raises(ValueError, match=r"factor=0\.5"):
        extend_context(m, "linear", 0.5)
    with pytest.raises(ValueError, match="beta_fast=1"):
        extend_context(m, "yarn", 2.0, beta_fast=1, beta_slow=2)
    assert m.config.rope_parameters["rope_type"] == "default"
    extend_context(m, "linear", 2.0)
    with pytest.raises(ValueError, match="already extended"):
        extend_context(m, "linear", 2.0)
    restore_rope(m)


def test_per_layer_type_rope_extends_the_global_layers_only():
    """Gemma 3: YaRN on the full-attention layers, the sliding ones keep their trained RoPE."""
    m = model("gemma3_text")  # layer 0 sliding (window 24), layer 1 full; trained to 128
    x = torch.randint(1, 97, (1, 200), generator=torch.Generator().manual_seed(5))
    before = copy.deepcopy(m.config.rope_parameters)
    with torch.no_grad():
        plain = m(x).logits
        with extended(m, "yarn", 2.0, attention_factor=1.0):
            params = m.config.rope_parameters
            assert params["sliding_attention"] == before["sliding_attention"]
            assert params["full_attention"]["rope_type"] == "yarn" and params["full_attention"]["factor"] == 2.0
            rotary = m.model.rotary_emb
            assert torch.equal(rotary.sliding_attention_inv_freq, rotary.sliding_attention_original_inv_freq)
            want, _ = rope.yarn(16, before["full_attention"]["rope_theta"], factor=2.0,
                                original_max_position_embeddings=128, attention_factor=1.0)  # fmt: skip
            assert torch.allclose(rotary.full_attention_inv_freq, want.float())
            assert (m(x).logits - plain).abs().max() > 1e-4
        assert m.config.rope_parameters == before and torch.equal(m(x).logits, plain)
