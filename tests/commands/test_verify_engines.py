"""attntemp.ship.verify / llamacpp / remote_code without an engine: the KL file, the parser, the
routes, and the schedule-carrying checkpoint reloaded with plain transformers on the tiny model."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from attntemp.cli import main
from attntemp.hf.loading import load_model
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec
from attntemp.ship import comparison as C
from attntemp.ship import engine_common, remote_code
from attntemp.ship import llamacpp_binary as llamacpp
from attntemp.ship import verify as V
from attntemp.ship.bake import fixed_input, logits
from attntemp.ship.engines import llamacpp as llamacpp_engine


def read_base(path):
    """The reader of perplexity.cpp's kl_divergence, in numpy: tokens and decoded log-probs."""
    raw = path.read_bytes()
    assert raw[:8] == b"_logits_"
    n_ctx = int(np.frombuffer(raw[8:12], np.uint32)[0])
    n_vocab, n_chunk = (int(x) for x in np.frombuffer(raw[12:20], np.int32))
    end = 20 + 4 * n_ctx * n_chunk
    tokens = np.frombuffer(raw[20:end], np.int32).reshape(n_chunk, n_ctx)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = np.frombuffer(raw[end:], np.uint16).reshape(-1, nv)
    head = rows[:, :4].copy().view(np.float32)  # [N, 2]: scale, min_log_prob
    logp = head[:, :1].astype(np.float64) * rows[:, 4 : 4 + n_vocab] + head[:, 1:2]
    return tokens, logp, head


def test_base_file_round_trips_the_log_probs(tmp_path):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 257, (2, 12), generator=g)  # [2, 12]
    rows = [torch.log_softmax(torch.randn(5, 257, generator=g, dtype=torch.float64) * 4, -1) for _ in range(2)]
    assert engine_common.scored(12) == slice(6, 11) and rows[0].shape[0] == 11 - 6
    tokens, logp, head = read_base(llamacpp.write_base(tmp_path / "b.kld", ids, rows))
    assert (tokens == ids.numpy()).all() and logp.shape == (10, 257)
    want = torch.cat(rows).numpy()
    kept = want > want.max(1, keepdims=True) - 16  # perplexity.cpp floors at max - 16
    assert np.abs(logp - want)[kept].max() <= head[:, 0].max() / 2 + 1e-6
    assert head[:, 0].max() <= 16 / 65535 + 1e-9


SUMMARY = """
chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS
   1       5.1000 ±    0.2000       0.00010 ±    0.00020       0.00001 ±    0.00000     0.100 ±  0.010 %
   2       6.0000 ±    0.2000       0.00020 ±    0.00020       0.00002 ±    0.00000     0.100 ±  0.010 %

====== Perplexity statistics ======
Mean PPL(Q)                   :   6.000000 ±   0.200000
Mean PPL(base)                :   5.999000 ±   0.200000
Mean    KLD:   0.000012 ±   0.000001
Same top p:  99.000 ± 0.500 %
"""


def test_parse_reads_the_summary_and_each_chunk():
    run = llamacpp.parse(SUMMARY, 256, ["llama-perplexity"])
    assert run.ppl.value == 6.0 and run.ppl.low == pytest.approx(6 - 1.96 * 0.2)
    assert run.ppl_base.value == 5.999 and run.kl.value == 1.2e-5 and run.same_top == 0.99
    per = 256 - 1 - 128
    assert run.chunk_nll[0] == pytest.approx(per * math.log(5.1))
    assert sum(run.chunk_nll) == pytest.approx(2 * per * math.log(6.0))
    with pytest.raises(RuntimeError, match=r"printed no 'Mean PPL\(Q\)'"):
        llamacpp.parse("chunk 1 only", 256, [])


def test_kl_command_takes_the_chunk_length_and_drops_ctx_size(tmp_path):
    llama = llamacpp.LlamaCpp(tmp_path / "llama-perplexity", None)
    args = ("--rope-scaling", "yarn", "--ctx-size", "1024", "--override-kv", "llama.rope.scaling.attn_factor=float:1")
    cmd = llamacpp.kl_command(llama, tmp_path / "m.gguf", tmp_path / "b.kld", 512, args, 2)
    assert "--ctx-size" not in cmd and cmd[cmd.index("-c") + 1] == "512"
    assert cmd[-6:] == ["--rope-scaling", "yarn", "--override-kv", "llama.rope.scaling.attn_factor=float:1", "-t", "2"]
    assert cmd[cmd.index("-ctk") + 1] == cmd[cmd.index("-ctv") + 1] == "f32"


def test_engine_not_found_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"llama-perplexity not found in engine_dir=.*build_llama_cpp.sh"):
        llamacpp.find_llamacpp(str(tmp_path))
    exe = tmp_path / "build" / "bin" / "llama-perplexity"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "convert_hf_to_gguf.py").write_text("")
    found = llamacpp.find_llamacpp(str(tmp_path))
    assert found.perplexity == exe and found.convert == tmp_path / "src" / "convert_hf_to_gguf.py"


def _fake_build(folder, convert_body):
    """An engine folder whose llama-perplexity is a stub and whose converter runs ``convert_body``."""
    exe = folder / "build" / "bin" / "llama-perplexity"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    (folder / "src").mkdir()
    (folder / "src" / "convert_hf_to_gguf.py").write_text(convert_body)
    return folder


def test_a_failing_engine_is_one_line_and_exit_1_and_the_work_dir_is_marked(tmp_path, capsys, monkeypatch):
    """The input is fine, the program verify drives fails: one line naming it and its last output."""
    monkeypatch.setenv("ATTNTEMP_ENGINES", str(tmp_path / "cache"))  # no cached GGUF: the converter runs
    build = _fake_build(
        tmp_path / "build",
        "import sys\nprint('boom', file=sys.stderr)\nprint('last words', file=sys.stderr)\nsys.exit(3)\n",
    )
    TemperatureSpec(multiplier=1.2).save(tmp_path / "spec.json")
    work = tmp_path / "work"
    argv = ["verify", "--engine", "llama.cpp", "--spec", str(tmp_path / "spec.json"), "--engine-dir", str(build)]
    argv += ["--length", "256", "--chunks", "1", "--work-dir", str(work)]
    for _ in range(2):  # the second run reuses the folder the first one marked as verify's
        assert main(argv) == 1
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("attntemp verify: failed: GGUF conversion failed"), lines
        assert "boom last words" in lines[0] and "Traceback" not in lines[0]
        assert (work / C.WORK_MARK).is_file()


def test_routes_and_baselines():
    yarn = dataclasses.replace(TemperatureSpec.yarn(4, 256), multiplier=1.2)
    base = C.baseline(yarn)
    assert dict(base.rope)["attention_factor"] == 1.0 and base.schedule == "constant" and base.multiplier == 1
    is_global = llamacpp_engine.is_global
    assert is_global(yarn) and not is_global(TemperatureSpec(layers=(1.0, 1.2)))
    with pytest.raises(ValueError, match="position-dependent"):
        is_global(TemperatureSpec(schedule="logn", schedule_params={"trained_len": 16}))
    assert C.default_length(yarn, 999) == 1024 and C.default_length(TemperatureSpec(), 256) == 256


def test_windows_start_with_bos_and_config_checks():
    _, tok = load_model("tiny")
    ids = C.windows(tok, "stdlib", 64, 2)
    assert ids.shape == (2, 64) and (ids[:, 0] == tok.bos_token_id).all()
    with pytest.raises(ValueError, match=r"engine='tgi' is not allowed"):
        V.VerifyConfig(engine="tgi", spec="s.json")
    with pytest.raises(ValueError, match=r"dtype='bfloat16' is not allowed"):
        V.VerifyConfig(engine="llama.cpp", spec="s.json", dtype="bfloat16")


def test_verify_cli_refuses_a_position_schedule_for_llamacpp(tmp_path, capsys):
    spec = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 16}).save(tmp_path / "s.json")
    assert main(["verify", "--engine", "llama.cpp", "--spec", str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama.cpp has no per-position temperature" in err[0]


# ----------------------------------------------------------------------------- schedule checkpoints
LOG_LENGTH = {"trained_len": 16, "a": [0.0, 0.1, -0.05, 0.02], "b": [0.3, 0.1, 0.2, 0.0]}


@pytest.mark.parametrize("name,params", [("log_length", LOG_LENGTH), ("llama4", {"floor_scale": 8.0})])
def test_schedule_checkpoint_reloads_as_the_patched_model(tmp_path, name, params):
    model, tok = load_model("tiny")
    spec = TemperatureSpec(multiplier=1.1, schedule=name, schedule_params=params)
    ids = fixed_input(model, 96)  # [1, 96]
    with patch(model, TemperatureSpec(multiplier=1.1)):
        static = logits(model, ids)  # what a plain bake of the static part would give
    result = remote_code.save_schedule_checkpoint(model, tok, spec, tmp_path / "out", check_tokens=96)
    assert result.max_abs_diff <= 1e-4
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["auto_map"]["AutoModelForCausalLM"] == f"{remote_code.MODULE}.{remote_code.CLASS}"
    assert cfg["attntemp_schedule"]["name"] == name
    got = remote_code.remote_logits(tmp_path / "out", ids)
    assert (got - static).abs().max() > 1e-2  # the schedule is applied, not only the static m


def test_schedule_checkpoint_refusals(tmp_path):
    model, tok = load_model("tiny")
    with pytest.raises(ValueError, match=r"schedule='constant' is not position-dependent; bake it"):
        remote_code.save_schedule_checkpoint(model, tok, TemperatureSpec(multiplier=1.2), tmp_path / "o")


def test_bake_cli_ships_a_position_schedule_as_remote_code(tmp_path, capsys):
    spec = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 16}).save(tmp_path / "s.json")
    out = tmp_path / "baked"
    assert main(["bake", "--spec", str(spec), "--out", str(out), "--check-tokens", "48", "--json"]) == 0
    assert (out / f"{remote_code.MODULE}.py").is_file()
    done = json.loads(capsys.readouterr().out)
    assert done["max_abs_diff"] <= 1e-4 and done["tokens"] == 16 + 48  # checked past L0, where logn acts


def test_a_schedule_checkpoint_is_checked_past_l0_and_refuses_a_plain_load(tmp_path, capsys):
    """Up to L0 the slope changes nothing: the check runs L0 + --check-tokens tokens, and a load
    without trust_remote_code=True stops instead of giving an unscheduled Llama."""
    from transformers import AutoModelForCausalLM

    b = [[0.5, -0.5, 0.4, -0.3, 0.2, 0.5, -0.4, 0.3]] * 4  # [layers, heads]
    params = {"trained_len": 256, "a": 0.0, "b": b}
    spec = TemperatureSpec(schedule="log_length", schedule_params=params).save(tmp_path / "s.json")
    out = tmp_path / "baked"
    assert main(["bake", "--spec", str(spec), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 256 + 64
    model, _ = load_model("tiny")
    ids = fixed_input(model, 512)  # [1, 512]
    plain = logits(model, ids)  # [1, 512, V]
    got = remote_code.remote_logits(out, ids)  # [1, 512, V]
    assert (got - plain)[:, :256].abs().max() < 1e-4 < (got - plain)[:, 256:].abs().max()  # acts past L0 only
    assert json.loads((out / "config.json").read_text())["model_type"] == remote_code.MODEL_TYPE
    with pytest.raises(ValueError, match="contains custom code"):
        AutoModelForCausalLM.from_pretrained(out)


# ----------------------------------------------------------------------------- vLLM helpers
def test_vllm_bucket_kl_is_exact_on_the_full_vocabulary_and_a_lower_bound_on_top_k():
    from attntemp.ship.engines.vllm import bucket_kl, kl_rows

    g = torch.Generator().manual_seed(0)
    p = torch.log_softmax(3 * torch.randn(40, generator=g, dtype=torch.float64), -1)  # [V]
    q = torch.log_softmax(3 * torch.randn(40, generator=g, dtype=torch.float64), -1)  # [V]
    exact = float((p.exp() * (p - q)).sum())
    assert bucket_kl(p, q) == pytest.approx(exact, rel=1e-9) and bucket_kl(p, p) == 0.0
    top = q.argsort(descending=True)[:5]
    assert 0 <= bucket_kl(p[top], q[top]) <= exact
    # the output's entry p - 1 is prompt_logprobs[p]; scored row i (position first + i) predicts first + i + 1
    entries = [[[int(k), float(q[k])] for k in top]] * 8
    kl, same = kl_rows(p[None].repeat(2, 1), entries, 5)
    assert len(kl) == 2 and same == [int(p.argmax()) == int(q.argmax())] * 2


def test_vllm_routes_and_missing_venv(tmp_path):
    from attntemp.ship.engines.vllm import route as vllm_route
    from attntemp.ship.vllm_venv import find_vllm

    yarn = TemperatureSpec(multiplier=1.3, rope={"rope_type": "yarn", "factor": 2.0})
    route, over = vllm_route(yarn, 64, {"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}})
    assert route == "export" and over["rope_parameters"]["rope_theta"] == 100000.0
    assert over["rope_parameters"]["original_max_position_embeddings"] == 64
    assert vllm_route(TemperatureSpec(multiplier=1.3), 64, {}) == ("bake", None)
    logn = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 16})
    assert vllm_route(logn, 64, {}) == ("schedule plugin", None)
    with pytest.raises(FileNotFoundError, match=r"no vLLM venv in engine_dir=.*build_vllm_cpu.sh"):
        find_vllm(str(tmp_path))


def test_vllm_plugin_package_registers_the_schedule_class(tmp_path):
    root = remote_code.write_vllm_plugin(tmp_path / "plugin")
    assert '[project.entry-points."vllm.general_plugins"]' in (root / "pyproject.toml").read_text()
    package = root / remote_code.PLUGIN
    for name in ("__init__.py", "model.py", "attntemp_schedule.py"):
        compile((package / name).read_text(), name, "exec")
    assert f'"{remote_code.PLUGIN}.model:{{CLASS}}"' in (package / "__init__.py").read_text()
    model = (package / "model.py").read_text()
    assert "from vllm.model_executor.models.llama import LlamaForCausalLM" in model
    assert "from .attntemp_schedule import schedule" in model
    assert "def schedule(" in (package / "attntemp_schedule.py").read_text()


def test_the_work_dir_mark_lists_what_verify_wrote_and_nothing_else_is_trusted(tmp_path):
    work = tmp_path / "work"
    with pytest.raises(RuntimeError), C.work_folder(str(work)) as folder:  # an error mid-run: still listed
        (folder / "base.kld").write_text("kl")
        (folder / "baked").mkdir()
        raise RuntimeError("the engine failed")
    assert json.loads((work / C.WORK_MARK).read_text()) == ["baked", "base.kld"]
    C.check_work_dir(str(work))  # a rerun reuses it
    (work / "notes.txt").write_text("the user's")
    with pytest.raises(ValueError, match=r"holds files verify did not write \(notes.txt\): its .attntemp-verify"):
        C.check_work_dir(str(work))
