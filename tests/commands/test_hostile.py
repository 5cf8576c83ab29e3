"""Hostile and careless input to every command: exit code 2 and exactly one line on stderr (progress
bars aside) that names the flag, before any heavy work, and nothing left behind.

The table runs in-process through ``attntemp.cli.main``; the cases that need another process (a
read-only folder, an address-space limit) run in one subprocess at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from attntemp.assets import tiny_path
from attntemp.cli import main
from attntemp.evaluate.sweep import LOCK_FILE, Store
from attntemp.ops.attention_stats import STATS
from attntemp.utils.outputs import LOCK_NAME

SPECS = {
    "s_layers": {"layers": 1.1},
    "s_heads": {"heads": [1.1, 1.2]},
    "s_sp": {"schedule_params": [1, 2]},
    "s_ragged": {"heads": [[1, 1], [1], [1, 1], [1, 1]]},
    "s_bool": {"multiplier": True},
    "s_str": {"multiplier": "1.2"},
    "s_nofactor": {"rope": {"rope_type": "yarn"}},
    "s_ropestr": {"rope": "yarn"},
    "s_unknown": {"bogus": 1},
    "s_ropetype": {"rope": {"rope_type": "yarm", "factor": 2}},
    "s_ropefactor": {"rope": {"rope_type": "yarn", "factor": 0.5}},
    "s_ropekey": {"rope": {"rope_type": "linear", "factor": 2, "beta_fast": 3}},
    "s_schedule": {"schedule": "cosine"},
    "s_sched_params": {"schedule": "yarn", "schedule_params": {"s": -1}},
    "s_logn": {"schedule": "logn", "schedule_params": {"trained_len": 256}},
    "s_layers2": {"layers": [1, 1]},
    "s_nan": {"multiplier": float("nan")},
    "s_format": {"format": "attntemp.BakedCheckpoint/1", "multiplier": 1.0},
    "ok": {"multiplier": 1.2},
    # issue 54: what transformers refuses at load, or a size no engine means
    "s_llama3_bare": {"rope": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 256}},
    "s_yarn_huge": {"rope": {"rope_type": "yarn", "factor": 1e9, "original_max_position_embeddings": 256}},
    "s_m_tiny": {"multiplier": 1e-5},
    "s_yarn_l0_1024": {"rope": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024}},
    "s_m_huge": {"multiplier": 1e5},
    "s_longrope_3": {
        "rope": {
            "rope_type": "longrope",
            "factor": 4.0,
            "original_max_position_embeddings": 256,
            "short_factor": [1.0] * 3,
            "long_factor": [2.0] * 3,
        }
    },
    # model configs for `attntemp audit`
    "c_unknown_arch": {
        "model_type": "qwen33",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "max_position_embeddings": 512,
    },
    "c_bad_factor": {
        "model_type": "qwen3",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 1024},
    },
    "c_bad_rope": {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarm", "factor": 2.0},
    },
}
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
         "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0}  # fmt: skip
YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
CONFIGS = {  # audit configs of issue 32, each LLAMA with these fields
    "c_l0_zero": {"rope_scaling": {**YARN4, "original_max_position_embeddings": 0}},
    "c_af_huge": {"rope_scaling": {**YARN4, "attention_factor": 1e200}},
    "c_factor_huge": {"rope_scaling": {**YARN4, "factor": 1e300}},
    "c_head_dim_0": {"head_dim": 0},
    "c_kv_5": {"num_attention_heads": 32, "num_key_value_heads": 5, "hidden_size": 4096},
    "c_l0_over": {"rope_scaling": {**YARN4, "original_max_position_embeddings": 8192}},
    "c_hidden_huge": {"hidden_size": 1e9},
    "c_layers_huge": {"num_hidden_layers": 1e9},
    "c_both_ropes": {"rope_scaling": YARN4, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "c_mscale_huge": {"rope_scaling": {**YARN4, "mscale": 1.0, "mscale_all_dim": 1e6}},
    "c_plain": {},
}


def _tiny_copy(dest: Path) -> Path:
    shutil.copytree(tiny_path(), dest)
    return dest


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace of hostile files: bad specs, broken checkpoints, damaged databases, results."""
    w = tmp_path_factory.mktemp("hostile")
    for name, data in SPECS.items():
        (w / f"{name}.json").write_text(json.dumps(data))
    (w / "s_badjson.json").write_text("{bad")
    (w / "s_list.json").write_text("[1, 2]")
    (w / "s_deep.json").write_text("[" * 100000)
    (w / "afile").write_text("not a folder")
    (w / "empty").mkdir()
    (w / "empty.txt").write_text("  \n")
    (w / "one.txt").write_text("a single document\n" * 400)
    for name, files in (("measured", ["stats.json"]), ("calibrated", ["calibration.json"]), ("full", ["keep.txt"])):
        (w / name).mkdir()
        for f in files:
            (w / name / f).write_text("{}")
    (w / "rnd").mkdir()
    (w / "rnd" / "sweep.db").write_bytes(os.urandom(5000))
    (w / "foreign").mkdir()
    import sqlite3

    sqlite3.connect(w / "foreign" / "sweep.db").executescript("CREATE TABLE other (x INTEGER);")
    store = Store(w / "settled" / "sweep.db")  # a sweep made with other settings
    store.check_settings({"model": "tiny", "text": "stdlib", "n_docs": 4, "trials": 50, "seed": 0})
    store.close()
    (w / "locked").mkdir()
    (w / "users").mkdir()  # a user's files under advise's own names
    (w / "users" / "report.md").write_text("# my notes on the model\n")
    (w / "linked").symlink_to(w / "users")  # the same, through a symlinked --out
    for lock in (LOCK_FILE, LOCK_NAME):  # the lock files a running writer holds there
        (w / "locked" / lock).touch()
    for where in LOCKS.values():  # bake's beside the checkpoint, verify's in a --work-dir of its own
        (w / where).parent.mkdir(exist_ok=True)
        (w / where).touch()
    # broken checkpoints
    trunc = _tiny_copy(w / "trunc")
    os.truncate(trunc / "model.safetensors", 100_000)
    (_tiny_copy(w / "badcfg") / "config.json").write_text("{bad")
    (_tiny_copy(w / "notype") / "config.json").write_text("{}")
    (_tiny_copy(w / "noweights") / "model.safetensors").unlink()
    (w / "nocfg").mkdir()
    from safetensors.torch import load_file, save_file

    nolm = _tiny_copy(w / "nolm")
    weights = load_file(nolm / "model.safetensors")
    weights.pop("lm_head.weight")
    save_file(weights, nolm / "model.safetensors", metadata={"format": "pt"})
    baked = _tiny_copy(w / "baked")
    (baked / "attntemp_spec.json").write_text(json.dumps({"format": "attntemp.BakedCheckpoint/1", "baked": []}))
    (w / "specdir").mkdir()
    (w / "specdir" / "s.json").write_text(json.dumps({"multiplier": 1.1}))
    (w / "sub").mkdir()
    rng = np.random.default_rng(0)
    np.savez(w / "l.npz", logits=rng.normal(size=(50, 4)), labels=rng.integers(0, 4, 50))
    np.savez(w / "nolabels.npz", logits=rng.normal(size=(50, 4)))
    np.savez(w / "oneclass.npz", logits=rng.normal(size=(50, 1)), labels=np.zeros(50, dtype=int))
    np.savez(w / "flat.npz", logits=rng.normal(size=50), labels=np.zeros(50, dtype=int))
    np.savez(w / "objects.npz", logits=np.array([[1.0, "a"]], dtype=object), labels=np.zeros(1, dtype=int))
    reweighted = Store(w / "reweighted" / "sweep.db")  # points of a checkpoint since rewritten in place
    reweighted.check_settings({"model": "tiny", "model_weights": "0" * 32})
    reweighted.close()
    (w / "tuned").mkdir()  # an earlier tune's results
    (w / "tuned" / "spec.json").write_text(json.dumps({"multiplier": 1.1}))
    _issue_32(w)
    _issue_54_models(w)
    _issue_54_rest(w)
    _issue_62(w)
    return w


def _issue_62(w: Path) -> None:
    """The files of issue 62's cases: a BERT config, a longrope spec with one value per list."""
    bert = {"model_type": "bert", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
            "intermediate_size": 3072, "max_position_embeddings": 512, "vocab_size": 30522,
            "position_embedding_type": "absolute", "type_vocab_size": 2}  # fmt: skip
    (w / "c_bert.json").write_text(json.dumps(bert))
    rope = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 256}
    (w / "s_longrope_1.json").write_text(json.dumps({"rope": {**rope, "short_factor": [1.0], "long_factor": [2.0]}}))
    grid = [[[0.5] * 4] * 8] * 4  # [layers, heads, buckets]
    stats = {"stats": dict.fromkeys(STATS, grid), "bucket_edges": [0, 128, 256, 384, 512], "length": 512,
             "sink_tokens": 4, "recent_tokens": 64, "meta": {"model": "tiny"}}  # fmt: skip
    for name, text in (
        ("a_attention_garbage", "{bad"),
        ("a_attention_measured", json.dumps(stats)),  # a measure's stats.json under advise's name: no key
        ("a_attention_length", json.dumps({**stats, "length": 256, "meta": {"key": "k"}})),
    ):
        (w / name).mkdir()
        (w / name / "attention_512.json").write_text(text)


def _issue_54_rest(w: Path) -> None:
    """The files of issue 54's remaining cases: score stores of another program."""
    import sqlite3

    for name, schema in (
        ("a_foreign", "CREATE TABLE other (x);"),
        ("a_no_metrics", "CREATE TABLE scores (key TEXT PRIMARY KEY, task TEXT, length INTEGER, spec TEXT, "
                         "seconds REAL, created REAL);"),
    ):  # fmt: skip
        (w / name).mkdir()
        db = sqlite3.connect(w / name / "scores.db")
        db.executescript(schema)
        db.close()
    for name, fields in (  # audit configs read wrong: a base past any model's, a string read by truthiness or letter
        ("c_theta_huge", {"rope_theta": 1e308}),
        ("c_truncate_str", {"rope_scaling": {**YARN4, "truncate": "yes"}}),
        ("c_layer_types_str", {"layer_types": "full_attention"}),
    ):
        (w / f"{name}.json").write_text(json.dumps({**LLAMA, **fields}))
    for name, mark in (("v_marked", '["kl.kld"]'), ("v_old_mark", "")):  # verify's mark, and a user's file beside
        (w / name).mkdir()
        (w / name / ".attntemp-verify").write_text(mark)
        (w / name / "kl.kld").write_text("verify's")
        (w / name / "thesis.tex").write_text("the user's")
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 1024, "vocab_size": 100}
    (w / "c_gpt2.json").write_text(json.dumps(gpt2))  # no rotary embeddings
    (w / "s_yarn.json").write_text(json.dumps({"rope": {"rope_type": "yarn", "factor": 2.0}}))
    (_tiny_copy(w / "m_gpt2") / "config.json").write_text(json.dumps({**gpt2, "vocab_size": 258}))  # issue 62 item 8
    config = json.loads((tiny_path() / "config.json").read_text())
    del config["max_position_embeddings"]  # transformers would read it as LlamaConfig's 2048, advise as --length
    (_tiny_copy(w / "m_no_max_positions") / "config.json").write_text(json.dumps(config))


def _issue_32(w: Path) -> None:
    """The files of issue 32's cases: audit configs, texts, folders of other runs' results."""
    import dataclasses

    import torch

    from attntemp.assets import configs_path
    from attntemp.tune.resume import settings
    from attntemp.tune.runner import TuneConfig

    for name, fields in CONFIGS.items():
        (w / f"{name}.json").write_text(json.dumps({**LLAMA, **fields}))
    gpt_oss = json.loads((configs_path() / "gpt_oss.json").read_text())
    gpt_oss["layer_types"] = ["banana_attention"] * len(gpt_oss["layer_types"])
    (w / "c_banana.json").write_text(json.dumps(gpt_oss))
    (w / "zero.txt").write_text("")
    (w / "short.txt").write_text("a few words of held-out text\n")
    rng = np.random.default_rng(1)
    (w / "norepeat.txt").write_text("".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 4000)))  # no n-gram repeats
    for name, files in (("evaluated", ["comparison.json"]), ("demoed", ["report.md"]), ("demofor", ["baked/mine.txt"]),
                        ("bk", ["canary.txt", "sub/keep.txt"])):  # fmt: skip
        for f in files:
            (w / name / f).parent.mkdir(parents=True, exist_ok=True)
            (w / name / f).write_text("the user's")
    (w / "killed").mkdir()  # a gradient tune killed after training: its checkpoint, made with --steps 5
    made = dataclasses.replace(TuneConfig(out="x", length=400, method="gradient", steps=5), needles_per_forward=8)
    torch.save({"meta": {"settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings(made).items()}}},
               w / "killed" / "checkpoint.pt")  # fmt: skip


def _rewrite_header(path: Path, edit) -> None:
    """``path``'s safetensors header replaced by ``edit(header)`` (padded to 8 bytes), its data kept."""
    import struct

    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    text = json.dumps(edit(json.loads(data[8 : 8 + n]))).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n :])


def _set_offsets(value):
    def edit(header):
        entry = header["lm_head.weight"]
        if value is KeyError:
            del entry["data_offsets"]
        else:
            entry["data_offsets"] = value
        return header

    return edit


def _issue_54_models(w: Path) -> None:
    """Issue 54 item 4: broken --model folders, each a copy of the tiny model with one thing wrong."""
    from safetensors.torch import load_file, save_file

    _rewrite_header(_tiny_copy(w / "m_header_list") / "model.safetensors", lambda header: [header])
    for name, value in (("m_offsets_str", "0,100"), ("m_offsets_null", None), ("m_offsets_missing", KeyError)):
        _rewrite_header(_tiny_copy(w / name) / "model.safetensors", _set_offsets(value))
    keys = list(load_file(tiny_path() / "model.safetensors"))
    for name, shard in (("m_index_ints", 1), ("m_index_escape", "../../../../etc/hostname")):
        folder = _tiny_copy(w / name)
        (folder / "model.safetensors").unlink()  # sharded: the index names the files
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict.fromkeys(keys, shard)}))
    config = json.loads((tiny_path() / "config.json").read_text())
    for name, fields in (
        ("m_vocab_str", {"vocab_size": "258"}),
        ("m_intermediate_list", {"intermediate_size": [384]}),
        ("m_eps_str", {"rms_norm_eps": "1e-6"}),  # a field only transformers' LlamaConfig types
        ("m_vocab_small", {"vocab_size": 100}),
        ("m_tokenizer_over", {"vocab_size": 200, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}),
    ):
        (_tiny_copy(w / name) / "config.json").write_text(json.dumps({**config, **fields}))
    garbage = _tiny_copy(w / "m_garbage_bin")
    (garbage / "model.safetensors").unlink()
    (garbage / "pytorch_model.bin").write_bytes(np.random.default_rng(2).bytes(4096))
    gguf = _tiny_copy(w / "m_gguf_truncated")
    os.truncate(gguf / "model.safetensors", 100_000)
    (gguf / "foo.gguf").write_bytes(b"GGUF")
    for name, value in (("m_nan", float("nan")), ("m_inf", float("inf"))):
        folder = _tiny_copy(w / name)
        weights = load_file(folder / "model.safetensors")
        weights["model.layers.1.mlp.up_proj.weight"][0, 0] = value
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


M = ["measure", "--length", "64", "--out", "{w}/m_out"]
S = ["sweep", "--lengths", "64", "--multipliers", "1", "--docs", "1", "--out", "{w}/s_out"]
T = ["tune", "--length", "400", "--out", "{w}/t_out"]
B = ["bake", "--spec", "{w}/ok.json", "--out", "{w}/b_out"]
C = ["calibrate", "--logits", "{w}/l.npz", "--out", "{w}/c_out"]
D = ["demo", "--out", "{w}/d_out"]
A = ["advise", "--length", "512", "--out", "{w}/a_out"]
G = ["generate", "--prompt-file", "{w}/one.txt", "--max-new-tokens", "4", "--out", "{w}/g_out"]
E = ["eval", "--spec", "{w}/ok.json", "--tasks", "attntemp_passkey_512", "--out", "{w}/e_out"]
V = ["verify", "--engine", "llama.cpp", "--spec", "{w}/ok.json", "--engine-dir", "{w}/empty"]


def with_(base: list[str], *extra: str) -> list[str]:
    """``base`` with each ``--flag value`` of ``extra`` replacing the one there (or added)."""
    out = list(base)
    pairs = list(extra)
    while pairs:
        flag = pairs.pop(0)
        value = pairs.pop(0) if pairs and not pairs[0].startswith("--") else None
        if flag in out and value is not None:
            out[out.index(flag) + 1] = value
        else:
            out += [flag] + ([value] if value is not None else [])
    return out


AU = ["audit", "--engines", "transformers", "--config"]
ISSUE_32 = [  # (id, argv, text the one error line must contain); the cases of issue 32, in its order
    # tracebacks, now one line
    ("audit-l0-zero", [*AU, "{w}/c_l0_zero.json"], "config.rope_scaling.original_max_position_embeddings=0 is not"),
    ("audit-attention-factor-huge", [*AU, "{w}/c_af_huge.json"], "config.rope_scaling.attention_factor=1e+200 is"),
    ("audit-layer-types-banana", [*AU, "{w}/c_banana.json"], "config.layer_types[0]='banana_attention' is not"),
    ("eval-metadata-deep", with_(E, "--metadata", '{"a":' * 5000 + "1" + "}" * 5000), "nested too deep to read"),
    # accepted without a word, now refused
    ("audit-factor-huge", [*AU, "{w}/c_factor_huge.json"], "config.rope_scaling.factor=1e+300 is not allowed"),
    ("audit-head-dim-0", [*AU, "{w}/c_head_dim_0.json"], "config.head_dim=0 is not allowed"),
    ("audit-kv-heads", [*AU, "{w}/c_kv_5.json"], "config.num_key_value_heads=5 is not allowed: it must divide"),
    (
        "audit-l0-over-max",
        [*AU, "{w}/c_l0_over.json"],
        "original_max_position_embeddings=8192 is not allowed; expected at most max_position_embeddings=4096",
    ),
    ("audit-hidden-huge", [*AU, "{w}/c_hidden_huge.json"], "config.hidden_size=1000000000.0 is not allowed; expected"),
    ("audit-layers-huge", [*AU, "{w}/c_layers_huge.json"], "config.num_hidden_layers=1000000000.0 is not allowed"),
    ("audit-threads-huge", [*AU, "{w}/c_plain.json", "--threads", "100000"], "--threads=100000 is not allowed"),
    ("audit-positions-empty", [*AU, "{w}/c_plain.json", "--positions", ""], "--positions is empty"),
    ("audit-positions-comma", [*AU, "{w}/c_plain.json", "--positions", ","], "--positions is empty"),
    (
        "audit-engine-dir-missing",
        ["audit", "--config", "{w}/c_plain.json", "--engines", "llama.cpp", "--engine-dir", "/nonexistent"],
        "--engine-dir='/nonexistent' is not allowed: no such folder",
    ),
    (
        "audit-readings-no-engine",
        ["audit", "--readings", "--engines", "transformers,llama.cpp", "--engine-dir", "{w}"],
        "none of them can check --readings here",
    ),
    (
        "audit-no-engine-runs",
        ["audit", "--config", "{w}/c_plain.json", "--engines", "vllm"],
        "none of them can run here, so nothing was checked",
    ),
    (
        "sweep-key-alpha-alone",
        with_(S, "--tasks", "key_tokens", "--key-alpha", "3"),
        "--key-alpha=3.0 is not allowed without --key-evaluator=MODEL",
    ),
    ("tune-key-beta-alone", with_(T, "--key-beta", "-1"), "--key-beta=-1.0 is not allowed without --key-evaluator"),
    ("demo-key-evaluator", with_(D, "--key-evaluator", "/nonexistent"), "--key-evaluator='/nonexistent'"),
    (
        "tune-target-perplexity",
        with_(T, "--target", "max_weight"),
        "--target='max_weight' is not allowed with --objective='perplexity'",
    ),
    (
        "tune-rope-temperature-none-head",
        with_(
            T,
            "--method",
            "gradient",
            "--rope-factors",
            "learn",
            "--rope-temperature",
            "none",
            "--granularity",
            "head",
            "--length",
            "512",
        ),
        "--granularity='head' is a learned temperature's",
    ),
    ("generate-every-no-monitor", with_(G, "--every", "5"), "--every=5 is not allowed without --monitor"),
    (
        "generate-stop-on-no-monitor",
        with_(G, "--stop-on", "diffusion"),
        "--stop-on='diffusion' is not allowed without --monitor",
    ),
    ("sweep-gutenberg-empty", with_(S, "--gutenberg", ""), "--gutenberg='' is empty"),
    (
        "tune-heldout-binary",
        with_(T, "--heldout-text", "{w}/l.npz"),
        "--heldout-text='{w}/l.npz' is not allowed: it is binary",
    ),
    (
        "tune-heldout-dotdot",
        with_(T, "--text", "{w}/one.txt", "--heldout-text", "{w}/sub/../one.txt"),
        "--heldout-text='{w}/sub/../one.txt' is --text itself",
    ),
    (
        "export-gguf-arch",
        ["export", "--spec", "{w}/ok.json", "--engine", "llama.cpp", "--gguf-arch", "a b;rm -rf /"],
        "--gguf-arch='a b;rm -rf /' is not allowed; expected a GGUF architecture name",
    ),
    ("audit-both-rope-keys", [*AU, "{w}/c_both_ropes.json"], "config has both rope_parameters and rope_scaling"),
    ("audit-mscale-all-dim-huge", [*AU, "{w}/c_mscale_huge.json"], "config.rope_scaling.mscale_all_dim=1000000.0 is"),
    # --heldout-text, checked before any work (data-loss case 5)
    ("tune-heldout-empty-string", with_(T, "--heldout-text", ""), "--heldout-text='' is not allowed"),
    (
        "tune-heldout-empty-file",
        with_(T, "--heldout-text", "{w}/zero.txt"),
        "--heldout-text='{w}/zero.txt' is not allowed: it is too short to score",
    ),
    (
        "tune-heldout-blank-file",
        with_(T, "--heldout-text", "{w}/empty.txt"),
        "--heldout-text='{w}/empty.txt' is not allowed: it is too short",
    ),
    (
        "tune-heldout-short-file",
        with_(T, "--heldout-text", "{w}/short.txt"),
        "--heldout-text='{w}/short.txt' is not allowed: it is too short",
    ),
    # --out / --overwrite, the one rule (data-loss cases 1, 2, 4)
    (
        "demo-out-results",
        with_(D, "--out", "{w}/demoed"),
        "--out='{w}/demoed' already holds results (report.md); pass --overwrite",
    ),
    (
        "demo-overwrite-users-file",
        with_(D, "--out", "{w}/demofor", "--overwrite"),
        "holds baked/mine.txt, not written by this command; --overwrite replaces only its own files",
    ),
    (
        "bake-overwrite-dotdot",
        with_(B, "--out", "{w}/bk/sub/..", "--overwrite"),
        "--out='{w}/bk/sub/..' ({w}/bk) holds canary.txt, sub/, not a checkpoint's",
    ),
    (
        "tune-resume-other-settings",
        with_(T, "--out", "{w}/killed", "--method", "gradient", "--steps", "3"),
        "holds a killed gradient tune's checkpoint.pt made with --steps=5; this run has --steps=3",
    ),
    # refused late or for the wrong thing
    ("demo-length-huge", with_(D, "--length", "1000000000"), "--length=1000000000 is not allowed: a forward of"),
    ("demo-length-short", with_(D, "--length", "100"), "--length=100 is too short for key_tokens"),
    (
        "sweep-needles-explicit",
        with_(S, "--lengths", "1024", "--tasks", "needles", "--needles-per-forward", "8"),
        "--lengths[0]=1024 is too short for needles with --needles-per-forward=8",
    ),
    (
        "generate-reference-docs",
        with_(G, "--monitor", "--reference-text", "{w}/one.txt", "--reference-docs", "100"),
        "--reference-text='{w}/one.txt' with --reference-docs=100 is not allowed",
    ),
    (
        "generate-reference-text-empty",
        with_(G, "--monitor", "--reference-text", "{w}/empty"),
        "--reference-text='{w}/empty' holds no",
    ),
    (
        "sweep-no-key-tokens",
        with_(S, "--lengths", "300", "--tasks", "key_tokens", "--text", "{w}/norepeat.txt"),
        "no key tokens in 1 windows of 300 tokens (n-gram rule",
    ),
    (
        "eval-metadata-tokenizer",
        with_(E, "--metadata", '{"tokenizer": "nobody/no-such-tokenizer"}'),
        "--metadata[tokenizer]='nobody/no-such-tokenizer' is not in the local Hugging Face cache",
    ),
    (
        "generate-prompt-folder",
        with_(G, "--prompt-file", "{w}/empty"),
        "--prompt-file='{w}/empty' is not allowed: a folder, not a file",
    ),
    ("audit-config-empty", ["audit", "--config", ""], "--config='' is empty"),
]
EX = ["export", "--engine", "vllm", "--spec"]
ISSUE_54 = [  # (id, argv, text the one error line must contain); sizes and relations up front, export and bake
    (
        "advise-overwrite-users-file",
        with_(A, "--out", "{w}/users", "--overwrite"),
        "holds report.md under this command's own names, not written by it",
    ),
    (
        "advise-overwrite-through-link",
        with_(A, "--out", "{w}/linked", "--overwrite"),
        "holds report.md under this command's own names, not written by it",
    ),
    ("demo-trials-huge", with_(D, "--trials", "1000000000"), "--trials=1000000000 is not allowed: 1000000000 prompt"),
    ("demo-docs-over-text", with_(D, "--docs", "100000"), "--docs=100000 is not allowed: the run needs 100000 windows"),
    (
        "advise-race-windows-over-text",
        with_(A, "--race-windows", "100000"),
        "--race-windows=100000 is not allowed: the run needs 100002 windows of 512 tokens (100000 raced and 2 spare",
    ),
    (
        "advise-batch-size-memory",
        with_(A, "--batch-size", "1000000000"),
        "--batch-size=1000000000 is not allowed: a forward of 1000000000 row(s)",
    ),
    (
        "advise-min-windows-over-race",
        with_(A, "--min-windows", "20", "--race-windows", "2"),
        "--min-windows=20 is not allowed; expected at most --race-windows=2",
    ),
    (
        "advise-heldout-same",
        with_(A, "--text", "{w}/one.txt", "--heldout-text", "{w}/sub/../one.txt"),
        "--heldout-text='{w}/sub/../one.txt' is --text itself",
    ),
    ("demo-heldout-same", with_(D, "--heldout-text", "stdlib"), "--heldout-text='stdlib' is --text itself"),
    ("bake-out-tilde", ["bake", "--spec", "{w}/ok.json", "--out=~/full"], "--out='{w}/full' already holds results"),
    ("export-llama3-no-freq", [*EX, "{w}/s_llama3_bare.json"], "rope has no 'low_freq_factor' for 'llama3'"),
    (
        "export-yarn-factor-huge",
        [*EX, "{w}/s_yarn_huge.json"],
        "rope.factor=1000000000.0 is not allowed; expected a number in [1, 10000]",
    ),
    ("bake-m-tiny", with_(B, "--spec", "{w}/s_m_tiny.json"), "multiplier=1e-05 is not allowed; expected a number in"),
    ("bake-m-huge", with_(B, "--spec", "{w}/s_m_huge.json"), "multiplier=100000.0 is not allowed; expected a number"),
    (
        "export-longrope-pairs",
        [*EX, "{w}/s_longrope_3.json", "--config", "{w}/c_plain.json"],
        "--spec='{w}/s_longrope_3.json': rope.short_factor has 3 values; expected 16, one per frequency pair",
    ),
    ("bake-longrope-pairs", with_(B, "--spec", "{w}/s_longrope_3.json"), "rope.short_factor has 3 values; expected 8"),
]

MODEL_FOLDERS = [  # (id, argv, text the one error line must contain); issue 54 item 4: every --model folder checked
    ("measure-model-header-list", with_(M, "--model", "{w}/m_header_list"),
     "m_header_list/model.safetensors: its header is a JSON list; expected an object of tensors"),
    ("advise-model-offsets-string", with_(A, "--model", "{w}/m_offsets_str"),
     "model.safetensors: tensor 'lm_head.weight' has data_offsets='0,100'; expected [begin, end], two integers"),
    ("bake-model-offsets-null", with_(B, "--model", "{w}/m_offsets_null"),
     "model.safetensors: tensor 'lm_head.weight' has data_offsets=None; expected [begin, end]"),
    ("measure-model-offsets-missing", with_(M, "--model", "{w}/m_offsets_missing"),
     "--model='{w}/m_offsets_missing': {w}/m_offsets_missing/model.safetensors: tensor 'lm_head.weight' has no "
     "data_offsets"),
    ("generate-model-index-ints", with_(G, "--model", "{w}/m_index_ints"),
     "model.safetensors.index.json: weight_map['lm_head.weight']=1 is not allowed; expected a file name"),
    ("measure-model-index-escape", with_(M, "--model", "{w}/m_index_escape"),
     "weight_map['lm_head.weight']='../../../../etc/hostname' is not allowed: it points outside the folder"),
    ("advise-model-vocab-string", with_(A, "--model", "{w}/m_vocab_str"),
     "m_vocab_str/config.json: vocab_size='258' is not allowed; expected an integer"),
    ("tune-model-intermediate-list", with_(T, "--model", "{w}/m_intermediate_list"),
     "config.json: intermediate_size=[384] is not allowed; expected an integer"),
    ("sweep-model-config-class-type", with_(S, "--model", "{w}/m_eps_str"),
     "m_eps_str/config.json: rms_norm_eps is not allowed: Field 'rms_norm_eps' expected float, got str"),
    ("measure-model-garbage-bin", with_(M, "--model", "{w}/m_garbage_bin"),
     "m_garbage_bin/pytorch_model.bin: does not load with torch.load(weights_only=True) (UnpicklingError"),
    ("advise-model-vocab-below-pad", with_(A, "--model", "{w}/m_vocab_small"),
     "m_vocab_small/config.json: pad_token_id=257 is not allowed; expected an id below vocab_size=100"),
    ("generate-model-tokenizer-over-vocab", with_(G, "--model", "{w}/m_tokenizer_over"),
     "m_tokenizer_over/tokenizer.json: its vocabulary has 256 ids, more than config.json's vocab_size=200"),
    ("measure-model-gguf-truncated", with_(M, "--model", "{w}/m_gguf_truncated"),
     "m_gguf_truncated/model.safetensors is truncated"),
    ("measure-model-nan", with_(M, "--model", "{w}/m_nan"),
     "m_nan/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds NaN; expected finite weights"),
    ("bake-model-inf", with_(B, "--model", "{w}/m_inf"),
     "m_inf/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds inf; expected finite weights"),
]  # fmt: skip

ISSUE_54_REST = [  # (id, argv, text the one error line must contain); issue 54's remaining cases
    (
        "advise-text-blank",
        with_(A, "--text", "{w}/empty.txt"),
        "--text='{w}/empty.txt' is not allowed: it is too short to score, empty or only whitespace",
    ),
    ("advise-text-empty-file", with_(A, "--text", "{w}/zero.txt"), "--text='{w}/zero.txt' is not allowed: it is too"),
    (
        "advise-out-foreign-db",
        with_(A, "--out", "{w}/a_foreign"),
        "--out='{w}/a_foreign': '{w}/a_foreign/scores.db' is not a usable score store: it holds table(s) ['other']",
    ),
    (
        "demo-out-no-metrics-db",
        with_(D, "--out", "{w}/a_no_metrics"),
        "'{w}/a_no_metrics/scores.db' is not a usable score store: its scores table has no column(s) ['metrics']",
    ),
    (
        "advise-model-no-max-positions",
        with_(A, "--model", "{w}/m_no_max_positions"),
        "--model='{w}/m_no_max_positions': {w}/m_no_max_positions/config.json has no max_position_embeddings, the "
        "length the model was trained to",
    ),
    (
        "sweep-model-no-max-positions",
        with_(S, "--model", "{w}/m_no_max_positions"),
        "m_no_max_positions/config.json has no max_position_embeddings",
    ),
    (  # c_plain: rope_theta 10000, max_position_embeddings 4096
        "export-rope-theta-other-config",
        [*EX, "{w}/s_yarn.json", "--config", "{w}/c_plain.json", "--rope-theta", "500000"],
        "--rope-theta=500000.0 is not allowed with --config='{w}/c_plain.json', whose rope_theta is 10000.0",
    ),
    (
        "export-trained-length-other-config",
        [*EX, "{w}/s_yarn.json", "--config", "{w}/c_plain.json", "--trained-length", "1024"],
        "--trained-length=1024 is not allowed with --config='{w}/c_plain.json', whose trained length (L0) is 4096",
    ),
    (
        "export-config-no-rope",
        [*EX, "{w}/s_yarn.json", "--config", "{w}/c_gpt2.json", "--trained-length", "1024"],
        "--config='{w}/c_gpt2.json' is not allowed: model_type='gpt2' has no rotary embeddings",
    ),
    ("audit-rope-theta-huge", [*AU, "{w}/c_theta_huge.json"], "config.rope_theta=1e+308 is not allowed; expected a"),
    (
        "audit-yarn-truncate-string",
        [*AU, "{w}/c_truncate_str.json"],
        "config.rope_scaling.truncate='yes' is not allowed; expected true or false",
    ),
    (  # was: "config.layer_types has 14 entries", its letters counted
        "audit-layer-types-string",
        [*AU, "{w}/c_layer_types_str.json"],
        "config.layer_types='full_attention' is not allowed; expected a list of 2 strings",
    ),
    ("export-rope-theta-huge", [*EX, "{w}/s_yarn.json", "--rope-theta", "1e308"], "--rope-theta=1e+308 is not"),
    (  # was: accepted, the mark trusted whatever else the folder held
        "verify-work-dir-marked-users-file",
        with_(V, "--work-dir", "{w}/v_marked"),
        "--work-dir='{w}/v_marked' holds files verify did not write (thesis.tex): its .attntemp-verify does not list",
    ),
    (
        "verify-work-dir-empty-mark",
        with_(V, "--work-dir", "{w}/v_old_mark"),
        "--work-dir='{w}/v_old_mark' holds files verify did not write (kl.kld, thesis.tex)",
    ),
    (  # was: "the haystack holds 29 tokens; length=256 needs 256" after the model loaded, naming no flag
        "sweep-gutenberg-short-needles",
        with_(S, "--lengths", "160,256", "--tasks", "needles", "--gutenberg", "{w}/short.txt"),
        "--gutenberg='{w}/short.txt' is not allowed: its haystack holds 29 tokens; --lengths[1]=256 needs 256",
    ),
    (
        "sweep-gutenberg-short-needle",
        with_(S, "--lengths", "256", "--tasks", "needle", "--gutenberg", "{w}/short.txt"),
        "--gutenberg='{w}/short.txt' is not allowed: none of its documents is long enough for --lengths[0]=256",
    ),
]

ATTENTION_FILES = (  # issue 62 item 4: what an attention_512.json in --out holds, and why it is refused
    ("garbage", "JSONDecodeError"),
    ("measured", "ValueError: no key of the advise run"),
    ("length", "ValueError: its statistics are of length 256"),
)
ENV = {  # the environment of the rows that set a variable the project reads
    "measure-tiny-dir-missing": {"ATTNTEMP_TINY_DIR": "/nonexistent/tiny"},
    "advise-tiny-dir-garbage": {"ATTNTEMP_TINY_DIR": "{w}/m_garbage_bin"},
    "sweep-tiny-dir-truncated": {"ATTNTEMP_TINY_DIR": "{w}/trunc"},
    "measure-cache-file": {"ATTNTEMP_CACHE": "{w}/afile"},
    "generate-cache-file": {"ATTNTEMP_CACHE": "{w}/afile"},
    "audit-engines-env-file": {"ATTNTEMP_ENGINES": "{w}/afile"},
}
LOCKS = {"sweep": f"locked/{LOCK_FILE}", "bake": f".locked{LOCK_NAME}", "verify": f"vlocked/{LOCK_NAME}"}
IN_USE = "--out='{w}/locked' is in use by another"
GPT2 = "--model='{w}/m_gpt2' is not allowed: {w}/m_gpt2/config.json has model_type='gpt2', which attntemp.patch does"
ISSUE_62 = [  # (id, argv, text the one error line must contain); issue 62's findings and their siblings
    # item 1: every writer locks its folder before any check or work (was: measure, the check after the work)
    ("measure-out-locked", with_(M, "--out", "{w}/locked"), IN_USE + " measure (pid"),
    ("calibrate-out-locked", with_(C, "--out", "{w}/locked"), IN_USE + " calibrate (pid"),
    ("generate-out-locked", with_(G, "--out", "{w}/locked"), IN_USE + " generate (pid"),
    ("tune-out-locked", with_(T, "--out", "{w}/locked"), IN_USE + " tune (pid"),
    ("eval-out-locked", with_(E, "--out", "{w}/locked"), IN_USE + " eval (pid"),
    ("bake-out-locked", with_(B, "--out", "{w}/locked"), IN_USE + " bake (pid"),
    ("report-locked", ["report", "{w}/locked"], "dir='{w}/locked' is in use by another report (pid"),
    # item 8: a tuple shown as the user types it (was: --engines=('llama.cpp',))
    (
        "audit-engines-as-typed",
        ["audit", "--config", "{w}/c_plain.json", "--engines", "llama.cpp", "--engine-dir", "{w}/empty"],
        "--engines='llama.cpp': none of them can run here",
    ),
    *[  # was: "config has no 'num_attention_heads'", naming no flag (or refused after the model loaded)
        (f"{argv[0]}-model-gpt2", with_(argv, "--model", "{w}/m_gpt2"), GPT2)
        for argv in (A, M, S, T, B, D, E, V, with_(G, "--spec", "{w}/ok.json"))
    ],
    # item 8: exports still accepted in the last round
    (
        "export-longrope-one-value",
        [*EX, "{w}/s_longrope_1.json"],
        "--spec='{w}/s_longrope_1.json': rope.short_factor has 1 value(s); expected one per frequency pair",
    ),
    (
        "export-spec-other-trained-length",
        [*EX, "{w}/s_yarn_l0_1024.json", "--config", "qwen3_yarn"],
        "--spec='{w}/s_yarn_l0_1024.json' is not allowed with --config='qwen3_yarn': its rope states a trained "
        "length (original_max_position_embeddings) of 1024, the model's is 32768",
    ),
    (
        "export-config-bert",
        [*EX, "{w}/s_yarn.json", "--config", "{w}/c_bert.json"],
        "--config='{w}/c_bert.json' is not allowed: model_type='bert' has no rotary embeddings",
    ),
    # item 5: a variable the project reads is named in its error (ENV gives each row's)
    ("measure-tiny-dir-missing", M, "ATTNTEMP_TINY_DIR='/nonexistent/tiny' is no such folder; expected a checkpoint"),
    ("advise-tiny-dir-garbage", A, "ATTNTEMP_TINY_DIR='{w}/m_garbage_bin': {w}/m_garbage_bin/pytorch_model.bin: does"),
    ("sweep-tiny-dir-truncated", S, "ATTNTEMP_TINY_DIR='{w}/trunc': {w}/trunc/model.safetensors is truncated"),
    ("measure-cache-file", with_(M, "--dtype", "auto"), "ATTNTEMP_CACHE='{w}/afile' is not allowed: it is a file"),
    ("generate-cache-file", with_(G, "--dtype", "auto"), "ATTNTEMP_CACHE='{w}/afile' is not allowed: it is a file"),
    (
        "audit-engines-env-file",
        ["audit", "--config", "{w}/c_plain.json", "--engines", "llama.cpp"],
        "ATTNTEMP_ENGINES='{w}/afile' is not allowed: it is a file",
    ),
    # item 4: every file advise reads from --out, checked before the model loads (was: after 12 s of loading,
    # leaving .attntemp.lock, attention_256.json and scores.db beside the user's file)
    *[
        (
            f"{argv[0]}-attention-{what}",
            with_(argv, "--out", f"{{w}}/a_attention_{what}"),
            f"--out='{{w}}/a_attention_{what}' holds attention_512.json, which is not advise's attention "
            f"statistics ({why}",
        )
        for argv in (A, D)
        for what, why in ATTENTION_FILES
    ],
    # item 7: an external system fails in one line naming the flag (a loopback port nothing listens on)
    ("advise-ray-address-closed", with_(A, "--ray-address", "127.0.0.1:1"), "--ray-address='127.0.0.1:1' could not be"),
    ("demo-ray-address-closed", with_(D, "--ray-address", "127.0.0.1:1"), "--ray-address='127.0.0.1:1' could not be"),
    ("demo-ray-address-port", with_(D, "--ray-address", "127.0.0.1"), "expected auto, HOST:PORT or ray://HOST:PORT"),
    ("demo-workers-huge", with_(D, "--workers", "1000000"), "--workers=1000000 is not allowed; expected at most"),
    ("verify-work-dir-locked", with_(V, "--work-dir", "{w}/vlocked"), "--work-dir='{w}/vlocked' is in use by"),
    (  # was: the deprecation warning, then the 768 check the user turned off
        "advise-both-spellings-old-last",
        with_(A, "--check-lengths", "0", "--check-length", "768"),
        "--check-length=768 is not allowed with --check-lengths=0: --check-length is the old spelling",
    ),
    (
        "advise-both-spellings-old-first",
        with_(A, "--check-length", "768", "--check-lengths", "0"),
        "--check-length=768 is not allowed with --check-lengths=0: --check-length is the old spelling",
    ),
]

# (id, argv, text the one error line must contain); {w} is the workspace
CASES = [
    # --- --model, in every loading command (item 1)
    ("measure-model-missing", with_(M, "--model", "/nonexistent"), "--model='/nonexistent' is no such folder"),
    ("measure-model-empty", with_(M, "--model", ""), "--model='' is empty"),
    ("measure-model-typo", with_(M, "--model", "smolm2"), "Did you mean 'smollm2'?"),
    ("measure-model-space", with_(M, "--model", "a b"), "--model='a b' is not a local folder, nor a valid hub id"),
    ("measure-model-file", with_(M, "--model", "{w}/afile"), "is a file, not a folder"),
    ("measure-model-truncated", with_(M, "--model", "{w}/trunc"), "model.safetensors is truncated"),
    ("measure-model-badcfg", with_(M, "--model", "{w}/badcfg"), "config.json is not valid JSON"),
    ("measure-model-notype", with_(M, "--model", "{w}/notype"), "has no model_type"),
    ("measure-model-noweights", with_(M, "--model", "{w}/noweights"), "holds no weights"),
    ("measure-model-nocfg", with_(M, "--model", "{w}/nocfg"), "holds no config.json"),
    ("measure-model-nolm", with_(M, "--model", "{w}/nolm"), "lacks 1 weight(s) the model needs: lm_head.weight"),
    ("sweep-model-missing", with_(S, "--model", "/nonexistent"), "--model='/nonexistent'"),
    ("sweep-model-typo", with_(S, "--model", "smolm2"), "Did you mean 'smollm2'?"),
    ("sweep-model-truncated", with_(S, "--model", "{w}/trunc"), "is truncated"),
    ("tune-model-missing", with_(T, "--model", "/nonexistent"), "--model='/nonexistent'"),
    ("tune-model-empty", with_(T, "--model", ""), "--model='' is empty"),
    ("tune-model-badcfg", with_(T, "--model", "{w}/badcfg"), "config.json is not valid JSON"),
    ("bake-model-missing", with_(B, "--model", "/nonexistent"), "--model='/nonexistent'"),
    ("bake-model-typo", with_(B, "--model", "smolm2"), "Did you mean 'smollm2'?"),
    ("bake-model-truncated", with_(B, "--model", "{w}/trunc"), "is truncated"),
    ("bake-model-nolm", with_(B, "--model", "{w}/nolm"), "lacks 1 weight(s)"),
    ("bake-model-baked", with_(B, "--model", "{w}/baked"), "is already baked ("),
    ("demo-model-typo", with_(D, "--model", "smolm2"), "Did you mean 'smollm2'?"),
    ("demo-model-empty", with_(D, "--model", ""), "--model='' is empty"),
    # --- --out: files, unwritable places, existing results (items 1, 6)
    ("measure-out-file", with_(M, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("measure-out-under-file", with_(M, "--out", "{w}/afile/sub"), "is a file, not a folder"),
    ("measure-out-proc", with_(M, "--out", "/proc/attntemp-out"), "--out='/proc/attntemp-out' is not writable"),
    ("measure-out-empty", with_(M, "--out", ""), "--out='' is not allowed"),
    ("measure-out-results", with_(M, "--out", "{w}/measured"), "already holds results (stats.json); pass --overwrite"),
    ("sweep-out-file", with_(S, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("sweep-out-proc", with_(S, "--out", "/proc/attntemp-out"), "is not writable"),
    ("sweep-out-random-db", with_(S, "--out", "{w}/rnd"), "sweep.db' is not a usable sweep database"),
    (
        "sweep-out-other-docs",
        with_(S, "--out", "{w}/settled"),
        "holds points made with --docs=4; this run has --docs=1",
    ),
    (
        "sweep-out-other-text",
        with_(S, "--out", "{w}/settled", "--docs", "4", "--text", "{w}/one.txt"),
        "holds points made with --text='stdlib'",
    ),
    ("sweep-out-locked", with_(S, "--out", "{w}/locked"), "is in use by another sweep"),
    ("advise-out-locked", with_(A, "--out", "{w}/locked"), "--out='{w}/locked' is in use by another advise (pid"),
    ("demo-out-locked", with_(D, "--out", "{w}/locked"), "--out='{w}/locked' is in use by another demo (pid"),
    ("tune-out-file", with_(T, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("tune-out-proc", with_(T, "--out", "/proc/attntemp-out"), "is not writable"),
    ("bake-out-file", with_(B, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("bake-out-proc", with_(B, "--out", "/proc/attntemp-out"), "is not writable"),
    ("bake-out-full", with_(B, "--out", "{w}/full"), "already holds results (keep.txt); pass --overwrite"),
    ("bake-out-dot", with_(B, "--out", ".", "--overwrite"), "--out='.' is the current folder or holds it"),
    ("bake-out-subdotdot", with_(B, "--out", "sub/..", "--overwrite"), "--out='sub/..' is the current folder"),
    ("bake-out-parent", with_(B, "--out", "..", "--overwrite"), "--out='..' is the current folder or holds it"),
    (
        "bake-out-holds-spec",
        with_(B, "--spec", "{w}/specdir/s.json", "--out", "{w}/specdir", "--overwrite"),
        "holds the spec file",
    ),
    ("calibrate-out-file", with_(C, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("calibrate-out-results", with_(C, "--out", "{w}/calibrated"), "already holds results (calibration.json)"),
    ("calibrate-out-proc", with_(C, "--out", "/proc/attntemp-out"), "is not writable"),
    ("demo-out-file", with_(D, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("demo-out-proc", with_(D, "--out", "/proc/attntemp-out"), "is not writable"),
    ("demo-out-spec", with_(D, "--out", "{w}/tuned"), "--out='{w}/tuned' already holds results (spec.json)"),
    # --- spec JSON (item 1, 7)
    *[
        (f"bake-spec-{name}", with_(B, "--spec", f"{{w}}/{name}.json"), text)
        for name, text in (
            ("s_layers", "layers=1.1 is not allowed; expected a list of numbers"),
            ("s_heads", "heads[0]=1.1 is not allowed"),
            ("s_sp", "schedule_params=[1, 2] is not allowed"),
            ("s_ragged", "heads has rows of [1, 2] values"),
            ("s_bool", "multiplier=True is not allowed; expected a finite number > 0, not a boolean"),
            ("s_str", "multiplier='1.2' is not allowed"),
            ("s_nofactor", "rope has no 'factor'"),
            ("s_ropestr", "rope='yarn' is not allowed; expected an object of named values"),
            ("s_unknown", "spec has unknown field(s) ['bogus']"),
            ("s_ropetype", "Did you mean 'yarn'?"),
            ("s_ropefactor", "rope.factor=0.5 is not allowed"),
            ("s_ropekey", "rope has unknown key(s) ['beta_fast'] for 'linear'"),
            ("s_schedule", "schedule='cosine' is not allowed"),
            ("s_sched_params", "schedule_params={'s': -1} for 'yarn'"),
            ("s_layers2", "layers has 2 values; the model has 4 layers"),
            ("s_nan", "multiplier=nan is not allowed"),
            ("s_format", "format='attntemp.BakedCheckpoint/1' is not allowed"),
            ("s_badjson", "spec is not valid JSON"),
            ("s_list", "spec JSON must be an object"),
            ("s_deep", "spec is not valid JSON"),
            ("missing", "no such file"),
        )
    ],
    ("bake-spec-folder", with_(B, "--spec", "{w}/empty"), "--spec='{w}/empty' is a folder"),
    ("bake-spec-baked-record", with_(B, "--spec", "{w}/baked/attntemp_spec.json"), "a baked checkpoint's record"),
    ("measure-spec-bool", with_(M, "--spec", "{w}/s_bool.json"), "--spec='{w}/s_bool.json': multiplier=True"),
    ("measure-spec-layers", with_(M, "--spec", "{w}/s_layers2.json"), "layers has 2 values; the model has 4"),
    ("measure-spec-missing", with_(M, "--spec", "{w}/missing.json"), "--spec='{w}/missing.json': no such file"),
    ("export-spec-ragged", ["export", "--spec", "{w}/s_ragged.json", "--engine", "vllm"], "heads has rows"),
    ("export-spec-nofactor", ["export", "--spec", "{w}/s_nofactor.json", "--engine", "vllm"], "rope has no 'factor'"),
    ("export-engine-typo", ["export", "--spec", "{w}/ok.json", "--engine", "vlm"], "Did you mean 'vllm'"),
    # --- sizes (item 2)
    (
        "sweep-length-huge",
        with_(S, "--lengths", "100000000", "--tasks", "passkey"),
        "--lengths[0]=100000000 is not allowed: a forward of",
    ),
    ("sweep-multipliers-runaway", with_(S, "--multipliers", "0.8:1.4:1e-9"), "6e+08 values; at most 1000"),
    ("bake-check-tokens-huge", with_(B, "--check-tokens", "1000000000"), "--check-tokens=1000000000 is not allowed"),
    ("calibrate-bins-huge", with_(C, "--bins", "1000000000"), "--bins=1000000000 is not allowed; expected at most"),
    ("measure-length-huge", with_(M, "--length", "100000000"), "--length=100000000 is not allowed: a forward of"),
    ("tune-length-huge", with_(T, "--length", "100000000"), "--length=100000000 is not allowed: a forward of"),
    ("measure-buckets-too-many", with_(M, "--buckets", "1000000000"), "--buckets=1000000000 is not allowed"),
    ("measure-recent-too-many", with_(M, "--recent-tokens", "1000"), "--recent-tokens=1000 is not allowed"),
    # --- late validation, now early (item 7)
    ("demo-trials-0", with_(D, "--trials", "0"), "--trials=0 is not allowed"),
    ("demo-docs-0", with_(D, "--docs", "0"), "--docs=0"),
    ("demo-length-negative", with_(D, "--length", "-5"), "--length=-5 is not allowed"),
    ("demo-engine-unknown", with_(D, "--engine", "tgi"), "--engine='tgi' is not allowed"),
    ("demo-race-windows-1", with_(D, "--race-windows", "1"), "--race-windows=1 is not allowed"),
    # --- advise: every flag refused before the model loads
    ("advise-engine-unknown", with_(A, "--engine", "tgi"), "--engine='tgi' is not allowed"),
    ("advise-length-0", with_(A, "--length", "0"), "--length=0 is not allowed"),
    ("advise-length-text", with_(A, "--length", "long"), "--length 'long': expected an integer"),
    ("advise-length-too-short", with_(A, "--length", "64"), "--length=64 is too short for key_tokens"),
    ("advise-length-memory", with_(A, "--length", "100000000"), "--length=100000000"),
    ("advise-objective", with_(A, "--objective", "accuracy"), "--objective='accuracy' is not allowed"),
    ("advise-budget-0", with_(A, "--budget", "0"), "--budget=0 is not allowed"),
    ("advise-max-short-cost", with_(A, "--max-short-cost", "1.5"), "--max-short-cost=1.5 is not allowed"),
    ("advise-max-short-cost-nan", with_(A, "--max-short-cost", "nan"), "--max-short-cost=nan is not allowed"),
    ("advise-block-0", with_(A, "--block", "0"), "--block=0 is not allowed"),
    ("advise-race-windows-1", with_(A, "--race-windows", "1"), "--race-windows=1 is not allowed"),
    ("advise-check-lengths-short", with_(A, "--check-lengths", "256"), "--check-lengths[0]=256 is not allowed"),
    (
        "advise-check-lengths-text",
        with_(A, "--check-lengths", "long"),
        "--check-lengths 'long': expected comma-separated",
    ),
    ("advise-heldout-empty", with_(A, "--heldout-text", ""), "--heldout-text='' is not allowed"),
    ("advise-heldout-missing", with_(A, "--heldout-text", "/nonexistent"), "--heldout-text"),
    ("advise-text-missing", with_(A, "--text", "/nonexistent"), "--text"),
    ("advise-out-file", with_(A, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("advise-out-results", with_(A, "--out", "{w}/tuned"), "already holds results (spec.json)"),
    ("advise-model-typo", with_(A, "--model", "smolm2"), "Did you mean 'smollm2'?"),
    ("advise-status-no-store", with_(A, "--status"), "--out='{w}/a_out' has no scores.db"),
    ("advise-learn-steps-negative", with_(A, "--learn-steps", "-1"), "--learn-steps=-1 is not allowed"),
    ("advise-learn-steps-text", with_(A, "--learn-steps", "ten"), "--learn-steps 'ten': expected an integer"),
    ("advise-learn-steps-huge", with_(A, "--learn-steps", "99999"), "--learn-steps=99999 is not allowed"),
    ("advise-add-spec-missing", with_(A, "--add-spec", "/nonexistent.json"), "--add-spec='/nonexistent.json'"),
    ("advise-add-spec-folder", with_(A, "--add-spec", "{w}/empty"), "--add-spec='{w}/empty' is a folder"),
    ("advise-add-spec-bad-json", with_(A, "--add-spec", "{w}/s_badjson.json"), "--add-spec='{w}/s_badjson.json'"),
    ("advise-add-spec-layers", with_(A, "--add-spec", "{w}/s_layers2.json"), "--add-spec='{w}/s_layers2.json'"),
    ("advise-add-spec-other-l0", with_(A, "--add-spec", "{w}/s_yarn_l0_1024.json"), "states a trained length of 1024"),
    ("advise-add-spec-twice", with_(A, "--add-spec", "{w}/s_logn.json,{w}/s_logn.json"), "a file is given twice"),
    (
        "advise-shared-prefill-objective",
        with_(A, "--shared-prefill", "--objective", "needles"),
        "--shared-prefill is not allowed with --objective='needles': it shares key_tokens only",
    ),
    (
        "advise-shared-prefill-passkeys",
        with_(A, "--shared-prefill", "--retrieval-keys", "1"),
        "--shared-prefill is not allowed with --retrieval-keys=1",
    ),
    (
        "advise-shared-prefill-no-retrieval",
        with_(A, "--shared-prefill", "--retrieval-per-window", "0"),
        "--shared-prefill is not allowed with --retrieval-per-window=0",
    ),
    (
        "advise-shared-prefill-evaluator",
        with_(A, "--shared-prefill", "--key-evaluator", "tiny"),
        "--shared-prefill is not allowed with --key-evaluator='tiny'",
    ),
    (
        "advise-shared-prefill-within-l0",
        with_(A, "--shared-prefill", "--length", "256"),
        "--shared-prefill is not allowed at --length=256: within the trained length 256",
    ),
    ("tune-length-2", with_(T, "--length", "2"), "--length=2 is too short for perplexity"),
    ("tune-length-passkey", with_(T, "--length", "100"), "--length=100 is too short for passkey"),
    ("tune-check-length-short", with_(T, "--check-lengths", "40"), "--check-lengths[0]=40 is too short for passkey"),
    ("tune-lengths-short", with_(T, "--method", "gradient", "--lengths", "4"), "--lengths[0]=4 is too short"),
    ("tune-objective-head", with_(T, "--granularity", "head"), "use --objective='entropy'"),
    ("tune-objective-typo", with_(T, "--objective", "perplx"), "--objective='perplx' is not allowed"),
    ("tune-method-typo", with_(T, "--method", "grad"), "--method='grad' is not allowed"),
    ("tune-lengths-no-gradient", with_(T, "--lengths", "512"), "(--method gradient)"),
    ("tune-bracket", with_(T, "--bracket", "2,1"), "--bracket=2,1 is not allowed"),
    ("tune-grid", with_(T, "--grid", "2"), "--grid=2"),
    ("tune-steps", with_(T, "--steps", "0"), "--steps=0"),
    ("tune-schedule-typo", with_(T, "--method", "gradient", "--schedule", "log_lenght"), "--schedule='log_lenght'"),
    ("tune-rope-factors-typo", with_(T, "--method", "gradient", "--rope-factors", "lern"), "Did you mean 'learn'"),
    ("tune-rope-factors-search", with_(T, "--rope-factors", "learn"), "learned by gradient tuning; add --method"),
    (
        "tune-rope-factors-dynamic",
        with_(T, "--method", "gradient", "--rope-factors", "learn", "--rope", "dynamic"),
        "--rope='dynamic' with --rope-factors='learn' is not allowed",
    ),
    ("tune-rope-temperature-alone", with_(T, "--rope-temperature", "none"), "add --rope-factors='learn'"),
    (
        "tune-rope-factors-within-l0",
        with_(T, "--method", "gradient", "--rope-factors", "learn", "--length", "200"),
        "--length=200 with --rope-factors='learn' is not allowed",
    ),
    (
        "tune-rope-temperature-schedule",
        with_(
            T,
            "--method",
            "gradient",
            "--rope-factors",
            "learn",
            "--rope-temperature",
            "none",
            "--schedule",
            "log_length",
        ),
        "with --rope-temperature='none' none is learned",
    ),
    ("tune-target-typo", with_(T, "--objective", "entropy", "--target", "entropi"), "Did you mean 'entropy'"),
    ("tune-length-text", with_(T, "--length", "abc"), "--length 'abc': expected an integer"),
    (
        "sweep-lengths-5-passkey",
        with_(S, "--lengths", "5", "--tasks", "passkey"),
        "--lengths[0]=5 is too short for passkey",
    ),
    ("sweep-lengths-1", with_(S, "--lengths", "1"), "--lengths[0]=1 is too short for perplexity"),
    (
        "sweep-lengths-needle",
        with_(S, "--lengths", "40", "--tasks", "needle"),
        "--lengths[0]=40 is too short for needle",
    ),
    ("sweep-lengths-0", with_(S, "--lengths", "0"), "--lengths[0]=0"),
    ("sweep-lengths-text", with_(S, "--lengths", "1,b"), "--lengths '1,b'"),
    ("sweep-lengths-empty", with_(S, "--lengths", ","), "lengths is empty"),
    ("sweep-tasks-empty", with_(S, "--tasks", ","), "tasks is empty"),
    ("tune-tasks-empty", with_(T, "--tasks", ","), "tasks is empty"),
    ("sweep-multipliers-reversed", with_(S, "--multipliers", "1:0.5:0.1"), "LO:HI:STEP"),
    ("sweep-multipliers-zero", with_(S, "--multipliers", "0,1"), "--multipliers[0]=0"),
    ("sweep-multipliers-nan", with_(S, "--multipliers", "nan"), "--multipliers[0]=nan"),
    ("sweep-multipliers-inf", with_(S, "--multipliers", "1,inf"), "=inf is not allowed"),
    ("sweep-multipliers-empty", with_(S, "--multipliers", ","), "multipliers is empty"),
    ("sweep-multipliers-collide", with_(S, "--multipliers", "1.0000001,1.0000002"), "same to 6 significant digits"),
    ("sweep-rope-typo", with_(S, "--rope", "yarm"), "Did you mean 'yarn'"),
    ("sweep-tasks-typo", with_(S, "--tasks", "pasky"), "--tasks[0]='pasky'"),
    ("sweep-docs-0", with_(S, "--docs", "0"), "--docs=0"),
    ("sweep-trials-0", with_(S, "--trials", "0"), "--trials=0"),
    ("sweep-batch-size-0", with_(S, "--batch-size", "0"), "--batch-size=0"),
    ("sweep-seed-text", with_(S, "--seed", "x"), "--seed 'x'"),
    ("sweep-trained-length-0", with_(S, "--trained-length", "0"), "--trained-length=0"),
    ("bake-check-tokens-0", with_(B, "--check-tokens", "0"), "--check-tokens=0"),
    ("measure-length-0", with_(M, "--length", "0"), "--length=0"),
    ("measure-length-negative", with_(M, "--length", "-5"), "--length=-5"),
    ("measure-length-float", with_(M, "--length", "1e9"), "--length '1e9'"),
    ("measure-docs-0", with_(M, "--docs", "0"), "--docs=0"),
    ("measure-sink-0", with_(M, "--sink-tokens", "0"), "--sink-tokens=0"),
    ("measure-text-missing", with_(M, "--text", "{w}/nope"), "--text='{w}/nope' is not allowed"),
    ("sweep-text-missing", with_(S, "--text", "{w}/nope"), "--text='{w}/nope' is not allowed"),
    ("tune-text-empty-dir", with_(T, "--text", "{w}/empty"), "--text='{w}/empty' holds no"),
    ("tune-heldout-missing", with_(T, "--heldout-text", "{w}/nope"), "--heldout-text='{w}/nope' is not allowed"),
    (
        "tune-heldout-package",
        with_(T, "--heldout-text", "package:no_such_pkg_xyz"),
        "--heldout-text='package:no_such_pkg_xyz' is not allowed; no installed package",
    ),
    ("tune-heldout-same", with_(T, "--heldout-text", "stdlib"), "--heldout-text='stdlib' is --text itself"),
    # --- report (items 1, 4)
    ("report-random-db", ["report", "{w}/rnd"], "sweep.db' is not a usable sweep database: file is not a database"),
    ("report-foreign-db", ["report", "{w}/foreign"], "is not a usable sweep database: no such table"),
    ("report-missing", ["report", "{w}/nope"], "does not exist"),
    ("report-file", ["report", "{w}/afile"], "is a file; expected a folder"),
    ("report-empty", ["report", "{w}/empty"], "holds no sweep.db and no evidence.md"),
    # --- issue 25: lost data, machine-sized flags, the flag the user typed
    ("tune-out-results", with_(T, "--out", "{w}/tuned"), "already holds results (spec.json); pass --overwrite"),
    ("sweep-out-other-weights", with_(S, "--out", "{w}/reweighted"), "holds points made with model_weights='0000"),
    ("tune-check-lengths-5", with_(T, "--check-lengths", "5"), "--check-lengths[0]=5 is not allowed: a held-out"),
    ("tune-check-lengths-second", with_(T, "--check-lengths", "512,20"), "--check-lengths[1]=20 is not allowed"),
    ("tune-check-lengths-passkey", with_(T, "--check-lengths", "512,100"), "--check-lengths[1]=100 is too short"),
    ("sweep-multipliers-denormal", with_(S, "--multipliers", "1e-320"), "--multipliers[0]=1e-320 is not allowed"),
    ("sweep-multipliers-huge", with_(S, "--multipliers", "1,5000"), "expected a number in [0.001, 1000]"),
    ("sweep-multipliers-range-tiny", with_(S, "--multipliers", "0:0.002:0.001"), "--multipliers[0]=0"),
    ("sweep-workers-huge", with_(S, "--workers", "1000000"), "--workers=1000000 is not allowed; expected at most"),
    ("sweep-ray-address-empty", with_(S, "--ray-address", ""), "--ray-address='' is not allowed"),
    ("sweep-ray-address-port", with_(S, "--ray-address", "127.0.0.1"), "expected auto, HOST:PORT or ray://HOST:PORT"),
    ("sweep-ray-address-closed", with_(S, "--ray-address", "127.0.0.1:1"), "could not be reached within 5 s"),
    ("measure-threads-huge", with_(M, "--threads", "100000"), "--threads '100000': expected at most"),
    ("sweep-threads-huge", with_(S, "--threads", "100000"), "--threads '100000': expected at most"),
    ("bake-threads-huge", with_(B, "--threads", "100000"), "--threads '100000': expected at most"),
    ("generate-threads-huge", with_(G, "--threads", "100000"), "--threads '100000': expected at most"),
    ("measure-docs-over-text", with_(M, "--docs", "500", "--text", "{w}/one.txt"), "--docs=500 windows of 64 tokens"),
    ("sweep-docs-over-text", with_(S, "--docs", "500", "--text", "{w}/one.txt"), "--docs=500 windows of 64 tokens"),
    ("calibrate-logits-objects", with_(C, "--logits", "{w}/objects.npz"), "an array holds Python objects"),
    ("calibrate-logits-one-class", with_(C, "--logits", "{w}/oneclass.npz"), "has one class; temperature scaling"),
    ("calibrate-logits-flat", with_(C, "--logits", "{w}/flat.npz"), "expected [N, C] or [B, L, V]"),
    (
        "generate-reference-binary",
        with_(G, "--monitor", "--reference", "{w}/l.npz"),
        "--reference='{w}/l.npz' is not a reference profile: not UTF-8",
    ),
    # --- calibrate
    ("calibrate-bins-0", with_(C, "--bins", "0"), "--bins=0"),
    ("calibrate-logits-missing", with_(C, "--logits", "{w}/nope.npz"), "no such file"),
    ("calibrate-logits-text", with_(C, "--logits", "{w}/afile"), "not a readable .npz file"),
    ("calibrate-logits-nolabels", with_(C, "--logits", "{w}/nolabels.npz"), "missing array(s) ['labels']"),
    ("calibrate-ignore-index", with_(C, "--ignore-index", "x"), "--ignore-index 'x'"),
    # --- generate
    (
        "generate-prompt-missing",
        with_(G, "--prompt-file", "{w}/nope.txt"),
        "--prompt-file='{w}/nope.txt' is not allowed",
    ),
    ("generate-prompt-empty", with_(G, "--prompt-file", "{w}/empty.txt"), "--prompt-file='{w}/empty.txt' is empty"),
    ("generate-prompt-binary", with_(G, "--prompt-file", "{w}/l.npz"), "is not UTF-8 text"),
    ("generate-new-0", with_(G, "--max-new-tokens", "0"), "--max-new-tokens=0 is not allowed"),
    ("generate-new-huge", with_(G, "--max-new-tokens", "100000000"), "--max-new-tokens=100000000 is not allowed"),
    ("generate-every-0", with_(G, "--monitor", "--every", "0"), "--every=0 is not allowed"),
    ("generate-quantile", with_(G, "--monitor", "--quantile", "1.5"), "--quantile=1.5 is not allowed"),
    ("generate-stop-on", with_(G, "--monitor", "--stop-on", "bogus"), "--stop-on[0]='bogus' is not allowed"),
    ("generate-reference-missing", with_(G, "--reference", "{w}/nope.json"), "--reference='{w}/nope.json'"),
    ("generate-reference-bad", with_(G, "--monitor", "--reference", "{w}/ok.json"), "is not a reference profile"),
    ("generate-reference-text", with_(G, "--monitor", "--reference-text", "{w}/nope"), "--reference-text='{w}/nope'"),
    ("generate-spec-layers", with_(G, "--spec", "{w}/s_layers.json"), "layers=1.1 is not allowed"),
    ("generate-out-file", with_(G, "--out", "{w}/afile"), "--out='{w}/afile' exists and is a file"),
    ("generate-model-missing", with_(G, "--model", "/nonexistent"), "--model='/nonexistent' is no such folder"),
    ("generate-dtype", with_(G, "--dtype", "float8"), "--dtype 'float8'"),
    # --- eval (lm-evaluation-harness)
    ("eval-tasks-empty", with_(E, "--tasks", ""), "--tasks='' is not allowed"),
    ("eval-limit-0", with_(E, "--limit", "0"), "--limit=0 is not allowed"),
    ("eval-batch-0", with_(E, "--batch-size", "0"), "--batch-size=0 is not allowed"),
    ("eval-bootstrap-neg", with_(E, "--bootstrap-iters", "-1"), "--bootstrap-iters=-1 is not allowed"),
    (
        "eval-length-over-max",
        with_(E, "--lengths", "9000"),
        "--lengths[0]=9000 is not allowed; expected <= --max-length",
    ),
    ("eval-length-short", with_(E, "--lengths", "5"), "--lengths[0]=5 is too short for passkey"),
    ("eval-include-missing", with_(E, "--include-path", "{w}/nope"), "--include-path '{w}/nope' is not a folder"),
    ("eval-spec-missing", with_(E, "--spec", "{w}/nope.json"), "--spec='{w}/nope.json': no such file"),
    ("eval-out-results", with_(E, "--out", "{w}/evaluated"), "--out='{w}/evaluated' already holds results (comp"),
    ("eval-metadata-json", with_(E, "--metadata", "{max_seq_lengths: 1}"), "--metadata='{max_seq_lengths: 1}' is not"),
    ("eval-metadata-list", with_(E, "--metadata", "[512]"), "expected a JSON object"),
    ("eval-metadata-lengths", with_(E, "--metadata", '{"max_seq_lengths":[0]}'), "max_seq_lengths[0]=0 is not a"),
    ("eval-metadata-lengths-int", with_(E, "--metadata", '{"max_seq_lengths":512}'), "max_seq_lengths=512 is not a"),
    (
        "eval-metadata-over-max",
        with_(E, "--metadata", '{"max_seq_lengths":[8192]}'),
        "--metadata max_seq_lengths[0]=8192 is not allowed; expected <= --max-length=4096",
    ),
    # --- verify (the engines)
    ("verify-engine", with_(V, "--engine", "tgi"), "--engine='tgi' is not allowed"),
    ("verify-length-0", with_(V, "--length", "0"), "--length=0 is not allowed"),
    ("verify-length-huge", with_(V, "--length", "100000000"), "--length=100000000 is not allowed"),
    ("verify-chunks-0", with_(V, "--chunks", "0"), "--chunks=0 is not allowed"),
    ("verify-dtype", with_(V, "--dtype", "bfloat16"), "verify compares float32 models"),
    ("verify-spec-layers", with_(V, "--spec", "{w}/s_layers.json"), "layers=1.1 is not allowed"),
    ("verify-work-dir-users", with_(V, "--work-dir", "{w}/full"), "--work-dir='{w}/full' holds files verify did not"),
    ("verify-work-dir-file", with_(V, "--work-dir", "{w}/afile"), "--work-dir='{w}/afile' is a file"),
    ("verify-no-llamacpp", V, "llama-perplexity not found in --engine-dir='{w}/empty'"),
    ("verify-no-vllm", with_(V, "--engine", "vllm"), "no vLLM venv in --engine-dir='{w}/empty'"),
    # --- argparse's own errors, as one line too
    (
        "measure-model-no-value",
        ["measure", "--out", "x", "--length", "64", "--model"],
        "argument --model: expected one",
    ),
    ("measure-out-required", ["measure", "--length", "64"], "the following arguments are required: --out"),
    ("sweep-unknown-flag", [*S, "--bogus"], "unrecognized arguments: --bogus"),
    ("tables-unknown-flag", ["tables", "--bogus"], "unrecognized arguments: --bogus"),
    ("command-typo", ["measur"], "invalid choice: 'measur'"),
    ("completion-shell", ["completion", "fish"], "argument shell: invalid choice: 'fish'"),
    ("completion-no-shell", ["completion"], "the following arguments are required: shell"),
    ("bake-spec-required", ["bake", "--out", "x"], "the following arguments are required: --spec"),
    # --- audit (a model's config.json against the engines)
    ("audit-config-missing", ["audit", "--config", "{w}/nope.json"], "--config='{w}/nope.json': no such file"),
    ("audit-config-folder", ["audit", "--config", "{w}/empty"], "--config='{w}/empty' is a folder"),
    ("audit-config-badjson", ["audit", "--config", "{w}/s_badjson.json"], "is not valid JSON"),
    ("audit-config-deep", ["audit", "--config", "{w}/s_deep.json"], "is not valid JSON"),
    ("audit-config-list", ["audit", "--config", "{w}/s_list.json"], "a config JSON must be an object, not list"),
    ("audit-config-spec", ["audit", "--config", "{w}/ok.json"], "has no model_type"),
    ("audit-config-arch", ["audit", "--config", "{w}/c_unknown_arch.json"], "config.model_type='qwen33' is not"),
    ("audit-config-factor", ["audit", "--config", "{w}/c_bad_factor.json"], "config.rope_scaling.factor=0.5 is not"),
    ("audit-config-rope-type", ["audit", "--config", "{w}/c_bad_rope.json"], "Did you mean 'yarn'?"),
    (
        "audit-engine-typo",
        ["audit", "--config", "{w}/c_bad_factor.json", "--engines", "transformers,vlm"],
        "--engines[1]='vlm' is not allowed",
    ),
    ("audit-engines-empty", ["audit", "--config", "{w}/ok.json", "--engines", ","], "--engines='' is not allowed"),
    ("audit-positions-negative", ["audit", "--config", "{w}/ok.json", "--positions", "-1"], "--positions[0]=-1"),
    ("audit-positions-text", ["audit", "--config", "{w}/ok.json", "--positions", "a"], "--positions 'a'"),
    ("audit-tolerance", ["audit", "--config", "{w}/ok.json", "--tolerance", "2"], "--tolerance=2.0 is not allowed"),
    ("audit-threads-0", ["audit", "--config", "{w}/ok.json", "--threads", "0"], "--threads=0 is not allowed"),
    ("audit-config-required", ["audit", "--json"], "--config is missing; give a model's config.json or a shipped"),
    ("sweep-key-ngram-0", with_(S, "--tasks", "key_tokens", "--key-ngram", "0"), "--key-ngram=0 is not allowed"),
    ("sweep-key-ngram-huge", with_(S, "--tasks", "key_tokens", "--key-ngram", "100"), "expected an integer in [1, 64]"),
    ("sweep-key-distance-0", with_(S, "--tasks", "key_tokens", "--key-distance", "0"), "--key-distance=0 is not"),
    (
        "sweep-key-distance-long",
        with_(S, "--tasks", "key_tokens"),
        "--lengths[0]=64 is too short for key_tokens (its n-gram of --key-ngram=8 tokens last occurred more than "
        "--key-distance=128 back)",
    ),
    ("sweep-key-alpha-nan", with_(S, "--tasks", "key_tokens", "--key-alpha", "nan"), "--key-alpha=nan is not allowed"),
    ("sweep-key-beta-text", with_(S, "--tasks", "key_tokens", "--key-beta", "x"), "--key-beta 'x': expected a number"),
    (
        "sweep-key-evaluator-missing",
        with_(S, "--lengths", "512", "--tasks", "key_tokens", "--key-evaluator", "/nonexistent"),
        "--key-evaluator='/nonexistent' is no such folder",
    ),
    ("sweep-key-evaluator-empty", with_(S, "--tasks", "key_tokens", "--key-evaluator", ""), "--key-evaluator='' is"),
    ("sweep-needles-0", with_(S, "--tasks", "needles", "--needles-per-forward", "0"), "--needles-per-forward=0 is"),
    ("sweep-needles-65", with_(S, "--tasks", "needles", "--needles-per-forward", "65"), "in [1, 64]"),
    (
        "sweep-needles-too-many",
        with_(S, "--lengths", "512", "--tasks", "needles", "--needles-per-forward", "60"),
        "--lengths[0]=512 is too short for needles with --needles-per-forward=60",
    ),
    (
        "tune-key-evaluator-missing",
        with_(T, "--objective", "key_tokens", "--key-evaluator", "/nonexistent"),
        "--key-evaluator='/nonexistent' is no such folder",
    ),
    (
        "tune-needles-too-many",
        with_(T, "--objective", "needles", "--method", "gradient", "--needles-per-forward", "60"),
        "--length=400 is too short for needles with --needles-per-forward=60",
    ),
    *ISSUE_32,
    *ISSUE_54,
    *MODEL_FOLDERS,
    *ISSUE_54_REST,
    *ISSUE_62,
]

PROGRESS = ("%|", "it/s]", "s/it]")


def error_lines(err: str) -> list[str]:
    """The stderr lines that are not progress-bar output (tqdm redraws with carriage returns)."""
    lines = [part.strip() for line in err.splitlines() for part in line.split("\r")]
    return [line for line in lines if line and not any(p in line for p in PROGRESS)]


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != LOCK_FILE}


def run_main(argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, error_lines(capsys.readouterr().err)


@pytest.mark.parametrize("name, argv, expected", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line_naming_the_flag_and_exit_2(ws, name, argv, expected, capsys, monkeypatch, held_lock):
    monkeypatch.chdir(ws)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [a.replace("{w}", str(ws)) for a in argv]
    before = listing(ws)
    if any("~" in a for a in argv):  # a ~ no shell expanded (--out=~/x): the workspace is home
        monkeypatch.setenv("HOME", str(ws))
    for var, value in ENV.get(name, {}).items():
        monkeypatch.setenv(var, value.replace("{w}", str(ws)))
    if name == "audit-no-engine-runs":  # the same on a machine with vLLM installed (scripts/build_vllm_cpu.sh)
        monkeypatch.setattr("attntemp.ship.engines.vllm.unavailable", lambda: "vLLM is not installed (this test)")
    if name.endswith("-locked"):  # another run of the command is writing there
        lock = ws / LOCKS.get(argv[0], f"locked/{LOCK_NAME}")
        with held_lock(lock):  # another process: this one's own lock it would take again
            code, err = run_main(argv, capsys)
    else:
        code, err = run_main(argv, capsys)
    top_level = expected.startswith(("invalid choice", "unrecognized arguments"))  # the main parser's
    command = None if top_level else argv[0]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"attntemp {command}: error:" if command else "attntemp: error:"), err
    assert expected.replace("{w}", str(ws)) in err[0], err[0]
    assert "Traceback" not in err[0]
    assert listing(ws) == before  # nothing written: no empty folder, no empty sweep.db, no staging folder


def test_the_table_covers_every_command_and_is_large():
    commands = {argv[0] for _, argv, _ in CASES}
    from attntemp.cli import COMMANDS

    assert set(COMMANDS) <= commands
    assert len(CASES) >= 100 and len({c[0] for c in CASES}) == len(CASES)


def test_a_mistyped_model_fails_fast_without_hub_retries(capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.perf_counter()
    code, err = run_main(["measure", "--model", "smolm2", "--out", "x", "--length", "64"], capsys)
    assert code == 2 and "Did you mean 'smollm2'?" in err[0] and time.perf_counter() - t0 < 5


def test_the_error_line_is_not_glued_to_a_progress_bar(tmp_path, capsys, monkeypatch):
    """A failure while a sweep's bar is drawn: the bar's line is ended before the error."""
    import attntemp.evaluate.tasks as tasks

    def fail(self, model, tok, length, multipliers, ctx):
        raise ValueError("n_docs=1 is what broke here")

    monkeypatch.setattr(tasks.Perplexity, "evaluate", fail)
    code = main(["sweep", "--lengths", "64,80", "--multipliers", "1", "--docs", "1", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert code == 2 and lines == ["attntemp sweep: error: --docs=1 is what broke here"], err
    assert "\nattntemp sweep: error:" in err  # on a line of its own
    assert not (tmp_path / "s").exists()  # the failed sweep left no folder and no empty sweep.db


# ----------------------------------------------------------------------------- in another process
OTHER_PROCESS = r"""
import json, os, resource, sys, contextlib, io
from attntemp.cli import main
import transformers, attntemp.evaluate.sweep.run, attntemp.analysis.run, attntemp.ship.bake_runner
import attntemp.commands.calibrate, attntemp.commands.report
cases = json.loads(sys.argv[1])
if cases.pop("limit_as"):
    from attntemp.utils.resources import _meminfo
    used = _meminfo("VmSize", "/proc/self/status")
    resource.setrlimit(resource.RLIMIT_AS, (used + 2 * 2**30, resource.RLIM_INFINITY))
out = {}
for name, argv in cases.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    out[name] = [code, err.getvalue()]
print(json.dumps(out))
"""


def _read_only_command(folder: Path, argv: list[str]) -> list[str] | None:
    """``argv`` run where ``folder`` cannot be written: root (whom permissions do not stop) gets a
    private mount namespace with ``folder`` bind-mounted read-only (nothing outside sees it);
    anyone else a chmod. None when neither is possible here."""
    if os.geteuid() != 0:
        for p in [*sorted(folder.rglob("*"), reverse=True), folder]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        return argv
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    d = shlex.quote(str(folder))
    script = f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && exec " + " ".join(map(shlex.quote, argv))
    return [unshare, "-m", "--propagation", "private", "sh", "-c", script]


def test_read_only_folders_and_a_memory_limit_in_another_process(tmp_path):
    """With ``out`` on a folder nobody may write (read-only) and RLIMIT_AS = what is mapped + 2 GiB:
    refusals, one line each, before any allocation; the memory check reads the limit."""
    ro = tmp_path / "ro"
    (ro / "sweep").mkdir(parents=True)
    Store(ro / "sweep" / "sweep.db").close()
    np.savez(tmp_path / "l.npz", logits=np.zeros((8, 3)), labels=np.zeros(8, dtype=int))
    (tmp_path / "s.json").write_text('{"multiplier": 1.2}')
    (tmp_path / "home").mkdir()
    cases = {
        "sweep": ["sweep", "--lengths", "64", "--docs", "1", "--out", str(ro / "sweep")],
        "measure": ["measure", "--length", "64", "--out", str(ro / "m")],
        "report": ["report", str(ro / "sweep")],
        "calibrate": ["calibrate", "--logits", str(tmp_path / "l.npz"), "--out", str(ro / "c")],
        "sweep-memory": ["sweep", "--lengths", "60000", "--docs", "1", "--out", str(tmp_path / "home" / "s")],
        "bake-memory": [
            "bake",
            "--spec",
            str(tmp_path / "s.json"),
            "--out",
            str(tmp_path / "home" / "b"),
            "--check-tokens",
            "200000",
        ],
    }
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1", "MPLCONFIGDIR": str(home)}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = _read_only_command(ro, [sys.executable, "-c", OTHER_PROCESS, json.dumps({**cases, "limit_as": True})])
    if cmd is None:
        pytest.skip("no way to make a folder read-only for root here (unshare -m refused)")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=home, timeout=300)
    finally:
        for p in [ro, *ro.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (code, err) in got.items():
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"attntemp {name.split('-')[0]}: error:"), err
        if name.endswith("memory"):
            assert "needs about" in lines[0] and "GiB is available" in lines[0], lines[0]
            left = float(lines[0].split(", and ")[1].split(" GiB")[0])
            assert left < 2.5  # the address-space limit, not the machine's free memory
        elif name == "report":
            assert "is not writable" in lines[0], lines[0]
        else:
            assert "--out=" in lines[0] and "is not writable" in lines[0], lines[0]
    assert sorted(p.name for p in ro.rglob("*")) == ["sweep", "sweep.db"]  # nothing written
