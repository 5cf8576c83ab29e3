"""The shipped tiny model (assets/tiny): it loads, retrieves keys and scores what its card says."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from attntemp.assets import tiny_path
from attntemp.evaluate import corpus, lm, model_card, needles

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: a tiny model gains little from two, and loses much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def figures() -> dict:
    return json.loads((tiny_path() / "eval.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(tiny_path())


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(tiny_path()).eval()


def test_tiny_path_is_the_package_asset():
    assert tiny_path() == ROOT / "src" / "attntemp" / "assets" / "tiny"
    names = {p.name for p in tiny_path().iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= names
    assert sum(p.stat().st_size for p in tiny_path().iterdir()) < 20 * 2**20


def test_shipped_run_is_a_real_run(figures):
    assert not figures["smoke"] and figures["passkey_trials"] == 100
    assert figures["heldout_windows"] == 32 and figures["steps"] >= 500


TEXTS = ["def f(x):\n\treturn x  # ok\n", "héllo wörld ✓ 日本語", " a\x00b "]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_is_exact_bytes(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tokenizer.decode(ids) == text
    assert tokenizer.convert_tokens_to_ids(["<bos>", "<eos>"]) == [256, 257]


def test_config_matches_card(model, figures):
    cfg = model.config
    assert cfg.model_type == "llama" and cfg.max_position_embeddings == figures["context"]
    assert cfg.rope_parameters["rope_theta"] == 10000.0
    assert sum(p.numel() for p in model.parameters()) == figures["params"]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    card = (tiny_path() / "README.md").read_text(encoding="utf-8")
    assert f"{figures['params']:,}-parameter" in card and str(figures["heldout_ppl"]) in card


def test_reload_gives_recorded_logits(model, tokenizer, figures):
    got = torch.tensor(model_card.reference_logits(model, tokenizer, figures["reference_text"]))
    torch.testing.assert_close(got, torch.tensor(figures["reference_logits"]), atol=1e-5, rtol=0)


def test_passkey_at_trained_length(model, tokenizer, figures):
    ctx = figures["context"]
    acc = model_card.passkey_accuracy(model, tokenizer, ctx, 100, seed=figures["passkey_seed"])
    assert acc >= 0.9
    assert acc == pytest.approx(figures["passkey_accuracy"], abs=0.02)


def test_heldout_perplexity_matches_card(model, tokenizer, figures):
    windows = corpus.heldout_windows(tokenizer, figures["context"], figures["heldout_windows"])
    if corpus.windows_digest(windows) != figures["heldout_digest"]:
        pytest.skip(f"this Python's stdlib differs from the one of the card ({figures['python']})")
    ppl = lm.perplexity(model, windows)
    assert ppl == pytest.approx(figures["heldout_ppl"], rel=0.02)


def test_perplexity_counts_only_the_tail(model):
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))  # [2, 40]
    logp = torch.log_softmax(model(input_ids=ids).logits.double(), -1)  # [2, 40, V]
    nll = -logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]  # [2, 39]
    assert lm.perplexity(model, ids) == pytest.approx(nll.mean().exp().item(), rel=1e-5)
    tail = nll[:, 29:].mean().exp().item()
    assert lm.perplexity(model, ids, start=29) == pytest.approx(tail, rel=1e-5)
    with pytest.raises(ValueError, match="start=39"):
        lm.perplexity(model, ids, start=39)


def test_first_integer():
    assert lm.first_integer(" 4213. Rem") == 4213
    assert lm.first_integer(" key 07 is 9") == 7
    assert lm.first_integer("no digits") is None


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_tiny", ROOT / "scripts" / "train_tiny.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_tiny"] = module  # its config dataclass needs its module registered
    spec.loader.exec_module(module)
    return module


def test_training_rows(script, tokenizer):
    rows = script.passkey_rows(tokenizer, 256, seed=0)
    for _ in range(5):
        ids, labels, answer = next(rows)  # [256] each
        prompt = tokenizer.decode(ids[: int(answer.nonzero()[0])])
        key = int(tokenizer.decode(ids[answer], skip_special_tokens=True).strip(" ."))
        assert prompt.endswith(needles.QUESTION) and needles.KEY_LINE.format(key=key) in prompt
        assert int(labels[answer][-1]) == script.EOS_ID and (labels[~answer] != script.IGNORE).any()
    gen = torch.Generator().manual_seed(0)
    row = bytes(script.copy_row(gen, 200, 16).tolist()).decode()
    first, second = row.split("\n")[:2]
    assert first == second and 4 <= len(first) <= 16 and len(row) == 200


def test_train_script_smoke(tmp_path, script):
    assert script.main(["--out", str(tmp_path), "--smoke", "--threads", "1"]) == 0
    written = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= written
    assert {"tokenizer_config.json", "README.md", "eval.json"} <= written
    result = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    assert result["smoke"] and result["steps"] == result["copy_steps"] + result["steps_arg"] == 5
    assert len(result["reference_logits"]) == 4
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.config.max_position_embeddings == result["context"]
