"""The real SmolLM2-135M scored with the blocked attention kernel against SDPA (slow): key-token
perplexity within 1% at 4096 tokens in bfloat16 and float32, a temperature and YaRN applied.
Needs the model in ``$ATTNTEMP_CACHE`` (converted once); ATTNTEMP_OFFLINE=1 skips it."""

import math
import os

import pytest
import torch

from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.key_tokens import key_positions
from attntemp.evaluate.lm import head_nll
from attntemp.hf.loading import load_model
from attntemp.hf.patch import patch
from attntemp.hf.probes import kernel as kernel_probe
from attntemp.ops.spec import TemperatureSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("ATTNTEMP_OFFLINE") == "1", reason="ATTNTEMP_OFFLINE=1"),
]
LENGTH, DISTANCE = 4096, 1024  # key tokens: a 4-gram copied from more than 1024 tokens back
TOLERANCE = 0.01  # relative key-token perplexity, as the scores use (benchmarks/advise_cost.py)


def key_ppl(model, ids: torch.Tensor, keep: torch.Tensor) -> float:
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state  # [1, L, d]
        nll = head_nll(model, hidden, ids, keep=keep)[0, keep].float()  # [K]
    return math.exp(float(nll.mean()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_key_token_perplexity_agrees(monkeypatch, dtype):
    model, tok = load_model("smollm2", dtype=dtype, threads=2)
    ids = heldout_windows(tok, LENGTH, n=1)  # [1, L]
    keep = key_positions(ids[0], 4, DISTANCE)[1:]  # [L-1]: prediction p scores ids[p + 1]
    assert int(keep.sum()) > 20
    spec = TemperatureSpec(multiplier=1.1).with_rope(TemperatureSpec.yarn(2.0, 2048).rope)
    ppl = {}
    with patch(model.eval(), spec):
        for kernel in ("sdpa", "blocked"):
            monkeypatch.setenv(kernel_probe.ENV, kernel)
            ppl[kernel] = key_ppl(model, ids, keep)
    assert abs(ppl["blocked"] / ppl["sdpa"] - 1) <= TOLERANCE, ppl
