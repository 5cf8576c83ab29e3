"""Temperature scaling (Guo et al. 2017): recover a known T, metrics vs torchmetrics, diagram."""

import functools
import importlib

import pytest
import torch

from attntemp.logits.calibration import (
    CalibrationFit,
    adaptive_calibration_error,
    calibration_error,
    calibration_metrics,
    fit_temperature,
    nll,
    reliability_bins,
    reliability_diagram,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.lru_cache
def synthetic(t_true: float, n: int = 20000, c: int = 10, seed: int = 0):
    """Logits z ~ 3 N(0, 1) and labels drawn from softmax(z / t_true): t_true is the right T."""
    g = torch.Generator().manual_seed(seed)
    z = 3.0 * torch.randn(n, c, generator=g, dtype=torch.float64)  # [N, C]
    y = torch.multinomial(torch.softmax(z / t_true, -1), 1, generator=g).squeeze(-1)  # [N]
    return z, y


@pytest.mark.parametrize("t_true", [0.5, 2.5])
def test_fit_recovers_the_temperature_the_labels_were_drawn_at(t_true):
    z, y = synthetic(t_true)
    fit = fit_temperature(z, y)
    assert fit.converged and fit.method == "newton" and fit.n == len(y)
    assert abs(fit.temperature - t_true) / t_true < 0.04
    assert fit.nll_after < fit.nll_before


def test_fit_is_a_minimum_of_the_nll():
    z, y = synthetic(2.5)
    fit = fit_temperature(z, y)
    best = nll(z, y, fit.temperature)
    assert best == pytest.approx(fit.nll_after, rel=1e-12)
    assert nll(z, y, 0.9 * fit.temperature) > best
    assert nll(z, y, 1.1 * fit.temperature) > best
    assert nll(z, y) == pytest.approx(fit.nll_before, rel=1e-12)


def test_golden_section_agrees_with_newton():
    z, y = synthetic(2.5)
    a, b = fit_temperature(z, y), fit_temperature(z, y, method="golden-section")
    assert b.method == "golden-section" and b.converged
    assert b.temperature == pytest.approx(a.temperature, rel=1e-5)


def test_optimum_on_the_bracket_edge_falls_back_and_reports_not_converged():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(400, 5, generator=g)  # [N, C]
    fit = fit_temperature(z, z.argmin(-1))  # labels anti-correlated: best m = 1/T is below 0
    assert fit.method == "golden-section" and not fit.converged
    assert fit.temperature > 99.0  # pinned at the upper edge T = 1e2


def test_language_model_logits_drop_ignored_positions():
    z, y = synthetic(2.5, n=600)
    lm_z = z.reshape(4, 150, 10).clone()  # [B, L, V]
    lm_y = y.reshape(4, 150).clone()  # [B, L]
    lm_y[:, -20:] = -100
    lm_z[:, -20:] = 1e3 * torch.randn(4, 20, 10, dtype=torch.float64)  # garbage under padding
    keep = lm_y.reshape(-1) != -100
    fit = fit_temperature(lm_z, lm_y)
    ref = fit_temperature(lm_z.reshape(-1, 10)[keep], lm_y.reshape(-1)[keep])
    assert fit.n == int(keep.sum()) and fit.temperature == pytest.approx(ref.temperature, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_scaling_never_changes_accuracy_or_ranking(seed):
    g = torch.Generator().manual_seed(seed)
    z = 4.0 * torch.randn(300, 12, generator=g, dtype=torch.float64)  # [N, C]
    y = torch.multinomial(torch.softmax(z / 2, -1), 1, generator=g).squeeze(-1)  # [N]
    fit = fit_temperature(z, y)
    assert fit.converged and fit.temperature > 1.2  # z is over-confident for these labels
    scaled = fit.apply(z)  # [N, C]
    assert torch.equal(scaled.argmax(-1), z.argmax(-1))
    assert torch.equal(scaled.argsort(dim=-1, stable=True), z.argsort(dim=-1, stable=True))
    before = calibration_metrics(torch.softmax(z, -1), y)
    after = calibration_metrics(torch.softmax(scaled, -1), y)
    assert before.accuracy == after.accuracy


def _probs_for_torchmetrics(seed: int):
    g = torch.Generator().manual_seed(seed)
    z = 2.5 * torch.randn(3000, 7, generator=g)  # [N, C]
    y = torch.randint(0, 7, (3000,), generator=g)  # [N]
    p = torch.softmax(z, -1)  # [N, C]
    wrong_half = (y[:40] + torch.arange(40) % 2) % 7  # [40], every other one is not the label
    p[:40] = torch.nn.functional.one_hot(wrong_half, 7).float()  # confidence exactly 1.0
    return p, y  # the 40 one-hot rows fill the extra torchmetrics bin, half of them wrong


@pytest.mark.parametrize("n_bins", [1, 7, 15])
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_agrees_with_torchmetrics(n_bins, norm):
    import torchmetrics as tm  # part of [dev]: missing, the test fails
    from torchmetrics.functional.classification import multiclass_calibration_error

    p, y = _probs_for_torchmetrics(n_bins)
    ours = calibration_error(p, y, n_bins, norm)
    functional = float(multiclass_calibration_error(p, y, 7, n_bins, norm))
    module = tm.CalibrationError(task="multiclass", num_classes=7, n_bins=n_bins, norm=norm)
    module.update(p[:1000], y[:1000])
    module.update(p[1000:], y[1000:])
    assert abs(ours - functional) < 1e-6 and abs(ours - float(module.compute())) < 1e-6


@pytest.mark.parametrize("n_bins", [1, 5, 30])
def test_same_bins_as_torchmetrics_exactly_when_it_sums_in_float64(n_bins):
    """torchmetrics sums in float32 (off by ~1e-6 at N = 5000); fed float64, it matches to 0."""
    calib = importlib.import_module("torchmetrics.functional.classification.calibration_error")  # the module
    ce_compute = getattr(calib, "_ce_compute", None)  # private: constraints/ci.txt pins the release that has it
    assert ce_compute is not None, "torchmetrics' private _ce_compute is gone: compare with its public API instead"
    g = torch.Generator().manual_seed(n_bins)
    p = torch.softmax(4 * torch.randn(5000, 7, generator=g), -1)  # [N, C]
    y = torch.randint(0, 7, (5000,), generator=g)  # [N]
    conf, pred = p.max(dim=1)  # [N], [N]
    edges = torch.linspace(0, 1, n_bins + 1).double()  # torchmetrics' fp32 edges, exactly
    for norm in ("l1", "l2", "max"):
        ref = float(ce_compute(conf.double(), pred.eq(y).double(), edges, norm))
        assert abs(calibration_error(p, y, n_bins, norm) - ref) < 1e-12


def test_language_model_metrics_agree_with_torchmetrics_ignore_index():
    from torchmetrics.functional.classification import multiclass_calibration_error

    p, y = _probs_for_torchmetrics(3)
    y = y.clone()
    y[::5] = -100
    metrics = calibration_metrics(p.reshape(30, 100, 7), y.reshape(30, 100))
    for norm, ours in (("l1", metrics.ece), ("l2", metrics.rmsce), ("max", metrics.mce)):
        ref = float(multiclass_calibration_error(p, y, 7, 15, norm, ignore_index=-100))
        assert abs(ours - ref) < 1e-6
    assert metrics.n == 2400


def test_adaptive_ece_limits():
    z, y = synthetic(2.5, n=2000)
    p = torch.softmax(z, -1)  # [N, C]
    conf, pred = p.max(-1)  # [N], [N]
    correct = (pred == y).double()  # [N]
    one_bin = abs(float(correct.mean() - conf.float().double().mean()))
    per_sample = float((correct - conf.float().double()).abs().mean())
    assert adaptive_calibration_error(p, y, n_bins=1) == pytest.approx(one_bin, abs=1e-12)
    assert adaptive_calibration_error(p, y, n_bins=2000) == pytest.approx(per_sample, abs=1e-12)


def test_metrics_small_when_labels_follow_the_probabilities_and_large_when_overconfident():
    z, y = synthetic(2.5)
    calibrated = calibration_metrics(torch.softmax(z / 2.5, -1), y)
    overconfident = calibration_metrics(torch.softmax(z, -1), y)
    assert calibrated.ece < 0.03 and calibrated.adaptive_ece < 0.03
    assert overconfident.ece > 0.2 and overconfident.confidence > overconfident.accuracy + 0.2


def test_reliability_bins_reproduce_the_ece():
    z, y = synthetic(0.5, n=3000)
    p = torch.softmax(z, -1)
    acc, conf, count = reliability_bins(p, y, n_bins=10)
    assert count.sum() == 3000 and acc.shape == (10,)
    drawn = float(((acc - conf).abs() * count / count.sum()).sum())
    assert drawn == pytest.approx(calibration_error(p, y, 10), abs=1e-12)


def test_reliability_diagram_writes_one_or_two_panels(tmp_path):
    from matplotlib.image import imread

    z, y = synthetic(2.5, n=2000)
    one = reliability_diagram(torch.softmax(z, -1), y, tmp_path / "one.png", n_bins=10)
    two = reliability_diagram(
        torch.softmax(z, -1), y, tmp_path / "two.png", n_bins=10, after=torch.softmax(z / 2.5, -1)
    )
    assert one.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    h1, w1 = imread(one).shape[:2]
    h2, w2 = imread(two).shape[:2]
    assert h1 == h2 and w2 == 2 * w1


def _bad_cases():
    z = torch.randn(6, 4)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    nan = z.clone()
    nan[2, 1] = float("nan")
    return [
        ((nan, y), "NaN"),
        ((z, torch.tensor([0, 1, 2, 4, 0, 1])), "labels hold 4"),
        ((z, y[:5]), "labels shape"),
        ((z, y.float()), "integer"),
        ((z, torch.full((6,), -100)), "ignore_index"),
        ((torch.empty(0, 4), torch.empty(0, dtype=torch.long)), "empty"),
        ((z[0], y[0]), r"\[N, C\]"),
        ((z[:, :1], torch.zeros(6, dtype=torch.long)), "1 class; temperature scaling needs at least 2"),  # any T fits
    ]


@pytest.mark.parametrize("args,match", _bad_cases())
def test_bad_input_is_a_clear_value_error(args, match):
    with pytest.raises(ValueError, match=match):
        fit_temperature(*args)


def test_bad_arguments():
    z, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    p = torch.softmax(z, -1)
    with pytest.raises(ValueError, match="temperature"):
        nll(z, y, 0.0)
    with pytest.raises(ValueError, match="method"):
        fit_temperature(z, y, method="newtonn")
    with pytest.raises(ValueError, match="norm"):
        calibration_error(p, y, norm="l3")
    with pytest.raises(ValueError, match="n_bins"):
        calibration_metrics(p, y, n_bins=0)
    with pytest.raises(ValueError, match="probabilities"):
        calibration_error(z, y)  # logits passed where probabilities are expected
    with pytest.raises(ValueError, match="temperature"):
        CalibrationFit(-1.0, 1.0, 1.0, True, "newton", 5)
