"""A spec that tempers one layer type (Gemma 3's global or sliding layers), on a tiny random
Gemma 3 (layer 0 sliding with a window of 24, layer 1 full): m reaches only the targeted layers,
and multiplies the q that the kernel gets, after Gemma's QK-norm and RoPE."""

import pytest
import torch
from tiny_configs import Capture, model

import attntemp.hf.patch as P
from attntemp.hf.introspect import layer_types
from attntemp.ops.attention import reference_attention
from attntemp.ops.spec import TemperatureSpec

L = 60  # past the window of 24
X = torch.randint(1, 97, (1, L), generator=torch.Generator().manual_seed(3))
TYPES = ["sliding_attention", "full_attention"]


def check_against_reference(spec, m_of_layer):
    """Each layer's attention output under ``spec`` equals softmax(m q.k * scaling) v computed from the
    q, k, v its kernel received (q after q_norm and RoPE), with m = ``m_of_layer(layer)`` ``[H, L]``."""
    m = model("gemma3_text")
    assert layer_types(m) == TYPES
    with P.patch(m, spec), Capture("attntemp_sdpa") as cap, torch.no_grad():
        m(X)
    assert [c[0] for c in cap.calls] == [0, 1]
    i, j = torch.arange(L).unsqueeze(1), torch.arange(L).unsqueeze(0)
    for layer, q, k, v, kw, out in cap.calls:
        window = kw.get("sliding_window")
        assert (window is not None) == (layer == 0)
        mask = (j <= i) & (j > i - window) if window else None
        ref = reference_attention(q, k, v, m_of_layer(layer), is_causal=mask is None, attn_mask=mask,
                                  scale=kw["scaling"])  # fmt: skip
        assert (out - ref.transpose(1, 2)).abs().max() < 1e-5, layer


@pytest.mark.parametrize("target", TYPES)
def test_only_the_targeted_layer_type_is_tempered(target):
    spec = TemperatureSpec(multiplier=0.7, layer_types=[target])
    check_against_reference(spec, lambda layer: torch.full((4, 1), 0.7 if TYPES[layer] == target else 1.0))


def test_per_head_on_the_global_layer_only():
    heads = torch.tensor([[0.5, 0.8, 1.25, 2.0], [0.6, 0.9, 1.1, 1.7]])
    spec = TemperatureSpec.per_head(heads, layer_types=["full_attention"])
    check_against_reference(spec, lambda layer: heads[1].reshape(4, 1) if layer == 1 else torch.ones(4, 1))


def test_a_position_schedule_on_global_layers_only():
    spec = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 32}, layer_types=["full_attention"])
    p = torch.arange(1, L + 1, dtype=torch.float64)
    logn = torch.where(p > 32, p.log() / torch.log(torch.tensor(32.0, dtype=torch.float64)), 1.0).float()  # [L]
    check_against_reference(spec, lambda layer: logn.expand(4, L) if layer == 1 else torch.ones(4, 1))


def test_a_spec_with_layer_types_round_trips_and_is_checked():
    spec = TemperatureSpec(multiplier=1.1, layer_types=["full_attention"])
    assert TemperatureSpec.from_json(spec.to_json()) == spec and spec.to_dict()["layer_types"] == ["full_attention"]
    assert "layer_types" not in TemperatureSpec(multiplier=1.1).to_dict()  # older specs' JSON unchanged
    table = spec.heads_table(2, 4, TYPES)  # [L, H]
    assert table[0].tolist() == [1.0] * 4 and torch.allclose(table[1], torch.full((4,), 1.1))
    with pytest.raises(ValueError, match=r"layer_types\[\]='global' is not allowed"):
        TemperatureSpec(layer_types=["global"])
    with pytest.raises(ValueError, match="give each layer's type"):
        spec.heads_table(2, 4)
