"""Figures for calibration and distillation, printed as JSON.

Fitted-T recovery on synthetic logits whose labels are drawn at a known T, ECE/MCE before and
after, agreement with torchmetrics, and the effect of the T^2 factor on the distillation
gradient.  Run: ``python scripts/calibration_figures.py [--png reliability.png]`` (the PNG: the
reliability diagram of the T = 2.5 case before and after temperature scaling).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from attntemp.logits.calibration import calibration_error, calibration_metrics, fit_temperature, reliability_diagram
from attntemp.logits.distill import kd_loss, soft_kl
from attntemp.utils.options import from_argv, option


@dataclass(frozen=True, kw_only=True)
class CalibrationFigures:
    """The figures are fixed; only the reliability diagram's file is asked."""

    png: str | None = option(None, "also write the T = 2.5 reliability diagram (before / after) here")


def recovery(g: torch.Generator) -> list[dict]:
    z = 3.0 * torch.randn(20000, 10, generator=g, dtype=torch.float64)  # [N, C]
    rows = []
    for t_true in (0.5, 1.0, 2.5):
        y = torch.multinomial(torch.softmax(z / t_true, -1), 1, generator=g).squeeze(-1)  # [N]
        fit = fit_temperature(z, y)
        before, after = (calibration_metrics(torch.softmax(z / t, -1), y) for t in (1.0, fit.temperature))
        rows.append(
            {
                "t_true": t_true,
                "t_fit": fit.temperature,
                "rel_err": fit.temperature / t_true - 1,
                "before": before.as_dict(),
                "after": after.as_dict(),
            }
        )
    return rows


def reliability_png(path: str, t_true: float = 2.5) -> None:
    """The reliability diagram of synthetic logits whose labels were drawn at ``t_true``: before and
    after the fitted temperature."""
    g = torch.Generator().manual_seed(1)
    z = 3.0 * torch.randn(20000, 10, generator=g, dtype=torch.float64)  # [N, C]
    y = torch.multinomial(torch.softmax(z / t_true, -1), 1, generator=g).squeeze(-1)  # [N]
    t = fit_temperature(z, y).temperature
    reliability_diagram(
        torch.softmax(z, -1), y, path, title=f"labels drawn at T = {t_true:g}", after=torch.softmax(z / t, -1)
    )


def torchmetrics_gap() -> float:
    from torchmetrics.functional.classification import multiclass_calibration_error as tm

    worst = 0.0
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        p = torch.softmax((seed + 1) * torch.randn(5000, 7, generator=g), -1)  # [N, 7]
        y = torch.randint(0, 7, (5000,), generator=g)
        for n_bins in (1, 5, 10, 15, 30):
            for norm in ("l1", "l2", "max"):
                ours = calibration_error(p, y, n_bins, norm)
                worst = max(worst, abs(ours - float(tm(p, y, 7, n_bins, norm))))
    return worst


def grad_ratio(g: torch.Generator, with_t2: bool) -> float:
    s = torch.randn(64, 50, generator=g, dtype=torch.float64)  # [N, V] student
    t = 2 * torch.randn(64, 50, generator=g, dtype=torch.float64)  # [N, V] teacher

    def norm(temp: float) -> float:
        x = s.clone().requires_grad_(True)
        (kd_loss(x, t, temp) if with_t2 else soft_kl(x, t, temp)).backward()
        return float(x.grad.norm())

    return norm(1.0) / norm(10.0)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(CalibrationFigures, argv, __doc__.split("\n\n")[0])
    torch.set_num_threads(1)
    if args.png:
        reliability_png(args.png)
    g = torch.Generator().manual_seed(0)
    out = {
        "recovery": recovery(g),
        "max_abs_diff_vs_torchmetrics": torchmetrics_gap(),
        "kd_grad_norm_ratio_T1_over_T10": {"with_T2": grad_ratio(g, True), "without_T2": grad_ratio(g, False)},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
