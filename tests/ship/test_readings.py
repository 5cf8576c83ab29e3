"""attntemp.ship.readings: transformers' reading against transformers' own rotary module, and each
engine version's headline behaviour as read in its source (dynamic, yarn, longrope, limits)."""

import math

import pytest
import torch
import transformers as tf
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from attntemp.ops import rope
from attntemp.ops.rope.params import Rope
from attntemp.ship.readings import READERS, Handed, differs, lengths, meant, readers_of
from attntemp.ship.readings.of_exllama import EXLLAMAV2, EXLLAMAV3
from attntemp.ship.readings.of_llamacpp import GGUF_FACTOR, LLAMACPP
from attntemp.ship.readings.of_sglang import SGLANG
from attntemp.ship.readings.of_tgi_mlx import MLX, TGI
from attntemp.ship.readings.of_transformers import TRANSFORMERS
from attntemp.ship.readings.of_vllm import VLLM_READERS

OLD, MID, NEW = VLLM_READERS
D, THETA, L0, S = 64, 10000.0, 256, 2.0
N = round(S * L0)
DYNAMIC = {"rope_type": "dynamic", "factor": S}
YARN = {"rope_type": "yarn", "factor": S, "original_max_position_embeddings": L0}
LONG = [1.0 + i / 8 for i in range(D // 2)]
LONGROPE = {**YARN, "rope_type": "longrope", "short_factor": [1.0] * (D // 2), "long_factor": LONG}


def handed(rope_given, positions=None, limit=None):
    return Handed(rope_given, D, THETA, L0, positions, limit)


def plain():
    return rope.default(D, THETA)[0]


def ntk(alpha):
    return rope.default(D, THETA * alpha ** (D / (D - 2)))[0]


def close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=0)


# ----------------------------------------------------------------------------- transformers, the reference
TF_CASES = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": S},
    "dynamic": DYNAMIC,
    "yarn": YARN,
    "yarn, attention_factor": {**YARN, "attention_factor": 1.0},
    "yarn, mscale ratio": {**YARN, "mscale": 0.7, "mscale_all_dim": 0.3},
    "longrope": LONGROPE,
    "llama3": {**YARN, "rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}


@pytest.mark.parametrize("case", list(TF_CASES))
@pytest.mark.parametrize("n", [L0 // 2, L0, L0 + 1, N])
def test_transformers_reading_is_transformers_own_rotary_module(case, n):
    """The module's inv_freq after one forward of n positions, and its cos at the last position."""
    params = {**TF_CASES[case], "rope_theta": THETA}
    cfg = tf.LlamaConfig(
        hidden_size=D * 2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=L0,
        rope_parameters=params,
    )
    module = LlamaRotaryEmbedding(cfg)
    x = torch.zeros(1, n, D * 2)  # [B, n, hidden]: only its dtype and device are read
    cos, _ = module(x, torch.arange(n)[None])  # [1, n, D]
    got = TRANSFORMERS(handed(params), n)
    assert close(got.inv_freq, module.inv_freq)
    assert got.multiplier == pytest.approx(module.attention_scaling**2, rel=1e-6)
    last = torch.cos((n - 1) * got.inv_freq) * math.sqrt(got.multiplier)  # [D/2]
    assert torch.allclose(cos[0, -1, : D // 2], last, atol=2e-4)


def test_the_reference_reads_dynamic_from_max_position_embeddings_not_the_original():
    """transformers' dynamic starts at max_position_embeddings and ignores original_max_position_embeddings."""
    got = TRANSFORMERS(handed({**DYNAMIC, "original_max_position_embeddings": 64}), 128)
    assert close(got.inv_freq, plain()) and got.dropped == ("original_max_position_embeddings",)
    assert close(TRANSFORMERS(handed(DYNAMIC), N).inv_freq, ntk(S * N / L0 - (S - 1)))


# ----------------------------------------------------------------------------- vLLM
def test_vllm_up_to_0_21_reads_dynamic_as_static_ntk_at_every_position():
    alpha = S * S - S + 1  # 3: transformers' base at n = s L0, applied from position 0
    for n in (16, L0, N):
        assert close(OLD(handed(DYNAMIC), n).inv_freq, ntk(alpha))
    assert close(OLD(handed(DYNAMIC), 16).inv_freq, TRANSFORMERS(handed(DYNAMIC), N).inv_freq)
    assert differs(OLD(handed(DYNAMIC), 16), TRANSFORMERS(handed(DYNAMIC), 16))  # short prompts change too


@pytest.mark.parametrize("reader", [MID, NEW], ids=lambda r: r.versions)
def test_vllm_from_0_22_reads_dynamic_as_no_scaling_and_breaks_past_l0(reader):
    under = reader(handed(DYNAMIC), L0)
    assert close(under.inv_freq, plain()) and not under.breaks
    assert reader(handed(DYNAMIC), L0 + 1).breaks.startswith(f"undefined past position {L0}")
    # only a max_trained_positions key (NomicBert's) brings the old static alpha back
    trained = reader(handed({**DYNAMIC, "max_trained_positions": L0}, positions=N), 16)
    assert close(trained.inv_freq, ntk(S * S - S + 1))


def test_vllm_before_0_30_drops_the_hf_attention_factor_and_multiplies_its_own():
    meant_one = handed({**YARN, "attention_factor": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
    for reader in (OLD, MID):
        got = reader(meant_one, N)
        assert got.multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2, rel=1e-9)
        assert got.dropped == ("attention_factor", "mscale", "mscale_all_dim")
        assert reader(handed({**YARN, "attn_factor": 0.5}), N).multiplier == pytest.approx(
            (0.5 * (0.1 * math.log(S) + 1)) ** 2, rel=1e-9
        )
    assert NEW(handed({**YARN, "attention_factor": 1.0}, positions=N), N).multiplier == pytest.approx(1.0)
    assert NEW(handed({**YARN, "attn_factor": 0.5}, positions=N), N).dropped == ("attn_factor",)


def test_vllm_from_0_30_derives_yarns_length_from_max_position_embeddings_alone():
    assert not MID(handed(YARN, limit=N), N).breaks  # original * factor up to 0.29
    refused = NEW(handed(YARN, limit=N), N).breaks
    assert refused.startswith("refuses at load: --max-model-len 512 > the derived max_model_len 256")
    assert not NEW(handed(YARN, positions=N, limit=N), N).breaks
    assert NEW(handed(YARN), N).breaks == f"refuses: n = {N} > --max-model-len = {L0}"  # the default


@pytest.mark.parametrize("reader", VLLM_READERS, ids=lambda r: r.versions)
def test_vllm_longrope_is_fixed_at_load_by_max_model_len(reader):
    short, long = plain(), plain() / torch.tensor(LONG)
    served_long = reader(handed(LONGROPE, positions=N, limit=N), 16)
    assert close(served_long.inv_freq, long)  # a short prompt gets the long factors
    assert close(reader(handed(LONGROPE, positions=N, limit=L0), 16).inv_freq, short)
    assert served_long.multiplier == pytest.approx(1 + math.log(2) / math.log(L0))  # from positions / original
    assert served_long.dropped == ("factor",)
    scaled = reader(handed({**LONGROPE, "long_mscale": 1.5, "attention_factor": 9.0}, positions=N, limit=N), N)
    assert scaled.multiplier == pytest.approx(2.25) and "attention_factor" in scaled.dropped


# ----------------------------------------------------------------------------- SGLang
def test_sglang_dynamic_is_static_and_its_longrope_switches_one_position_late():
    assert close(SGLANG(handed(DYNAMIC), 16).inv_freq, ntk(S * S - S + 1))
    long = plain() / torch.tensor(LONG)
    at_l0_plus_1 = handed(LONGROPE, positions=N)
    assert close(TRANSFORMERS(at_l0_plus_1, L0 + 1).inv_freq, long)
    assert close(SGLANG(at_l0_plus_1, L0 + 1).inv_freq, plain())  # any(positions > original): max position is L0
    assert close(SGLANG(at_l0_plus_1, L0 + 2).inv_freq, long)


def test_sglang_yarn_ignores_attention_factor_and_its_context_ignores_factor_with_an_original():
    got = SGLANG(handed({**YARN, "attention_factor": 1.0}), L0)
    assert got.multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2) and got.dropped == ("attention_factor",)
    assert SGLANG(handed(YARN), N).breaks.startswith(f"refuses: n = {N} > context_length = {L0}")
    assert not SGLANG(handed(DYNAMIC), N).breaks  # no original key: max_position_embeddings * factor


# ----------------------------------------------------------------------------- llama.cpp
def test_llamacpp_runs_dynamic_as_plain_rope_and_caps_llama_server_at_the_training_context():
    got = LLAMACPP(handed(DYNAMIC), L0)
    assert close(got.inv_freq, plain()) and got.dropped == ("factor",)
    assert "llama-server caps each slot at n_ctx_train = 256" in LLAMACPP(handed(DYNAMIC, limit=N), N).breaks
    ntk_rope = {"rope_type": "none", "rope_theta": THETA * 3 ** (D / (D - 2))}
    assert not LLAMACPP(handed(ntk_rope, positions=N, limit=N), N).breaks  # --override-kv context_length


def test_llamacpp_yarn_reads_its_own_factor_not_hfs_and_always_truncates():
    got = LLAMACPP(handed({**YARN, "attention_factor": 1.0, "truncate": False, "beta_fast": 16}), N)
    assert got.multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2)
    assert got.dropped == ("attention_factor", "beta_fast", "truncate")
    assert close(got.inv_freq, TRANSFORMERS(handed(YARN), N).inv_freq)  # betas 32/1 and floor/ceil
    kv = LLAMACPP(handed({**YARN, GGUF_FACTOR: 0.8}), N)
    assert kv.multiplier == pytest.approx((0.8 * (0.1 * math.log(S) + 1)) ** 2)
    assert not LLAMACPP(handed(YARN, limit=N), N).breaks  # custom YaRN raises n_ctx_train to original * s


def test_llamacpp_longrope_is_fixed_per_context_and_rope_freqs_at_every_one():
    long = plain() / torch.tensor(LONG)
    assert close(LLAMACPP(handed(LONGROPE, positions=N, limit=N), 16).inv_freq, long)
    assert close(LLAMACPP(handed(LONGROPE, positions=N, limit=L0), 16).inv_freq, plain())
    freqs = LLAMACPP(handed({"rope_type": "none", "rope_freqs": LONG, GGUF_FACTOR: 1.1}, positions=N), 16)
    assert close(freqs.inv_freq, long) and freqs.multiplier == pytest.approx(1.21)


# ----------------------------------------------------------------------------- TGI, MLX-LM
def test_tgi_splits_longrope_by_position_and_ignores_yarns_attention_factor():
    under, past = TGI(handed(LONGROPE, positions=N, limit=N), L0), TGI(handed(LONGROPE, positions=N, limit=N), N)
    assert under.uniform and close(under.inv_freq, plain())
    assert not past.uniform and close(past.inv_freq, plain() / torch.tensor(LONG))
    assert differs(past, TRANSFORMERS(handed(LONGROPE, positions=N), N))
    yarn = TGI(handed({**YARN, "attention_factor": 1.0, "beta_fast": 16}), L0)
    assert yarn.multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2)
    assert yarn.dropped == ("attention_factor", "beta_fast")


def test_tgi_dynamic_is_plain_unless_served_past_l0_where_the_pinned_base_is_unconfirmed():
    assert close(TGI(handed(DYNAMIC), L0).inv_freq, plain())
    warm = TGI(handed(DYNAMIC, limit=N), 16)
    assert close(warm.inv_freq, ntk(S * N / L0 - (S - 1))) and not warm.confirmed and warm.unconfirmed


def test_mlx_dynamic_varies_within_a_prompt_and_its_longrope_is_always_long():
    past = MLX(handed(DYNAMIC), N)
    assert not past.uniform and close(past.inv_freq, TRANSFORMERS(handed(DYNAMIC), N).inv_freq)
    assert MLX(handed(DYNAMIC), L0).uniform
    short_prompt = MLX(handed(LONGROPE, positions=N), 16)
    assert close(short_prompt.inv_freq, plain() / torch.tensor(LONG)) and "short_factor" in short_prompt.dropped
    assert MLX(handed({**YARN, "attention_factor": 1.0}), N).multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2)


# ----------------------------------------------------------------------------- exllamav2, exllamav3
def test_exllamav2_drops_dynamic_and_switches_yarn_and_longrope_by_max_seq_len():
    assert close(EXLLAMAV2(handed(DYNAMIC, limit=N), N).inv_freq, plain())
    assert close(EXLLAMAV2(handed(YARN), L0).inv_freq, plain())  # max_seq_len = L0: YaRN off
    on = EXLLAMAV2(handed({**YARN, "attention_factor": 1.0}, limit=N), N)
    assert on.multiplier == pytest.approx((0.1 * math.log(S) + 1) ** 2)
    assert close(on.inv_freq, rope.yarn(D, THETA, S, N)[0])  # the ramp from max_seq_len, not L0
    assert not close(on.inv_freq, TRANSFORMERS(handed(YARN), N).inv_freq)
    assert close(EXLLAMAV2(handed(LONGROPE, limit=N), 16).inv_freq, plain() / torch.tensor(LONG))


def test_exllamav3_refuses_dynamic_and_replaces_yarns_factor():
    assert EXLLAMAV3(handed(DYNAMIC), 16).breaks.startswith("refuses: the model does not load")
    stated = EXLLAMAV3(handed({**YARN, "factor": 4.0, "attention_factor": 1.0}, positions=N), N)
    assert close(stated.inv_freq, TRANSFORMERS(handed(YARN, positions=N), N).inv_freq)  # factor 512 / 256 = 2
    assert stated.multiplier == pytest.approx(1.0)  # an explicit attention_factor is honoured


# ----------------------------------------------------------------------------- the registry and the helpers
def test_every_reader_is_registered_once_with_its_source():
    labels = [r.label for r in READERS]
    assert len(set(labels)) == len(labels) == 10
    assert all(r.source and any(v in r.source for v in ("wheel", "sdist", "db931fcf", "5.24.0")) for r in READERS)
    assert [r.versions for r in readers_of("vllm")] == ["0.11-0.21", "0.22-0.29", ">=0.30"]
    assert readers_of("tgi") == ()


def test_meant_writes_attntemps_static_ntk_as_an_explicit_rope_theta():
    got = meant(Rope({"rope_type": "ntk", "factor": 3.0}), D, THETA, L0)
    assert got.rope == {"rope_type": "default", "rope_theta": pytest.approx(THETA * 3 ** (D / (D - 2)))}
    assert lengths(L0, N) == (128, 256, 257, 384, 512) and lengths(L0, L0) == (128, 256)  # up to the context


def test_differs_names_each_departure_and_nothing_else():
    want = TRANSFORMERS(handed(YARN), N)
    assert differs(TRANSFORMERS(handed(YARN), N), want) == ""
    assert "logit multiplier" in differs(TRANSFORMERS(handed(YARN), N), want, multiplier=1.1)
    assert "frequencies off" in differs(TRANSFORMERS(handed({**YARN, "factor": 4.0}), N), want)
    assert "NaN" in differs(MID(handed(DYNAMIC), N), TRANSFORMERS(handed(DYNAMIC), N))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match=r"dim=63 is not allowed; expected an even rotary dimension"):
        Handed({}, 63)
    with pytest.raises(ValueError, match=r"rope_type='su2' has no reading for vLLM; read: default, linear"):
        OLD(handed({"rope_type": "su2"}), 16)
    with pytest.raises(ValueError, match=r"rope long_factor has 3 values; expected dim // 2 = 32"):
        OLD(handed({**LONGROPE, "long_factor": [1.0] * 3}, positions=N, limit=N), 16)
