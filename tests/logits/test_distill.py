"""Distillation loss (Hinton et al. 2015): gradients, the T^2 factor, per-token mean, bad input."""

import math

import pytest
import torch
import torch.nn.functional as F

from attntemp.logits.distill import kd_loss, soft_kl

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pair(shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=dtype), 2.0 * torch.randn(*shape, generator=g, dtype=dtype))


def test_gradcheck_float64():
    s, t = _pair((2, 3, 5))
    s.requires_grad_(True)
    t.requires_grad_(True)
    labels = torch.tensor([[0, 4, -100], [2, -100, 1]])
    assert torch.autograd.gradcheck(lambda a, b: kd_loss(a, b, 2.0, labels, alpha=0.3), (s, t))
    assert torch.autograd.gradcheck(lambda a, b: kd_loss(a, b, 0.7), (s, t))


def test_kl_term_equals_a_manual_sum():
    s, t = _pair((4, 6))
    temp = 3.0
    total = 0.0
    for row in range(4):
        ps = [math.exp(v / temp) for v in s[row].tolist()]
        pt = [math.exp(v / temp) for v in t[row].tolist()]
        zs, zt = sum(ps), sum(pt)
        total += sum(b / zt * math.log((b / zt) / (a / zs)) for a, b in zip(ps, pt, strict=True))
    manual = total / 4
    assert float(soft_kl(s, t, temp)) == pytest.approx(manual, rel=1e-12)
    assert float(kd_loss(s, t, temp)) == pytest.approx(temp**2 * manual, rel=1e-12)
    torch_kl = F.kl_div(
        F.log_softmax(s / temp, -1), F.log_softmax(t / temp, -1), reduction="batchmean", log_target=True
    )
    assert float(soft_kl(s, t, temp)) == pytest.approx(float(torch_kl), rel=1e-12)


def test_mix_of_hard_and_soft_terms():
    s, t = _pair((5, 7))
    y = torch.tensor([0, 6, 3, 3, 1])
    hard = F.cross_entropy(s, y)
    soft = 4.0 * soft_kl(s, t, 2.0)
    assert float(kd_loss(s, t, 2.0, y, alpha=1.0)) == pytest.approx(float(hard), rel=1e-12)
    assert float(kd_loss(s, t, 2.0, y, alpha=0.0)) == pytest.approx(float(soft), rel=1e-12)
    mixed = 0.25 * hard + 0.75 * soft
    assert float(kd_loss(s, t, 2.0, y, alpha=0.25)) == pytest.approx(float(mixed), rel=1e-12)


def test_sequence_inputs_are_averaged_per_token_and_ignore_index_is_dropped():
    s, t = _pair((3, 4, 9))
    y = torch.tensor([[1, 2, -100, -100], [0, 8, 7, -100], [5, 5, 5, 5]])
    keep = y.reshape(-1) != -100
    flat = kd_loss(s.reshape(-1, 9)[keep], t.reshape(-1, 9)[keep], 2.0, y.reshape(-1)[keep])
    assert float(kd_loss(s, t, 2.0, y)) == pytest.approx(float(flat), rel=1e-12)
    per_token = torch.stack([soft_kl(s[i, j][None], t[i, j][None], 2.0) for i in range(3) for j in range(4)])  # [12]
    assert float(kd_loss(s, t, 2.0)) == pytest.approx(4.0 * float(per_token.mean()), rel=1e-12)
    changed = t.clone()
    changed[0, 2:] = 100.0 * torch.randn(2, 9, dtype=torch.float64)  # under ignore_index only
    assert float(kd_loss(s, changed, 2.0, y)) == pytest.approx(float(kd_loss(s, t, 2.0, y)))


def _soft_grad_norm(s, t, temp, squared):
    s = s.clone().requires_grad_(True)
    loss = kd_loss(s, t, temp) if squared else soft_kl(s, t, temp)
    loss.backward()
    return float(s.grad.norm())


def test_t_squared_keeps_the_soft_gradient_order_one():
    """Hinton et al. sec. 2: soft-target gradients scale as 1/T^2, so the loss multiplies by T^2."""
    s, t = _pair((64, 50), seed=3)
    with_t2 = _soft_grad_norm(s, t, 1.0, True) / _soft_grad_norm(s, t, 10.0, True)
    without = _soft_grad_norm(s, t, 1.0, False) / _soft_grad_norm(s, t, 10.0, False)
    assert 1 / 3 < with_t2 < 3
    assert without > 30  # 1/T^2 asymptotically: ~100x at T = 10
    assert without == pytest.approx(100 * with_t2, rel=1e-9)  # the T^2 factor is exactly 100


def test_masked_teacher_logits_give_finite_loss_and_gradients():
    s, t = _pair((2, 5))
    s[:, 0], t[:, 0] = -math.inf, -math.inf  # a token masked out for both
    s.requires_grad_(True)
    t.requires_grad_(True)
    loss = kd_loss(s, t, 2.0)
    loss.backward()
    assert math.isfinite(float(loss.detach()))
    assert torch.isfinite(s.grad).all() and torch.isfinite(t.grad).all()
    ref = kd_loss(s[:, 1:].detach(), t[:, 1:].detach(), 2.0)
    assert float(loss.detach()) == pytest.approx(float(ref), rel=1e-12)


def test_half_precision_runs_in_float32():
    s, t = _pair((4, 8), dtype=torch.float16)
    loss = kd_loss(s, t, 2.0, torch.tensor([0, 1, 2, 3]))
    ref = kd_loss(s.float(), t.float(), 2.0, torch.tensor([0, 1, 2, 3]))
    assert loss.dtype == torch.float32 and float(loss) == pytest.approx(float(ref), rel=1e-6)


def _bad():
    s, t = _pair((2, 3, 4))
    y = torch.tensor([[0, 1, 2], [3, 0, 1]])
    nan = s.clone()
    nan[0, 0, 0] = float("nan")
    return [
        ((s, t, 0.0), {}, "temperature"),
        ((s, t, -1.0), {}, "temperature"),
        ((s, t, float("nan")), {}, "temperature"),
        ((nan, t, 2.0), {}, "student_logits holds NaN"),
        ((s, t[:, :2], 2.0), {}, "does not match"),
        ((s, t, 2.0), {"labels": torch.tensor([[0, 1, 4], [3, 0, 1]])}, "labels hold 4"),
        ((s, t, 2.0), {"labels": y[:, :2]}, "labels shape"),
        ((s, t, 2.0), {"labels": y.float()}, "integer"),
        ((s, t, 2.0), {"labels": torch.full((2, 3), -100)}, "ignore_index"),
        ((s, t, 2.0), {"labels": y, "alpha": 1.5}, "alpha"),
        ((s[0, 0], t[0, 0], 2.0), {}, r"\[N, V\]"),
    ]


@pytest.mark.parametrize("args,kwargs,match", _bad())
def test_bad_input_is_a_clear_value_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kd_loss(*args, **kwargs)
