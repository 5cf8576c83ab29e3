"""Sliding-window layers under the patch: a long prefill gets no [L, L] mask (the window is computed
in blocks) and gives the logits transformers' own masked SDPA gives; padding keeps the mask."""

import pytest
import torch
from tiny_configs import Capture, model

import attntemp.hf.patch as P
from attntemp.ops.spec import TemperatureSpec

X = torch.randint(1, 97, (2, 90), generator=torch.Generator().manual_seed(4))  # window 24: a long prefill


@pytest.mark.parametrize("arch", ["gemma3_text", "mistral"])
def test_long_prefill_without_a_mask_equals_transformers(arch):
    m = model(arch)
    with torch.no_grad():
        plain = m(X).logits  # transformers' SDPA with its [B, 1, L, L] sliding mask
        with P.patch(m, TemperatureSpec()), Capture("attntemp_sdpa") as cap:
            patched = m(X).logits
    assert any(kw.get("sliding_window") for *_, kw, _ in cap.calls)  # sliding layers ran (without a mask: below)
    assert (patched - plain).abs().max() < 1e-4


def test_the_sliding_layer_gets_no_mask_and_padding_keeps_one():
    m = model("gemma3_text")
    seen = []
    orig = P._windowed_mask

    def spy(*args, **kwargs):
        out = orig(*args, **kwargs)
        seen.append((kwargs.get("local_size"), None if out is None else tuple(out.shape)))
        return out

    P.AttentionMaskInterface.register("attntemp_sdpa", spy)
    try:
        with torch.no_grad(), P.patch(m, TemperatureSpec(multiplier=0.8)):
            m(X)
            assert (24, None) in seen  # long, unpadded: no mask for the window
            seen.clear()
            pad = torch.ones_like(X)
            pad[0, :5] = 0
            tempered = m(X, attention_mask=pad).logits
        assert (24, (2, 1, 90, 90)) in seen  # padding: transformers' mask, as before
        with torch.no_grad():
            plain_pad = m(X, attention_mask=pad).logits
        assert (tempered - plain_pad).abs().max() > 1e-3  # m = 0.8 reached the padded run too
    finally:
        P.AttentionMaskInterface.register("attntemp_sdpa", orig)
