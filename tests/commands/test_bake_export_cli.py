"""`attntemp bake` / `attntemp export` in process: a tiny random llama saved with a tokenizer."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from attntemp.assets import tiny_path
from attntemp.cli import main
from attntemp.ops.schedules import yarn_multiplier
from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random llama (byte-level vocabulary of the shipped tokenizer) with that tokenizer."""
    out = tmp_path_factory.mktemp("tiny_llama")
    cfg = LlamaConfig(
        vocab_size=258,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        bos_token_id=256,
        eos_token_id=257,
        pad_token_id=257,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_path() / name, out / name)
    return out


def write_spec(path, spec):
    spec.save(path)
    return str(path)


def test_bake_prints_the_check_and_writes_a_plain_checkpoint(model_dir, tmp_path, capsys):
    heads = [[0.8, 1.2, 1.0, 1.5], [1.1, 0.9, 1.3, 0.7]]
    spec = write_spec(tmp_path / "s.json", TemperatureSpec.per_head(heads))
    out = tmp_path / "baked"
    assert main(["bake", "--model", str(model_dir), "--spec", spec, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "max abs diff, reloaded vs patched logits (fp32, 64 tokens):" in printed
    assert not any(line.startswith("{") for line in printed.splitlines())  # JSON only with --json
    assert "Writing model shards" not in captured.err and "Loading weights" not in captured.err  # --verbose shows them
    assert main(["bake", "--model", str(model_dir), "--spec", spec, "--out", str(out), "--overwrite", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["path"] == str(out) and summary["max_abs_diff"] <= 1e-4 and summary["tokens"] == 64
    for name in ("model.safetensors", "config.json", "tokenizer.json", "attntemp_spec.json"):
        assert (out / name).is_file()


def test_bake_into_a_non_empty_folder_is_one_error_line(model_dir, tmp_path, capsys):
    out = tmp_path / "full"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    spec = write_spec(tmp_path / "s.json", TemperatureSpec(multiplier=1.2))
    assert main(["bake", "--model", str(model_dir), "--spec", spec, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attntemp bake: error: --out={str(out)!r} already holds")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_bake_overwrite_through_dotdot_keeps_a_users_files(model_dir, tmp_path, capsys):
    """``D/sub/..`` is D, resolved before any work (issue 32, case 2): ``--overwrite`` replaces a
    checkpoint there, never a folder holding anything else, whatever path led to it."""
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "canary.txt").write_text("the user's")
    spec = write_spec(tmp_path / "s.json", TemperatureSpec(multiplier=1.2))
    argv = ["bake", "--model", str(model_dir), "--spec", spec, "--out", f"{d}/sub/..", "--overwrite"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds canary.txt, sub/, not a checkpoint's; --overwrite replaces only" in err[0], err
    assert (d / "canary.txt").read_text() == "the user's" and (d / "sub").is_dir()
    (d / "canary.txt").unlink()
    (d / "sub").rmdir()
    assert main(argv) == 0  # an empty D: baked through the same path
    assert main(argv) == 0  # a checkpoint there: replaced
    assert "model.safetensors" in {p.name for p in d.iterdir()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "s.json"]  # no staging or .old-* folder left


def test_export_prints_settings_with_the_multiplier(tmp_path, capsys):
    spec = write_spec(tmp_path / "y.json", TemperatureSpec.yarn(4, 32))
    assert main(["export", "--spec", spec, "--engine", "transformers", "--rope-theta", "10000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# logit multiplier m = {yarn_multiplier(4):.6g}")
    body = json.loads("\n".join(line for line in lines if not line.startswith("#")))
    assert body["rope_parameters"]["attention_factor"] ** 2 == pytest.approx(yarn_multiplier(4), rel=1e-12)
    assert main(["export", "--spec", spec, "--engine", "vllm"]) == 0
    fragment = capsys.readouterr().out.splitlines()[1]
    assert fragment.startswith('--hf-overrides \'{"rope_parameters"')
    assert fragment.endswith("--max-model-len 128")


def test_export_with_the_models_config_gives_each_layer_type_its_rope(tmp_path, capsys):
    """Gemma 3 (the shipped gemma3_4b config): YaRN on the global layers, the sliding ones keep theta 1e4."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    spec = write_spec(tmp_path / "g.json", TemperatureSpec(rope=yarn))
    assert main(["export", "--spec", spec, "--engine", "transformers", "--config", "gemma3_4b"]) == 0
    out = capsys.readouterr().out
    rp = json.loads("\n".join(line for line in out.splitlines() if not line.startswith("#")))["rope_parameters"]
    assert rp["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert rp["full_attention"]["rope_type"] == "yarn" and rp["full_attention"]["rope_theta"] == 1e6
    assert "add the model's rope_theta" not in out  # read from the config
    assert main(["export", "--spec", spec, "--engine", "transformers", "--config", str(tmp_path / "none.json")]) == 2
    assert "--config=" in capsys.readouterr().err


def test_export_refusals_are_one_error_line(tmp_path, capsys):
    spec = write_spec(tmp_path / "h.json", TemperatureSpec(layers=(1.0, 1.3)))
    assert main(["export", "--spec", spec, "--engine", "llama.cpp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bake them into q_proj with `attntemp bake`" in err[0]
    assert main(["export", "--spec", spec, "--engine", "tgi"]) == 2
    assert "engine='tgi' is not allowed" in capsys.readouterr().err
