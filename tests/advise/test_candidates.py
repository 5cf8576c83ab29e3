"""The candidates past and within the trained length, and how each engine carries each one."""

import math

import pytest

from attntemp.advise.candidates import BASELINE, candidates
from attntemp.advise.carry import engine_route
from attntemp.ops.schedules import yarn_multiplier
from attntemp.ops.spec import TemperatureSpec


def test_past_the_trained_length_every_family_is_raced_and_gated_ones_change_nothing_up_to_l0():
    cs = {c.name: c for c in candidates(1024 / 256, 256)}
    assert next(iter(cs)) == BASELINE
    assert {c.family for c in cs.values()} >= {"baseline", "softening", "sharpening", "rope", "rope + temperature"}
    yarn_m = cs["YaRN s = 4, YaRN's m = 1.296"].spec
    assert yarn_m.multiplier == pytest.approx(yarn_multiplier(4.0)) == pytest.approx((0.1 * math.log(4) + 1) ** 2)
    soft = cs["softer past L0 (m = 0.9 at N)"].spec
    # m = (n / L0)^b: 1 up to L0, 0.9 at N
    import torch

    m = soft.multipliers(0, 1, torch.tensor([100, 255, 1023]), torch.tensor([101, 256, 1024]))
    assert m[0].tolist() == pytest.approx([1.0, 1.0, 0.9], rel=1e-5)
    assert all(c.gated == (c.name in (BASELINE, "softer past L0 (m = 0.9 at N)", "sharper past L0 (log-n)",
                                      "dynamic NTK s = 4")) for c in cs.values())  # fmt: skip


def test_within_the_trained_length_only_the_temperature_is_checked():
    cs = candidates(256 / 256, 256)
    assert [bool(c.spec.rope) for c in cs] == [False, False, False]
    assert [c.spec.multiplier for c in cs] == [1.0, 0.9, 1.1]


@pytest.mark.parametrize(
    "spec, engine, how",
    [
        (TemperatureSpec(), "transformers", "nothing"),
        (TemperatureSpec.yarn(4.0, 256), "transformers", "settings"),
        (
            TemperatureSpec(
                rope={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 256,
                    "attention_factor": 1.0,
                }
            ),
            "vllm",
            "settings",
        ),
        (TemperatureSpec(multiplier=0.9), "llama.cpp", "settings"),  # --override-kv attn_factor = sqrt(m)
        (TemperatureSpec(multiplier=0.9), "transformers", "bake"),  # no knob without YaRN: into q_proj
        (TemperatureSpec(multiplier=0.9), "vllm", "bake"),
        (TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256}), "transformers", "remote code"),
        (TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256}), "vllm", "not carried"),
        (TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256}), "llama.cpp", "not carried"),
        (TemperatureSpec(heads=[[1.0, 1.1]] * 2), "llama.cpp", "bake"),
    ],
)
def test_each_engine_carries_what_it_can_and_says_why_not(spec, engine, how):
    got = engine_route(spec, engine, 256, {"model_type": "llama"})
    assert got["how"] == how
    if how == "settings":
        assert "logit multiplier m" in got["settings"]
    if how in ("bake", "remote code", "not carried"):
        assert got["why"]


def test_a_schedule_on_a_model_without_remote_code_is_not_carried_by_transformers():
    spec = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256})
    assert engine_route(spec, "transformers", 256, {"model_type": "gemma3_text"})["how"] == "not carried"


def test_the_settings_take_the_models_own_rope_from_its_config():
    """Engines replace rope_parameters whole: the settings carry the model's rope_theta, and on
    Gemma 3 YaRN goes on the full-attention layers while the sliding ones keep their own RoPE."""
    yarn = TemperatureSpec(rope={"rope_type": "yarn", "factor": 2.0})
    llama = {"model_type": "llama", "rope_theta": 100000.0, "max_position_embeddings": 256}
    assert '"rope_theta": 100000.0' in engine_route(yarn, "transformers", 256, llama)["settings"]
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    gemma = {"model_type": "gemma3_text", "layer_types": ["sliding_attention", "full_attention"],
             "rope_parameters": rope, "max_position_embeddings": 256, "num_hidden_layers": 2, "hidden_size": 64,
             "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 16}  # fmt: skip
    spec = TemperatureSpec(rope={"rope_type": "yarn", "factor": 2.0}, layer_types=["full_attention"])
    got = engine_route(spec, "transformers", 256, gemma)
    assert got["how"] == "settings" and '"sliding_attention"' in got["settings"], got


def test_llamacpp_bakes_the_carried_form_of_a_yarn_factor_on_gemma3():
    """llama.cpp's one cos/sin factor reaches the sliding layers too: YaRN at m = 1 (attention
    factor 1) on Gemma 3 is baked as YaRN's own factor with m on the global layers; on a model
    with one RoPE the factor is a setting."""
    m1 = next(c for c in candidates(512 / 256, 256) if c.name == "YaRN s = 2, m = 1").spec
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    gemma = {"model_type": "gemma3_text", "layer_types": ["sliding_attention", "full_attention"],
             "rope_parameters": rope, "max_position_embeddings": 256, "num_hidden_layers": 2, "hidden_size": 64,
             "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 16}  # fmt: skip
    got = engine_route(m1, "llama.cpp", 256, gemma)
    assert got["how"] == "bake" and "carried.json" in got["command"] and "sliding ones too" in got["why"]
    baked = TemperatureSpec.from_dict(got["spec"])
    assert baked.layer_types == ("full_attention",) and baked.multiplier == pytest.approx(1 / yarn_multiplier(2.0))
    llama = {"model_type": "llama", "rope_theta": 1e4, "max_position_embeddings": 256}
    assert engine_route(m1, "llama.cpp", 256, llama)["how"] == "settings"


GEMMA3_LIKE = {
    "model_type": "gemma3_text", "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
    "max_position_embeddings": 256, "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 16,
}  # fmt: skip


def test_on_gemma3_yarns_m_goes_where_yarn_goes_and_every_engine_answers():
    """On a model whose RoPE is per layer type YaRN reaches the full-attention layers only, so YaRN's
    m goes there too ("YaRN's m" is then transformers' YaRN default); Gemma 3 270M's first advise
    stopped on llama.cpp's route for m on every layer with YaRN's factor on some: now "not carried"."""
    from attntemp.advise.candidates import rope_reaches, rotary
    from attntemp.advise.carry import with_engines

    reaches = rope_reaches(GEMMA3_LIKE)
    assert reaches == ("full_attention",) and rope_reaches({"model_type": "llama", "rope_theta": 1e4}) is None
    cands = candidates(1.5, 256, rotary(GEMMA3_LIKE), reaches)
    by = {c.key: c.spec for c in cands}
    assert by["yarn+m"].layer_types == reaches and by["yarn-past-l0+gated-m"].layer_types == reaches
    assert by["soft"].layer_types is None  # a plain temperature still means every layer
    routed = {c.key: c.engines for c in with_engines(cands, 256, 384, GEMMA3_LIKE)}
    assert routed["yarn+m"]["llama.cpp"]["how"] in ("settings", "bake")
    everywhere = TemperatureSpec(multiplier=yarn_multiplier(1.5), rope=by["yarn"].rope)
    route = engine_route(everywhere, "llama.cpp", 256, GEMMA3_LIKE, 384)
    assert route["how"] == "not carried" and "layer_types" in route["why"], route


def test_yarn_past_l0_is_the_model_as_trained_below_l0_and_yarn_past_it(tiny):
    """The longrope carrier of YaRN's frequencies: logits equal no change on a 200-token window
    (under L0 = 256) and YaRN s = 2 on a 512-token one; with YaRN's attention factor, YaRN with its m."""
    import torch

    from attntemp.advise.candidates import by_key, rotary
    from attntemp.evaluate.lm import token_nll
    from attntemp.hf.patch import patch

    model, _ = tiny
    cands = candidates(512 / 256, 256, rotary(model.config.to_dict()))
    ids = torch.randint(5, 250, (1, 512), generator=torch.Generator().manual_seed(0))

    def nll(key, n):
        with torch.no_grad(), patch(model, by_key(cands, key).spec):
            return token_nll(model, ids[:, :n])

    torch.testing.assert_close(nll("yarn-past-l0", 200), nll("baseline", 200), atol=1e-5, rtol=0)
    torch.testing.assert_close(nll("yarn-past-l0", 512), nll("yarn", 512), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(nll("yarn-past-l0+m", 512), nll("yarn+m", 512), atol=1e-4, rtol=1e-5)
    assert not torch.allclose(nll("yarn-past-l0", 512), nll("baseline", 512), atol=1e-2)  # the frequencies moved
    assert by_key(cands, "yarn-past-l0").gated and not by_key(cands, "yarn").gated


def test_static_ntk_states_its_alpha_and_theta():
    cands = candidates(512 / 256, 256, (64, 10000.0))
    ntk = next(c for c in cands if c.key == "ntk-static")
    assert dict(ntk.spec.rope) == {"rope_type": "ntk", "factor": 3.0}
    assert f"{10000.0 * 3.0 ** (64 / 62):.4g}" in ntk.name
    assert [c.key for c in candidates(512 / 256, 256)].count("ntk-static") == 0  # no geometry: not raced


def test_every_candidate_key_is_unique_and_stable():
    keys = [c.key for c in candidates(512 / 256, 256, (16, 10000.0))]
    assert len(set(keys)) == len(keys) and all(keys)
    assert keys[:2] == ["baseline", "soft"] and {"yarn", "yarn+m", "yarn-past-l0", "yarn-past-l0+gated-m"} <= set(keys)


def test_the_old_length_call_still_works_with_a_warning():
    """candidates(length, trained) (before 0.2.0) gives what candidates(length / trained, trained) does."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = candidates(512 / 256, 256)
    with pytest.warns(DeprecationWarning, match=r"candidates\(length, trained, \.\.\.\) is deprecated"):
        old = candidates(512, 256)
    assert [(c.key, c.spec) for c in old] == [(c.key, c.spec) for c in new]
