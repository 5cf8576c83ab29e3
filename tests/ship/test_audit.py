"""``attntemp audit`` on the corpus of real configs (tests/fixtures/configs): the reference figures,
worked out by hand here from the papers' formulas (never by the code under test), transformers'
verdict, and three faults injected into the transformers proxy (YaRN's factor applied twice, dropped,
and its correction bounds rounded where ``truncate: false`` keeps them fractional)."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from attntemp.assets import tiny_path
from attntemp.ship import llamacpp_binary as llamacpp
from attntemp.ship.audit.run import AuditConfig, run_audit

CONFIGS = tiny_path().parent / "configs"  # the corpus, shipped: src/attntemp/assets/configs


# ----------------------------------------------------------------------------- by hand
def plain_inv(dim: int, base: float) -> list[float]:
    """RoPE (arXiv:2104.09864): base^(-2i/dim)."""
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def yarn_inv(dim, base, s, l0, beta_fast=32.0, beta_slow=1.0, truncate=True) -> list[float]:
    """YaRN (arXiv:2309.00071) NTK-by-parts: a ramp between the dims where beta_fast, beta_slow turns fit L0."""

    def dim_of(r):
        return dim * math.log(l0 / (2 * math.pi * r)) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    out = []
    for i, inv in enumerate(plain_inv(dim, base)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        out.append(inv / s * ramp + inv * (1 - ramp))
    return out


def llama3_inv(dim, base, s, l0, low=1.0, high=4.0) -> list[float]:
    """Llama 3.1: wavelengths above L0/low divided by s, below L0/high kept, a blend between."""
    out = []
    for inv in plain_inv(dim, base):
        wl = 2 * math.pi / inv
        if wl < l0 / high:
            out.append(inv)
        elif wl > l0 / low:
            out.append(inv / s)
        else:
            smooth = (l0 / wl - low) / (high - low)
            out.append((1 - smooth) * inv / s + smooth * inv)
    return out


def phi3_factors() -> tuple[list[float], list[float]]:
    cfg = json.loads((CONFIGS / "phi3_mini_128k.json").read_text())["rope_scaling"]
    return cfg["short_factor"], cfg["long_factor"]


def at(positions: list[int], value, p: int):
    """A reference figure at position p: a number, or a list aligned with the positions."""
    return value[positions.index(p)] if isinstance(value, list) else value


def yarn_m(s: float, mscale: float = 1.0) -> float:
    """(0.1 mscale ln s + 1)^2: YaRN's multiplier on the logits."""
    return (0.1 * mscale * math.log(s) + 1) ** 2


# expected: (primary logit multiplier at the positions given, its inv_freq or None, extra groups' checks)
HAND = {
    "llama3_1": ({0: 1.0, 131071: 1.0}, llama3_inv(128, 500000.0, 8.0, 8192)),
    "qwen3_yarn": ({0: yarn_m(4.0), 131071: yarn_m(4.0)}, yarn_inv(128, 1e6, 4.0, 32768)),
    # DeepSeek: af = mscale(s, 0.707) / mscale(s, 0.707) = 1 on cos/sin; softmax scale * mscale(s, 0.707)^2
    "deepseek_v2_lite": ({0: yarn_m(40, 0.707), 163839: yarn_m(40, 0.707)}, yarn_inv(64, 10000, 40, 4096)),
    "deepseek_v3": ({0: yarn_m(40, 1.0), 163839: yarn_m(40, 1.0)}, yarn_inv(64, 10000, 40, 4096)),
    "gpt_oss": ({0: yarn_m(32.0), 131071: yarn_m(32.0)}, yarn_inv(64, 150000, 32.0, 4096, truncate=False)),
    # LongRoPE: af = sqrt(1 + ln s / ln L0), s = 131072 / 4096 = 32: m = 1 + 5 ln 2 / (12 ln 2) = 17/12
    "phi3_mini_128k": ({0: 17 / 12, 131071: 17 / 12},
                       [1 / (f * 10000 ** (2 * i / 96)) for i, f in enumerate(phi3_factors()[0])]),
    # Mistral 3: af = mscale(16, 1)/mscale(16, 1) = 1; q *= 1 + 0.1 ln(1 + floor(p / 16384))
    "ministral3": ({0: 1.0, 16383: 1.0, 16384: 1 + 0.1 * math.log(2), 65536: 1 + 0.1 * math.log(5)},
                   yarn_inv(128, 1e6, 16.0, 16384)),
    "olmo3": ({0: 1.2079441541679836**2, 65535: 1.2079441541679836**2}, yarn_inv(128, 500000, 8.0, 8192)),
    # Gemma 3 27B: scale query_pre_attn_scalar^-1/2 = 168^-1/2 against 128^-1/2; global theta 1e6 / 8
    "gemma3_27b": ({0: math.sqrt(128 / 168)}, [x / 8 for x in plain_inv(128, 1e6)]),
    # Llama 4: NoPE layers q *= 1 + 0.1 ln(1 + floor((p + 1) / 8192))
    "llama4_scout": ({0: 1.0, 8190: 1.0, 8191: 1 + 0.1 * math.log(2), 32767: 1 + 0.1 * math.log(5)},
                     llama3_inv(128, 500000.0, 16.0, 8192, low=1.0, high=1.0)),
    # Gemma 3 4B / 12B: query_pre_attn_scalar = head_dim = 256 (scale ratio 1); linear 8 on global layers only
    "gemma3_4b": ({0: 1.0, 131071: 1.0}, [x / 8 for x in plain_inv(256, 1e6)]),
    "gemma3_12b": ({0: 1.0, 131071: 1.0}, [x / 8 for x in plain_inv(256, 1e6)]),
    # Mistral Large 3 (MLA, rope 64 of 192): af = mscale(36, 1)/mscale(36, 1) = 1; softmax scale
    # * mscale(36, 1)^2 (mscale_all_dim); q *= 1 + 0.1 ln(1 + floor(p / 8192)) on every layer
    "mistral_large3": ({0: yarn_m(36), 8191: yarn_m(36), 8192: yarn_m(36) * (1 + 0.1 * math.log(2)),
                        294911: yarn_m(36) * (1 + 0.1 * math.log(36))}, yarn_inv(64, 10000, 36, 8192)),
    # Mistral 4 (MLA, rope 64 of 128): the same factors
    "mistral4": ({0: yarn_m(36), 8192: yarn_m(36) * (1 + 0.1 * math.log(2)),
                  294911: yarn_m(36) * (1 + 0.1 * math.log(36))}, yarn_inv(64, 10000, 36, 8192)),
    # Kimi K2.5 (DeepSeek-V3's code): af = 1, softmax scale * mscale(64, 1)^2; theta 50000 from 4096
    "kimi_k2_5": ({0: yarn_m(64), 262143: yarn_m(64)}, yarn_inv(64, 50000, 64, 4096)),
    # DeepSeek-V4: YaRN's frequencies (rope 64 of head_dim 512) at compress_rope_theta (default 160000)
    # on its compressing layers, every layer where no types are given; attention_factor 1: m = 1
    "deepseek_v4": ({0: 1.0, 1048575: 1.0}, yarn_inv(64, 160000, 16, 65536)),
    # Qwen3-Next, 262144 -> 1M: static YaRN x4 on 0.25 of head_dim 256: m = (0.1 ln 4 + 1)^2
    "qwen3_next_1m": ({0: yarn_m(4.0), 1048575: yarn_m(4.0)}, yarn_inv(64, 1e7, 4.0, 262144)),
}  # fmt: skip
# transformers' deepseek_v3 has no llama_4_scaling_beta: it drops the schedule, x 1/(1 + 0.1 ln 36) at the end
DIFFERS = {"mistral_large3": (294911, 1 / (1 + 0.1 * math.log(36)))}
OTHER_GROUPS = {  # name -> (multiplier, inv_freq) of a second group
    "gemma3_27b": ("sliding_attention", math.sqrt(128 / 168), plain_inv(128, 10000.0)),
    "gemma3_4b": ("sliding_attention", 1.0, plain_inv(256, 10000.0)),
    "gemma3_12b": ("sliding_attention", 1.0, plain_inv(256, 10000.0)),
    "olmo3": ("sliding_attention", 1.0, plain_inv(128, 500000)),
    "gpt_oss": ("sliding_attention", yarn_m(32.0), yarn_inv(64, 150000, 32.0, 4096, truncate=False)),
}


def audit(name: str, positions: str | None = None, engines=("transformers",)) -> tuple[int, dict]:
    """``attntemp audit --config NAME --engines ... --positions ... --json``: (exit code, the JSON)."""
    ints = tuple(int(p) for p in positions.split(",")) if positions else None
    result = run_audit(AuditConfig(config=str(CONFIGS / f"{name}.json"), engines=tuple(engines), positions=ints))
    return (1 if result.differs else 0), json.loads(json.dumps(result.to_dict()))


def close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * abs(b)


def all_close(xs: list[float], ys: list[float], rel: float = 1e-5) -> bool:
    return len(xs) == len(ys) and all(close(a, b, rel) for a, b in zip(xs, ys, strict=True))


def test_the_corpus_has_every_family_the_issue_names():
    assert {p.stem for p in CONFIGS.glob("*.json")} == set(HAND)


def check_reference(name: str, ref: dict) -> None:
    """``ref`` (the audit's reference) against :data:`HAND` and :data:`OTHER_GROUPS`."""
    expected_m, expected_inv = HAND[name]
    positions = sorted(expected_m)
    assert ref["positions"] == positions
    for p, m in expected_m.items():
        assert close(at(positions, ref["logit_multiplier"], p), m), (p, ref["logit_multiplier"], m)
    inv = ref["inv_freq"] if not isinstance(ref["inv_freq"][0], list) else ref["inv_freq"][0]
    assert len(inv) == len(expected_inv)
    assert all(close(a, b, 1e-5) for a, b in zip(inv, expected_inv, strict=True)), name
    assert "arXiv" in ref["formula"] or "Llama 3" in ref["formula"]
    if name in OTHER_GROUPS:
        group, m, inv2 = OTHER_GROUPS[name]
        g = next(g for g in ref["groups"] if g["name"] == group)
        assert close(g["logit_multiplier"], m) and all_close(g["inv_freq"], inv2)


@pytest.mark.parametrize("name", sorted(set(HAND) - set(DIFFERS)))
def test_the_reference_is_the_hand_computed_one_and_transformers_agrees(name):
    code, out = audit(name, ",".join(map(str, sorted(HAND[name][0]))))
    check_reference(name, out["reference"])
    engine = out["engines"]["transformers"]
    assert code == 0 and engine["verdict"] == "agrees", engine["summary"]
    assert engine["version"].startswith("transformers ")


@pytest.mark.parametrize("name", sorted(DIFFERS))
def test_transformers_drops_mistral_large_3s_position_schedule(name):
    code, out = audit(name, ",".join(map(str, sorted(HAND[name][0]))))
    check_reference(name, out["reference"])
    engine = out["engines"]["transformers"]
    position, ratio = DIFFERS[name]
    assert code == 1 and engine["verdict"] == "differs", engine
    got = engine["logit_multiplier"]  # one number: the same at every position
    assert close(got, yarn_m(36)), got  # below 8192 the schedule is 1 and the two agree
    assert close(got / HAND[name][0][position], ratio, 1e-5), (got, ratio)
    assert "from position 8192" in engine["summary"], engine["summary"]


def test_phi3_switches_to_the_long_factors_past_the_original_context():
    short, long_ = phi3_factors()
    _, out = audit("phi3_mini_128k", "4095,4096")
    inv = out["reference"]["inv_freq"]
    assert all_close(inv[0], [1 / (f * 10000 ** (2 * i / 96)) for i, f in enumerate(short)])
    assert all_close(inv[1], [1 / (f * 10000 ** (2 * i / 96)) for i, f in enumerate(long_)])
    assert out["engines"]["transformers"]["verdict"] == "agrees"


def test_llama4_rope_layers_keep_m_1_and_nope_layers_do_not_rotate():
    _, out = audit("llama4_scout", "0,8191")
    rope, nope = out["reference"]["groups"]
    assert rope["logit_multiplier"] == 1.0 and nope["inv_freq"] is None and len(nope["layers"]) == 12
    assert nope["layers"][:2] == [3, 7]  # every 4th layer has no RoPE
    assert out["reference"]["logit_multiplier"] == [1.0, pytest.approx(1 + 0.1 * math.log(2))]


# ----------------------------------------------------------------------------- faults, injected
def _patch_yarn(monkeypatch, change):
    from transformers import modeling_rope_utils as mru

    original = mru.ROPE_INIT_FUNCTIONS["yarn"]

    def faulty(config, *args, **kwargs):
        return change(original, config, *args, **kwargs)

    monkeypatch.setitem(mru.ROPE_INIT_FUNCTIONS, "yarn", faulty)


def test_a_factor_applied_twice_is_caught_with_its_size(monkeypatch):
    _patch_yarn(monkeypatch, lambda f, c, *a, **k: (lambda inv, af: (inv, af * af))(*f(c, *a, **k)))
    code, out = audit("qwen3_yarn", "0,1,65536")
    e = out["engines"]["transformers"]
    assert code == 1 and e["verdict"] == "differs"
    assert close(e["largest_multiplier_ratio"], yarn_m(4.0), 1e-5)  # af^4 against af^2: x (0.1 ln 4 + 1)^2
    assert close(e["logit_multiplier"], yarn_m(4.0) ** 2, 1e-5)
    assert e["groups"][0]["multiplier_from"] == 0 and e["largest_inv_freq_difference"] < 1e-5
    assert "logit multiplier x1.29" in e["summary"] and "from position 0" in e["summary"]


def test_a_factor_dropped_is_caught_with_its_size(monkeypatch):
    _patch_yarn(monkeypatch, lambda f, c, *a, **k: (f(c, *a, **k)[0], 1.0))
    code, out = audit("olmo3", "0,8192")  # explicit attention_factor, dropped
    e = out["engines"]["transformers"]
    assert code == 1 and e["verdict"] == "differs"
    assert close(e["largest_multiplier_ratio"], 1 / 1.2079441541679836**2, 1e-5)
    full = next(g for g in e["groups"] if g["name"] == "full_attention")
    sliding = next(g for g in e["groups"] if g["name"] == "sliding_attention")
    assert full["multiplier_from"] == 0 and sliding["multiplier_from"] is None  # only the YaRN layers


def test_yarn_bounds_rounded_against_truncate_false_are_caught(monkeypatch):
    def rounded(f, config, *args, **kwargs):
        config = copy.deepcopy(config)
        config.rope_parameters["truncate"] = True
        return f(config, *args, **kwargs)

    _patch_yarn(monkeypatch, rounded)
    code, out = audit("gpt_oss", "0,1,4096")
    e = out["engines"]["transformers"]
    fractional = yarn_inv(64, 150000, 32.0, 4096, truncate=False)
    floored = yarn_inv(64, 150000, 32.0, 4096, truncate=True)
    gaps = [abs(a - b) / b for a, b in zip(floored, fractional, strict=True)]
    assert code == 1 and e["verdict"] == "differs"
    assert close(e["largest_inv_freq_difference"], max(gaps), 1e-3) and max(gaps) > 0.01
    assert e["groups"][0]["inv_freq_pair"] == gaps.index(max(gaps))
    assert close(e["largest_multiplier_ratio"], 1.0, 1e-5)  # the magnitude is right; the rotation is not
    assert "inv_freq up to" in e["summary"] and "from position 0" in e["summary"]


def test_the_human_table_names_each_engine_and_vllm_in_one_line(monkeypatch):
    from attntemp.ship.engines import vllm

    no_avx = "this CPU lacks avx512f, which vLLM's CPU build needs"
    monkeypatch.setattr(vllm, "unavailable", lambda: no_avx)
    config = AuditConfig(config=str(CONFIGS / "gemma3_27b.json"), engines=("transformers", "vllm"))
    text = run_audit(config).render()
    assert "| full_attention | 10 | 0 | 0.872872 |" in text
    assert "vllm: cannot run: this CPU lacks avx512f" in text and "transformers (transformers 5." in text


def test_vllm_says_why_it_cannot_run_without_its_venv(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNTEMP_ENGINES", str(tmp_path))  # an empty engines cache
    _, out = audit("llama3_1", "0", engines=("transformers", "vllm"))
    reason = out["engines"]["vllm"]["reason"]
    assert out["engines"]["vllm"]["verdict"] == "cannot run" and "\n" not in reason
    assert "avx512f" in reason or ("not installed" in reason and str(tmp_path) in reason)


def test_vllms_log_probabilities_are_read_at_the_positions_the_proxy_predicts_at():
    from attntemp.ship.engine_common import mean_kl
    from attntemp.ship.engines.vllm import engine_logp

    length, vocab = 8, 3
    # top[p]: the distribution vLLM predicts at position p (of token p + 1); p encoded in its first value
    rows = [{"top": [[[0, -float(p)], [1, -1.0], [2, -2.0]] for p in range(length - 1)]}]
    (got,) = engine_logp({"rows": rows}, vocab, length)  # [3, V]: positions 4, 5, 6
    assert got[:, 0].tolist() == [-4.0, -5.0, -6.0] and got[:, 2].tolist() == [-2.0] * 3
    logp = torch.log_softmax(torch.tensor([[0.3, -1.0, 2.0]], dtype=torch.float64), -1)  # [1, V]
    assert mean_kl([logp], [logp]) == 0.0
    assert mean_kl([logp], [logp.flip(-1)]) > 0.1


@pytest.mark.engines
@pytest.mark.parametrize("name", ["qwen3_yarn", "gpt_oss", "gemma3_27b", "ministral3"])
def test_vllm_audits_the_corpus(name):
    """A proxy through vLLM's CPU build (opt-in: bash scripts/build_vllm_cpu.sh first)."""
    code, out = audit(name, engines=("transformers", "vllm"))
    e = out["engines"]["vllm"]
    if "not installed" in e.get("reason", ""):
        pytest.fail(f"{e['reason']} (opt-in: bash scripts/build_vllm_cpu.sh first)")
    assert e["verdict"] == "agrees", e
    assert e["kl"] <= 1e-5 and code == 0 and e["version"].startswith("vllm 0.")


# ----------------------------------------------------------------------------- llama.cpp (opt-in)
@pytest.mark.engines
@pytest.mark.parametrize("name", sorted(HAND))
def test_llamacpp_audits_the_corpus(name):
    """Every corpus config, through llama.cpp: agrees, differs with a fitted size, or cannot run (why)."""
    code, out = audit(name, engines=("transformers", "llama.cpp"))
    e = out["engines"]["llama.cpp"]
    assert e["verdict"] in ("agrees", "differs", "cannot run")
    if f"{llamacpp.BINARY} not found" in e.get("reason", ""):
        pytest.fail(f"{e['reason']} (opt-in: bash scripts/build_llama_cpp.sh first)")
    if e["verdict"] == "agrees":
        assert e["kl"] <= 1e-5 and code == 0
    elif e["verdict"] == "differs":
        assert e["kl"] > 1e-5 and e["best_multiplier_ratio"] > 0 and code == 1
    else:
        assert e["reason"] and "\n" not in e["reason"]
    assert out["engines"]["transformers"]["verdict"] == ("differs" if name in DIFFERS else "agrees")


@pytest.mark.engines
def test_llamacpp_takes_gemma3s_scale_from_the_layer_count_not_query_pre_attn_scalar():
    """llama.cpp's Gemma 3 (src/models/gemma3.cpp) uses n_embd/n_head only at 62 layers (27B), else
    1/sqrt(head_dim): a 6-layer proxy of the 27B gets the scale x sqrt(168/128) of the config's."""
    _, out = audit("gemma3_27b", engines=("transformers", "llama.cpp"))
    e = out["engines"]["llama.cpp"]
    if f"{llamacpp.BINARY} not found" in e.get("reason", ""):
        pytest.fail(f"{e['reason']} (opt-in: bash scripts/build_llama_cpp.sh first)")
    assert e["verdict"] == "differs" and abs(e["best_multiplier_ratio"] / math.sqrt(168 / 128) - 1) < 0.01
    assert e["kl_at_best"] <= 1e-5


@pytest.mark.engines
def test_llamacpp_rounds_the_yarn_bounds_that_gpt_oss_keeps_fractional(tmp_path):
    """ggml.c ggml_rope_yarn_corr_dims floors and ceils the ramp's ends whatever truncate says: gpt-oss
    (truncate false) differs in the rotation, not the scale; the same config with truncate true agrees."""
    _, out = audit("gpt_oss", engines=("transformers", "llama.cpp"))
    e = out["engines"]["llama.cpp"]
    if f"{llamacpp.BINARY} not found" in e.get("reason", ""):
        pytest.fail(f"{e['reason']} (opt-in: bash scripts/build_llama_cpp.sh first)")
    assert e["verdict"] == "differs" and e["kl_at_best"] > 1e-5  # no scale explains it
    config = json.loads((CONFIGS / "gpt_oss.json").read_text())
    config["rope_scaling"]["truncate"] = True
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run_audit(AuditConfig(config=str(tmp_path / "c.json"), engines=("llama.cpp",), positions=(0,)))
    assert result.engines["llama.cpp"]["verdict"] == "agrees"


def test_dynamic_ntk_scales_from_max_position_embeddings_as_the_engines_do(tmp_path):
    """Issue 32: with ``original_max_position_embeddings`` beside ``rope_type: dynamic`` the reference
    read it as dynamic's base length and "transformers differs" followed from position L0. Dynamic
    NTK has one base length, ``max_position_embeddings`` (transformers 5's
    ``_compute_dynamic_ntk_parameters`` and its reset, vLLM): the reference reads it too, and notes
    the key as ignored. The frequencies past max_position_embeddings still change with p."""
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
              "max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": dynamic}  # fmt: skip
    path = tmp_path / "dynamic.json"
    path.write_text(json.dumps(config))
    result = run_audit(AuditConfig(config=str(path), engines=("transformers",), positions=(0, 2048, 4095, 8191)))
    assert not result.differs and result.engines["transformers"]["verdict"] == "agrees"
    assert result.reference["notes"] == [
        "config original_max_position_embeddings=2048 is ignored: dynamic NTK scales from max_position_embeddings="
        "4096 (transformers and vLLM read no other base length)",
        "--positions 8191 is past the model's context, max_position_embeddings=4096: the figures there are the "
        "formula's, at a length the model is not set up for",
    ]
    inv = result.reference["inv_freq"]  # per position: the same up to 4095, lower at 8191
    assert inv[0] == inv[1] == inv[2] and inv[3][-1] < inv[2][-1]


@pytest.mark.engines
@pytest.mark.parametrize("factor, verdict", [(None, "agrees"), (1.0, "differs")])
def test_llamacpp_applies_only_yarns_own_factor_on_gemma3s_global_layers(tmp_path, factor, verdict):
    """The converter writes ``attention_factor`` as ``rope.scaling.yarn_attn_factor``, which
    llama.cpp's context code replaces under YaRN: its own 0.1 ln s + 1 reaches the global layers
    whatever the config says, and no single scale fits a difference on some layers only."""
    config = json.loads((CONFIGS / "gemma3_4b.json").read_text())
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 65536}
    config["text_config"]["rope_scaling"] = yarn | ({} if factor is None else {"attention_factor": factor})
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run_audit(AuditConfig(config=str(tmp_path / "c.json"), engines=("llama.cpp",), positions=(0,)))
    e = result.engines["llama.cpp"]
    if f"{llamacpp.BINARY} not found" in e.get("reason", ""):
        pytest.fail(f"{e['reason']} (opt-in: bash scripts/build_llama_cpp.sh first)")
    assert e["verdict"] == verdict, e
    if verdict == "differs":
        assert e["kl_at_best"] > 1e-5  # the global layers only: no one scale explains it
