"""attntemp.tune.direction: the per-head gradient of the key-token loss at a spec, checked against
finite differences of the patched model's loss, and its direction, interval and agreement rules."""

import numpy as np
import pytest
import torch

from attntemp.evaluate.lm import token_nll
from attntemp.hf.learnable import learnable_of
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune import direction as D

G = torch.Generator().manual_seed(5)
IDS = torch.randint(3, 200, (3, 96), generator=G)  # [n, L]
MASKS = torch.rand(3, 95, generator=G) < 0.2  # [n, L-1]


def key_loss(model, spec, row):
    with torch.no_grad(), patch(model, spec):
        nll = token_nll(model, IDS[row : row + 1])  # [1, L-1]
    return float(nll[0][MASKS[row]].double().mean())


def ln_m_table(model, layer, head, eps):
    cfg = model.config
    table = torch.ones(cfg.num_hidden_layers, cfg.num_attention_heads, dtype=torch.float64)
    table[layer, head] = np.exp(eps)
    return TemperatureSpec.per_head(table)


@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_gradient_is_the_loss_slope_in_ln_m_head_by_head(tiny, checkpointing, one_torch_thread):
    model, _ = tiny
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    seen = []
    grads = D.head_gradients(model, IDS, MASKS, checkpointing=checkpointing, done=lambda i, g, x: seen.append((i, x)))
    assert [i for i, _ in seen] == [0, 1, 2] and len(grads) == 3
    assert abs(seen[1][1] - key_loss(model, TemperatureSpec(), 1)) < 1e-4  # the loss at m = 1
    eps = 1e-2
    for layer, head in [(0, 0), (1, 2), (model.config.num_hidden_layers - 1, 1)]:
        up, down = (key_loss(model, ln_m_table(model, layer, head, s * eps), 1) for s in (1, -1))
        slope = (up - down) / (2 * eps)
        assert grads[1][layer, head] == pytest.approx(slope, rel=0.05, abs=2e-4)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before  # restored
    assert learnable_of(model) is None


def test_windows_already_done_are_skipped_and_a_window_without_key_tokens_is_refused(tiny, one_torch_thread):
    model, _ = tiny
    seen = []
    D.head_gradients(model, IDS, MASKS, skip=(0, 2), done=lambda i, g, x: seen.append(i))
    assert seen == [1]
    with pytest.raises(ValueError, match="no prediction"):
        D.head_gradients(model, IDS[:1], torch.zeros(1, 95, dtype=torch.bool))


def test_direction_labels_a_head_only_when_its_interval_excludes_zero():
    g = np.zeros((4, 1, 3))
    g[:, 0, 0] = [-1.0, -1.2, -0.9, -1.1]  # always negative: sharper
    g[:, 0, 1] = [1.0, 0.8, 1.3, 1.1]  # always positive: softer
    g[:, 0, 2] = [-1.0, 1.0, -0.5, 0.6]  # straddles 0
    found = D.direction(list(g))
    assert found["direction"].tolist() == [["sharper", "softer", "not distinguishable"]]
    assert found["low"][0, 0] <= found["mean"][0, 0] <= found["high"][0, 0] < 0
    with pytest.raises(ValueError, match="at least 2"):
        D.direction(list(g[:1]))


def test_agreement_counts_the_diagnosis_predictions_against_the_directions():
    labels = np.array([["softer", "sharper", "not distinguishable"]])
    found = {"direction": labels, "mean": np.array([[2.0, -1.0, 0.1]])}
    shift = {
        "collapsed": [(0, 0)],
        "diffused": [(0, 2)],
        "recent_mass_shift": [[0.3, -0.2, 0.0]],
        "norm_entropy_shift": [[0.0, 0.01, 0.2]],
    }
    grads = [np.array([[2.0, -1.0, 0.1]]) * k for k in (0.8, 1.0, 1.2)]
    out = D.agreement(found, shift, grads)
    assert out["counts"]["softer"] == {"sharper": 0, "softer": 1, "not distinguishable": 0}
    assert out["counts"]["sharper"] == {"sharper": 0, "softer": 0, "not distinguishable": 1}
    assert out["counts"]["no prediction"]["sharper"] == 1
    rho = out["spearman_recent"]
    assert rho["value"] == pytest.approx(1.0) and rho["low"] == pytest.approx(1.0)  # ranked alike in every resample
    assert out["spearman_entropy"]["value"] == pytest.approx(-0.5)


def test_the_sign_flip_null_counts_what_chance_labels_with_this_few_windows():
    rng = np.random.default_rng(0)
    noise = [rng.normal(size=(6, 9)) for _ in range(4)]  # no direction: labels come by chance only
    null = D.sign_flip_null(noise)
    assert null["patterns"] == 16 and null["null_mean"] > 0  # 4 windows: every pattern; chance labels some heads
    shifted = [g + 5.0 for g in noise]  # every head clearly positive in every window: all labelled "softer"
    found = D.sign_flip_null(shifted)
    assert found["found"] == 54 and found["null_mean"] < found["found"]
    assert D.sign_flip_null(noise, most=8)["patterns"] == 8  # sampled when 2^n is too many
