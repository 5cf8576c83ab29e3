"""Every command on a tiny random Gemma 3 saved with the shipped tokenizer (no download): 2 sliding
layers (window 16, RoPE base 1e4) and 1 global (1e6), 4 query heads and 1 KV head, QK-norm and
query_pre_attn_scalar as in Gemma 3 270M, at 128 tokens (8 windows)."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig

from attntemp.analysis.measure import AttentionStats
from attntemp.assets import tiny_path
from attntemp.cli import main
from attntemp.ops.spec import TemperatureSpec

TYPES = ["sliding_attention", "sliding_attention", "full_attention"]
GLOBAL = TemperatureSpec(multiplier=1.3, layer_types=["full_attention"])


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_gemma3")
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    cfg = Gemma3TextConfig(vocab_size=258, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                           sliding_window=16, layer_types=TYPES, rope_parameters=rope, max_position_embeddings=64,
                           bos_token_id=256, eos_token_id=257, pad_token_id=257)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_path() / name, out / name)
    return str(out)


def run(capsys, *argv):
    code = main([*argv, "--json"] if argv[0] != "export" else list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_measure_gives_windowed_layers_their_window_and_tempers_the_global_one(gemma, tmp_path, capsys):
    spec = GLOBAL.save(tmp_path / "g.json")
    run(capsys, "measure", "--model", gemma, "--length", "128", "--docs", "2", "--out", str(tmp_path / "a"))
    run(capsys, "measure", "--model", gemma, "--length", "128", "--docs", "2", "--spec", str(spec),
        "--out", str(tmp_path / "b"))  # fmt: skip
    plain, tempered = (AttentionStats.load(tmp_path / x / "stats.json") for x in "ab")
    n_keys = plain.stats["norm_entropy"]  # [layers, heads, buckets]
    assert n_keys.shape[0] == 3
    same = plain.by_head("entropy")[:2], tempered.by_head("entropy")[:2]
    assert (same[0] == same[1]).all()  # sliding layers untouched by a global-only spec
    assert (tempered.by_head("entropy")[2] < plain.by_head("entropy")[2]).all()  # m = 1.3 sharpens the global one
    # a windowed head's entropy stays below ln(window) in every bucket; the global one's grows past it
    assert (plain.stats["entropy"][:2] <= torch.log(torch.tensor(16.0)).item() + 1e-5).all()
    assert (plain.stats["entropy"][2][:, -1] > torch.log(torch.tensor(16.0)).item()).any()


def test_sweep_and_global_tune_on_the_global_layers(gemma, tmp_path, capsys):
    out = run(capsys, "sweep", "--model", gemma, "--lengths", "128", "--rope", "none,yarn", "--multipliers", "1,1.3",
              "--tasks", "perplexity", "--docs", "2", "--out", str(tmp_path / "s"))  # fmt: skip
    assert json.loads(out)
    run(capsys, "tune", "--model", gemma, "--length", "128", "--docs", "2", "--grid", "3", "--iters", "1",
        "--rope", "yarn", "--tasks", "perplexity", "--layer-types", "full_attention", "--bracket", "0.5,2",
        "--out", str(tmp_path / "t"))  # fmt: skip
    spec = TemperatureSpec.load(tmp_path / "t" / "spec.json")
    assert spec.layer_types == ("full_attention",) and spec.multiplier != 1.0
    assert dict(spec.rope)["rope_type"] == "yarn"


def test_gradient_tune_per_head_on_the_global_heads_only(gemma, tmp_path, capsys):
    run(capsys, "tune", "--model", gemma, "--length", "128", "--docs", "2", "--method", "gradient",
        "--granularity", "head", "--steps", "3", "--tasks", "perplexity", "--layer-types", "full_attention",
        "--out", str(tmp_path / "g"))  # fmt: skip
    spec = TemperatureSpec.load(tmp_path / "g" / "spec.json")
    assert spec.layer_types == ("full_attention",) and spec.heads is not None
    assert spec.heads[0] == spec.heads[1] == (1.0, 1.0, 1.0, 1.0)  # the sliding heads never moved
    assert all(m != 1.0 for m in spec.heads[2])  # the global ones learned
    assert main(["tune", "--model", gemma, "--objective", "entropy", "--layer-types", "full_attention",
                 "--out", str(tmp_path / "e")]) == 2  # fmt: skip
    assert "--layer-types=['full_attention'] with --objective='entropy' is not allowed" in capsys.readouterr().err


def test_bake_a_global_layer_spec_and_export_refuses_it(gemma, tmp_path, capsys):
    from safetensors.torch import load_file

    spec = str(GLOBAL.save(tmp_path / "g.json"))
    summary = json.loads(run(capsys, "bake", "--model", gemma, "--spec", spec, "--out", str(tmp_path / "baked")))
    assert summary["max_abs_diff"] <= 1e-4 and summary["targets"] == ["q_norm"]
    before, after = (load_file(f"{d}/model.safetensors") for d in (gemma, tmp_path / "baked"))
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert changed == ["model.layers.2.self_attn.q_norm.weight"]  # the global layer's QK-norm, nothing else
    assert torch.allclose(1 + after[changed[0]], 1.3 * (1 + before[changed[0]]))  # Gemma's norm multiplies by 1 + w
    assert main(["export", "--spec", spec, "--engine", "transformers"]) == 2
    assert "layer_types=['full_attention'] only" in capsys.readouterr().err


def test_audit_of_the_config(gemma, capsys):
    out = json.loads(run(capsys, "audit", "--config", f"{gemma}/config.json", "--engines", "transformers"))
    assert out["model_type"] == "gemma3_text" and out["engines"]["transformers"]["verdict"] == "agrees"


@pytest.mark.slow
def test_measure_sweep_and_bake_on_the_real_gemma3_270m(tmp_path, capsys):
    """`attntemp measure --model gemma3-270m --length 1024` and the others on the real model (one
    Gutenberg document each; minutes on a CPU)."""
    text = ["--text", "gutenberg:austen-emma", "--docs", "1", "--threads", "1"]
    run(capsys, "measure", "--model", "gemma3-270m", "--length", "1024", *text, "--out", str(tmp_path / "m"))
    stats = AttentionStats.load(tmp_path / "m" / "stats.json")
    entropy = stats.by_head("entropy")  # [18, 4]
    assert entropy.shape == (18, 4) and (entropy[[0, 1, 2, 3, 4]] <= torch.log(torch.tensor(512.0)).item()).all()
    sweep = run(capsys, "sweep", "--model", "gemma3-270m", "--lengths", "1024", "--rope", "none", "--multipliers",
                "1,1.2", "--tasks", "perplexity", *text, "--batch-size", "1", "--out", str(tmp_path / "s"))  # fmt: skip
    assert json.loads(sweep)
    spec = str(GLOBAL.save(tmp_path / "g.json"))
    summary = json.loads(run(capsys, "bake", "--model", "gemma3-270m", "--spec", spec, "--out", str(tmp_path / "b")))
    assert summary["max_abs_diff"] <= 1e-2 and summary["targets"] == ["q_norm"]  # logits of tens: 1e-4 of them


@pytest.mark.slow
def test_tune_on_the_global_heads_and_audit_of_the_real_config(tmp_path, capsys):
    """The real Gemma 3 270M: a global m searched on its 12 global heads only (1 document at 1024
    tokens, minutes on a CPU), and `audit` of its converted config."""
    from attntemp.hf.loading import resolve

    run(capsys, "tune", "--model", "gemma3-270m", "--length", "1024", "--docs", "1", "--batch-size", "1",
        "--text", "gutenberg:austen-emma", "--tasks", "perplexity", "--grid", "3", "--iters", "1",
        "--layer-types", "full_attention", "--check-lengths", "", "--threads", "1",
        "--out", str(tmp_path / "t"))  # fmt: skip
    spec = TemperatureSpec.load(tmp_path / "t" / "spec.json")
    assert spec.layer_types == ("full_attention",) and 0.5 <= spec.multiplier <= 2.5
    out = json.loads(run(capsys, "audit", "--config", str(resolve("gemma3-270m") / "config.json"), "--engines",
                         "transformers"))  # fmt: skip
    assert out["model_type"] == "gemma3_text" and out["engines"]["transformers"]["verdict"] == "agrees"


def _monitor_records(capsys, model: str, prompt, out, *extra: str) -> list[dict]:
    argv = ["generate", "--model", model, "--prompt-file", str(prompt), "--max-new-tokens", "4", "--monitor",
            "--every", "1", *extra, "--out", str(out)]  # fmt: skip
    run(capsys, *argv)
    return [json.loads(x) for x in (out / "monitor.jsonl").read_text().splitlines()]


def test_the_monitor_gives_windowed_layers_their_window(gemma, tmp_path, capsys):
    """Past the window (16) a sliding layer's query sees 16 keys, so its entropy is at most ln 16;
    the global layer sees the whole prefix (60+ keys) and its entropy may pass ln 16."""
    prompt = tmp_path / "p.txt"
    prompt.write_text("the quick brown fox jumps over the lazy dog, " * 2)  # ~90 byte tokens
    records = _monitor_records(capsys, gemma, prompt, tmp_path / "g", "--reference-docs", "1")
    assert len(records) == 4 and all(r["position"] > 16 for r in records)
    entropy = torch.tensor([r["layers"]["entropy"] for r in records])  # [steps, layers]
    assert (entropy[:, :2] <= torch.log(torch.tensor(16.0)).item() + 1e-4).all()
    assert (entropy[:, 2] > torch.log(torch.tensor(16.0)).item()).all()


@pytest.mark.slow
def test_the_monitor_on_the_real_gemma3_270m(tmp_path, capsys):
    """`generate --monitor` on the real Gemma 3 270M past its 512-token window: the 15 sliding
    layers' entropy stays under ln 512 at every step, the 3 global layers are recorded beside them.
    The reference is profiled at 1024 tokens (the default, its trained 32768, takes a 32k forward)."""
    from attntemp.analysis.reference_profile import reference
    from attntemp.evaluate.corpus import gutenberg_dir
    from attntemp.hf.loading import load_model

    model, tok = load_model("gemma3-270m")
    ref = reference(model, "gutenberg:austen-emma", 1024, tokenizer=tok, n_docs=1).save(tmp_path / "ref.json")
    del model
    prompt = tmp_path / "p.txt"
    prompt.write_text((gutenberg_dir() / "austen-emma.txt").read_text()[20000:24000])  # ~900 tokens
    records = _monitor_records(capsys, "gemma3-270m", prompt, tmp_path / "g", "--threads", "1", "--reference",
                               str(ref))  # fmt: skip
    entropy = torch.tensor([r["layers"]["entropy"] for r in records])  # [steps, 18]
    assert entropy.shape == (4, 18) and all(r["position"] > 512 for r in records)
    sliding = [i for i in range(18) if i % 6 != 5]  # 5 sliding layers to every global one
    assert (entropy[:, sliding] <= torch.log(torch.tensor(512.0)).item() + 1e-3).all()
