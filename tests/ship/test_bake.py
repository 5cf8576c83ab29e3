"""attntemp.ship.bake: baked checkpoints reload with plain transformers and equal the patched model."""

import json

import pytest
import torch
from tiny_configs import config, model
from transformers import AutoModelForCausalLM

import attntemp.ship.bake as B
import attntemp.ship.bake_runner as BR
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec

X = torch.randint(1, 97, (2, 48), generator=torch.Generator().manual_seed(1))  # [2, 48]
TOL = 1e-4


def sharp(m):
    """Random weights x4 so attention is peaked and a temperature moves the logits by >> TOL."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(4)
    return m


def logits(m, x=X):
    with torch.no_grad():
        return m(x).logits


def per_head_spec(m, seed=2):
    cfg = m.config
    g = torch.Generator().manual_seed(seed)
    return TemperatureSpec.per_head(0.5 + 1.5 * torch.rand(cfg.num_hidden_layers, cfg.num_attention_heads, generator=g))


def reload(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def patched_and_base(m, spec):
    base = logits(m)
    with patch(m, spec):
        want = logits(m)
    assert (want - base).abs().max() > 100 * TOL  # the spec matters here, so the check can fail
    return want, base


CASES = [
    ("llama", "head", "q_proj"),
    ("mistral", "head", "q_proj"),
    ("qwen2", "head", "q_proj"),
    ("phi3", "head", "qkv_proj"),
    ("gpt_neox", "head", "query_key_value"),
    ("qwen3", "layer", "q_norm"),
    ("gemma3_text", "layer", "q_norm"),
]


@pytest.mark.parametrize(("arch", "kind", "target"), CASES)
def test_baked_checkpoint_equals_patched_model(arch, kind, target, tmp_path):
    m = sharp(model(arch))
    spec = per_head_spec(m) if kind == "head" else TemperatureSpec(layers=(0.7, 1.6))
    want, _ = patched_and_base(m, spec)
    result = B.save_baked(m, None, spec, tmp_path / "baked")
    assert result.path == tmp_path / "baked" and result.max_abs_diff <= TOL and result.tokens == 64
    assert {step.target for step in result.layers} == {target}
    got = logits(reload(tmp_path / "baked"))  # plain transformers, no attntemp patch
    assert (got - want).abs().max() <= TOL
    record = json.loads((tmp_path / "baked" / B.SPEC_FILE).read_text())
    assert record["format"] == B.BAKED_FORMAT and TemperatureSpec.from_dict(record["spec"]) == spec
    assert record["check"]["max_abs_diff"] == result.max_abs_diff
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baked"]  # no temporary folder left


def test_yarn_spec_writes_the_rope_into_the_saved_config(tmp_path):
    cfg = config("llama")
    cfg.max_position_embeddings = 32
    torch.manual_seed(0)
    m = sharp(AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval())
    spec = TemperatureSpec.yarn(4, 32)
    want, _ = patched_and_base(m, spec)
    with patch(m, TemperatureSpec(schedule="yarn", schedule_params={"s": 4.0})):
        temperature_only = logits(m)
    assert (want - temperature_only).abs().max() > 100 * TOL  # 48 tokens > 32: the rope matters
    B.save_baked(m, None, spec, tmp_path / "yarn")
    fresh = reload(tmp_path / "yarn")
    assert fresh.config.rope_parameters["rope_type"] == "yarn"
    assert fresh.config.rope_parameters["attention_factor"] == 1.0
    assert (logits(fresh) - want).abs().max() <= TOL


def test_longrope_spec_reloads_in_plain_transformers_with_equal_logits_past_l0(tmp_path):
    cfg = config("llama")
    cfg.max_position_embeddings = 32
    torch.manual_seed(0)
    m = sharp(AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval())
    pairs = m.config.head_dim // 2
    rope = {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 32,
        "short_factor": [1.0] * pairs,
        "long_factor": [1.0 + 0.5 * i for i in range(pairs)],
        "attention_factor": 1.0,
    }
    spec = TemperatureSpec(heads=per_head_spec(m).heads, rope=rope)
    assert B.tokens_to_check(spec, 8) == 48  # past L0 = 32, where long_factor applies
    want, _ = patched_and_base(m, spec)  # 48 tokens > L0
    with patch(m, TemperatureSpec(heads=spec.heads)):
        temperature_only = logits(m)
    assert (want - temperature_only).abs().max() > 100 * TOL  # the factors matter
    B.save_baked(m, None, spec, tmp_path / "longrope", check_tokens=8)
    fresh = reload(tmp_path / "longrope")
    assert fresh.config.rope_parameters["long_factor"] == rope["long_factor"]
    assert (logits(fresh) - want).abs().max() <= TOL
    assert json.loads((tmp_path / "longrope" / B.SPEC_FILE).read_text())["check"]["tokens"] == 48


def test_per_head_multipliers_under_qk_norm_are_refused():
    m = model("qwen3")
    state = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=r"q_norm normalises each head after q_proj.*shared by all heads"):
        B.bake(m, per_head_spec(m))
    assert all(torch.equal(v, state[k]) for k, v in m.state_dict().items())  # nothing changed


def test_softcapped_gemma2_is_refused_unless_m_is_one():
    m = model("gemma2")
    with pytest.raises(ValueError, match=r"soft-caps attention logits.*attn_logit_softcapping=5.0"):
        B.plan(m, TemperatureSpec(multiplier=1.3))
    assert all(step.multipliers == (1.0,) * 4 for step in B.plan(m, TemperatureSpec()))


POSITION_SPECS = [("logn", {"trained_len": 16}), ("llama4", {}), ("ssmax", {})]


@pytest.mark.parametrize(("schedule", "params"), POSITION_SPECS)
def test_position_dependent_schedules_are_refused(schedule, params):
    spec = TemperatureSpec(schedule=schedule, schedule_params=params)
    with pytest.raises(ValueError, match=f"schedule='{schedule}' is position-dependent.*attntemp.patch"):
        B.bake(model("llama"), spec)


def test_interrupted_save_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(B, "reload_logits", interrupted)
    with pytest.raises(KeyboardInterrupt):
        B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_failed_check_raises_and_leaves_nothing(tmp_path, monkeypatch):
    real = B.reload_logits
    monkeypatch.setattr(B, "reload_logits", lambda *a: real(*a) + 1e-3)
    msg = r"max abs diff 0.001 > 0.0001 \(0.0001 x the largest logit\) on 64 tokens; nothing was written"
    with pytest.raises(ValueError, match=msg):
        B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_folder_needs_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    with pytest.raises(ValueError, match=r"already holds results \(old.txt\); pass overwrite=True"):
        B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), out)
    with pytest.raises(ValueError, match=r"holds old.txt, not a checkpoint's; overwrite=True replaces only"):
        B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), out, overwrite=True)
    assert (out / "old.txt").read_text() == "x"  # a user's file: never deleted, not even with overwrite
    (out / "old.txt").unlink()
    B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), out)
    B.save_baked(model("llama"), None, TemperatureSpec(multiplier=2.0), out, overwrite=True)  # a checkpoint: replaced
    assert json.loads((out / B.SPEC_FILE).read_text())["spec"]["multiplier"] == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_bake_refuses_a_second_bake_a_patched_model_and_non_fp32(tmp_path):
    m = B.bake(model("llama"), TemperatureSpec(multiplier=1.5))
    with pytest.raises(ValueError, match=r"already baked"):
        B.bake(m, TemperatureSpec(multiplier=1.5))
    other = model("llama")
    with patch(other, TemperatureSpec(multiplier=1.5)):
        with pytest.raises(ValueError, match=r"patched by attntemp"):
            B.bake(other, TemperatureSpec(multiplier=1.5))
    with pytest.raises(ValueError, match=r"\['torch.bfloat16'\] parameters.*float32"):
        B.save_baked(model("llama").to(torch.bfloat16), None, TemperatureSpec(), tmp_path / "bf16")


# ----------------------------------------------------------------------------- hostile input (issue 15)
def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


KILL_BETWEEN_RENAMES = """
import os, signal, sys
import torch
sys.path.insert(0, {tests!r})
from tiny_configs import model
import attntemp.ship.bake as B
from attntemp.ops.spec import TemperatureSpec
out = {out!r}
B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), out)
real = os.rename
def rename(a, b):
    real(a, b)
    if ".old-" in str(b):  # the old checkpoint moved aside, the new one not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
B.save_baked(model("llama"), None, TemperatureSpec(multiplier=2.0), out, overwrite=True)
"""


@pytest.mark.slow  # 14 s: a subprocess killed with SIGKILL; the fast test below covers the same recovery
def test_a_bake_killed_between_its_renames_is_recovered_by_the_next(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "baked"
    code = KILL_BETWEEN_RENAMES.format(tests=str(Path(__file__).parents[1]), out=str(out))
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == -9
    left = sorted(p.name for p in tmp_path.iterdir())
    assert "baked" not in left and any(n.startswith(".baked.old-") for n in left)
    assert any(n.startswith(".baked.tmp-") for n in left)
    B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.2), tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baked", "other"]
    record = json.loads((out / B.SPEC_FILE).read_text())
    assert record["spec"]["multiplier"] == 1.5  # the old checkpoint, whole


def test_stale_staging_folders_are_cleaned_and_live_ones_kept(tmp_path):
    import os

    dead, live = _dead_pid(), os.getppid()
    for name in (f".x.tmp-{dead}-aaaa", f".x.old-{dead}-bbbb", f".y.tmp-{live}-cccc"):
        (tmp_path / name).mkdir()
    (tmp_path / "x").mkdir()  # x is in place: its orphaned .old is removed, not restored
    (tmp_path / f".w.old-{dead}-dddd").mkdir()  # w is missing: a kill between the renames; restored
    (tmp_path / f".w.old-{dead}-dddd" / B.SPEC_FILE).write_text("{}")
    B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.2), tmp_path / "z")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".y.tmp-{live}-cccc", "w", "x", "z"]
    assert (tmp_path / "w" / B.SPEC_FILE).read_text() == "{}"


def test_baking_a_baked_folder_is_refused_naming_its_record(tmp_path):
    baked = tmp_path / "baked"
    B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), baked)
    spec = tmp_path / "s.json"
    TemperatureSpec(multiplier=1.5).save(spec)
    cfg = BR.BakeConfig(model=str(baked), spec=str(spec), out=str(tmp_path / "again"))
    with pytest.raises(ValueError, match=r"already baked \(.*attntemp_spec.json"):
        BR.run_bake(cfg)
    again = reload(baked)
    with pytest.raises(ValueError, match="already baked"):
        B.bake(again, TemperatureSpec(multiplier=1.5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baked", "s.json"]


@pytest.mark.parametrize("key", ["lm_head.weight", "model.layers.0.self_attn.q_proj.weight"])
def test_a_checkpoint_missing_weights_is_refused_not_baked_with_random_ones(tmp_path, key):
    from safetensors.torch import load_file, save_file

    src = tmp_path / "src"
    model("llama").save_pretrained(src)
    weights = load_file(src / "model.safetensors")
    assert key in weights
    weights.pop(key)
    save_file(weights, src / "model.safetensors", metadata={"format": "pt"})
    spec = tmp_path / "s.json"
    TemperatureSpec(multiplier=1.5).save(spec)
    cfg = BR.BakeConfig(model=str(src), spec=str(spec), out=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=f"lacks 1 weight.*{key}"):
        BR.run_bake(cfg)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mask, folder, file", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600), (0o002, 0o775, 0o664)])
def test_baked_files_follow_the_umask(tmp_path, mask, folder, file):
    import os
    import stat

    old = os.umask(mask)
    try:
        out = B.save_baked(model("llama"), None, TemperatureSpec(multiplier=1.5), tmp_path / "out").path
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == folder
    modes = {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {file}, modes


def test_out_that_is_the_current_folder_or_holds_the_spec_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    spec = tmp_path / "sub" / "s.json"
    TemperatureSpec(multiplier=1.5).save(spec)
    for out, match in ((".", "current folder"), ("sub/..", "current folder"), ("sub", "holds the spec file")):
        cfg = BR.BakeConfig(spec=str(spec), out=out, overwrite=True)
        with pytest.raises(ValueError, match=match):
            BR.run_bake(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"] and spec.is_file()
