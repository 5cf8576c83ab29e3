"""Temperature scaling and calibration metrics (Guo et al. 2017, arXiv:1706.04599).

One scalar temperature ``T`` divides the logits (the multiplier ``m = 1/T`` multiplies them); it
is fitted by minimising the negative log-likelihood on held-out logits. Dividing by ``T > 0`` never
changes the argmax or the order within a row, so accuracy is untouched; only the confidences move.

Metrics use equal-width bins exactly as ``torchmetrics`` does (``bucketize(conf, linspace(0, 1,
n_bins + 1), right=True) - 1``): bin ``i`` is ``[i/M, (i+1)/M)`` and a confidence of exactly 1.0
lands in one extra bin of its own. ECE is the l1 norm of the per-bin gaps weighted by bin mass, MCE
the max, RMS calibration error the square root of the weighted sum of squares. The per-bin sums
run in float64; torchmetrics sums in float32, so on large N the two differ by ~1e-6.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..ops import tensor_checks
from ..ops.intervals import wilson
from ..ops.search import golden_section
from ..utils import checks

LOG_T_BOUNDS = (math.log(1e-2), math.log(1e2))  # the bracket of the fallback search, in ln T
FIT_METHODS = ("newton", "golden-section")
NORMS = ("l1", "l2", "max")
GRAD_TOL = 1e-5  # |dNLL/d ln T| below this counts as a stationary point


def flatten_labelled(
    scores: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, name: str = "logits"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check ``scores`` [..., C] against ``labels`` [...]; return [N, C], [N] minus ignored rows."""
    if not torch.is_tensor(scores) or not scores.is_floating_point() or scores.dim() < 2:
        got = tuple(scores.shape) if torch.is_tensor(scores) else type(scores).__name__
        raise ValueError(f"{name} must be a float tensor [N, C] or [B, L, V], got {got}")
    if not torch.is_tensor(labels) or labels.is_floating_point() or labels.dtype == torch.bool:
        kind = labels.dtype if torch.is_tensor(labels) else type(labels).__name__
        raise ValueError(f"labels must be an integer tensor, got {kind}")
    if tuple(labels.shape) != tuple(scores.shape[:-1]):
        raise ValueError(
            f"labels shape {tuple(labels.shape)} does not match {name} shape "
            f"{tuple(scores.shape)}; expected labels of shape {tuple(scores.shape[:-1])}"
        )
    tensor_checks.finite_tensor(name, scores)
    if bool(torch.isposinf(scores).any()):
        raise ValueError(f"{name} holds +inf; expected finite values (-inf marks a masked entry)")
    c = scores.shape[-1]
    if scores.numel() == 0:
        raise ValueError(f"{name} is empty: shape {tuple(scores.shape)}")
    flat, y = scores.reshape(-1, c), labels.reshape(-1)  # [N, C], [N]
    keep = y != ignore_index  # [N]
    flat, y = flat[keep], y[keep]  # [N', C], [N']
    if y.numel() == 0:
        raise ValueError(f"no labelled positions: every label is ignore_index={ignore_index}")
    bad = (y < 0) | (y >= c)  # [N']
    if bool(bad.any()):
        raise ValueError(
            f"labels hold {int(y[bad][0])} at {int(bad.sum())} place(s); expected "
            f"0..{c - 1} (C={c}) or ignore_index={ignore_index}"
        )
    return flat, y


def _flat_probs(probs: torch.Tensor, labels: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``flatten_labelled`` plus a check that each row is a distribution."""
    p, y = flatten_labelled(probs, labels, ignore_index, name="probs")  # [N, C], [N]
    sums = p.double().sum(dim=-1)  # [N]
    if bool((p < 0).any()) or bool((p > 1 + 1e-6).any()) or bool(((sums - 1).abs() > 1e-3).any()):
        raise ValueError(
            "probs must hold probabilities in [0, 1] summing to 1 per row; "
            "pass softmax(logits / T), e.g. attntemp.ops.softmax.tempered_softmax(logits, T)"
        )
    return p, y


def _nll(z: torch.Tensor, y: torch.Tensor, m: torch.Tensor | float) -> torch.Tensor:
    """Mean cross-entropy of ``z * m`` (``m = 1/T``) against ``y``; z [N, C], y [N]."""
    return F.cross_entropy(z * m, y)  # []


def _derivatives(z: torch.Tensor, y: torch.Tensor, log_t: float) -> tuple[float, float, float]:
    """NLL and its first two derivatives in ``s = ln T`` (``m = e^-s``); z [N, C], y [N].

    With ``a = mean(E_p[z] - z_y) = dNLL/dm`` and ``v = mean(Var_p[z]) = d2NLL/dm2``:
    ``dNLL/ds = -m a`` and ``d2NLL/ds2 = m a + m^2 v``.
    """
    m = math.exp(-log_t)
    zm = z * m  # [N, C]
    lse = torch.logsumexp(zm, dim=-1)  # [N]
    p = torch.exp(zm - lse[:, None])  # [N, C]
    zf = torch.nan_to_num(z, neginf=0.0)  # [N, C], masked entries carry p = 0
    mean = (p * zf).sum(dim=-1)  # [N]
    var = (p * (zf - mean[:, None]).pow(2)).sum(dim=-1)  # [N]
    z_y = z.gather(-1, y[:, None]).squeeze(-1)  # [N]
    a, v = float((mean - z_y).mean()), float(var.mean())
    return float((lse - m * z_y).mean()), -m * a, m * a + m * m * v


def nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, ignore_index: int = -100) -> float:
    """Mean negative log-likelihood (nats) of ``softmax(logits / T)``; ``temperature`` is T."""
    t = checks.positive("temperature", temperature)
    z, y = flatten_labelled(logits, labels, ignore_index)  # [N, C], [N]
    return float(_nll(z.double(), y, 1.0 / t))


@dataclass(frozen=True)
class CalibrationFit:
    """The fitted temperature ``T`` (divide logits by it) and the held-out NLL before and after."""

    temperature: float
    nll_before: float
    nll_after: float
    converged: bool
    method: str
    n: int

    def __post_init__(self) -> None:
        checks.positive("temperature", self.temperature)
        checks.at_least("nll_before", self.nll_before, 0.0)
        checks.at_least("nll_after", self.nll_after, 0.0)
        checks.choice("method", self.method, FIT_METHODS)
        checks.positive_int("n", self.n)

    @property
    def multiplier(self) -> float:
        """``m = 1/T``, the factor that multiplies the logits."""
        return 1.0 / self.temperature

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Calibrated logits ``logits / T`` (same shape)."""
        return logits / self.temperature  # [..., C]


def _newton_log_t(z: torch.Tensor, y: torch.Tensor, max_iter: int) -> float:
    """Damped Newton on the NLL over ``ln T`` from T = 1, halving steps that do not descend."""
    s = 0.0
    f, g, h = _derivatives(z, y, s)
    for _ in range(max_iter):
        if abs(g) < GRAD_TOL * 1e-2:
            break
        step = max(-2.0, min(2.0, -g / h if h > 0 else -math.copysign(1.0, g)))  # [] in ln T
        for _ in range(40):
            f_new, g_new, h_new = _derivatives(z, y, s + step)
            if f_new <= f:
                break
            step /= 2
        s, f, g, h = s + step, f_new, g_new, h_new
        if not LOG_T_BOUNDS[0] - 1 < s < LOG_T_BOUNDS[1] + 1:
            break  # heading off the bracket: leave it to the golden-section search
    return s


def _golden_log_t(z: torch.Tensor, y: torch.Tensor, tol: float = 1e-8) -> float:
    """Golden-section search for the NLL minimum over ``ln T`` in ``LOG_T_BOUNDS``.

    The NLL is convex in ``m = 1/T``, hence unimodal in ``ln T``, so the bracket cannot be fooled.
    """
    return golden_section(lambda s: float(_nll(z, y, math.exp(-s))), *LOG_T_BOUNDS, tol=tol)


def _stationary(z: torch.Tensor, y: torch.Tensor, log_t: float) -> bool:
    """True if ``ln T`` is finite, inside the bracket and the NLL gradient there is ~0."""
    lo, hi = LOG_T_BOUNDS
    inside = math.isfinite(log_t) and lo + 1e-6 < log_t < hi - 1e-6
    return inside and abs(_derivatives(z, y, log_t)[1]) < GRAD_TOL


def fit_temperature(
    logits: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int = -100,
    method: str = "newton",
    max_iter: int = 100,
) -> CalibrationFit:
    """Fit one temperature ``T`` minimising the held-out NLL of ``softmax(logits / T)``.

    Temperature scaling (Guo et al. 2017, arXiv:1706.04599). ``logits`` is [N, C] or [B, L, V]
    with ``labels`` [N] or [B, L]; positions labelled ``ignore_index`` are dropped. The search runs
    in ``ln T`` (so T > 0) in float64: damped Newton with analytic derivatives first, then a
    golden-section search over T in [1e-2, 1e2] if Newton does not reach a stationary point.
    ``converged`` is False when the optimum sits on the edge of that bracket (e.g. labels
    anti-correlated with the logits).
    """
    checks.choice("method", method, FIT_METHODS)
    max_iter = checks.positive_int("max_iter", max_iter)
    z, y = flatten_labelled(logits, labels, ignore_index)  # [N, C], [N]
    if z.shape[-1] < 2:
        raise ValueError(
            f"logits has {z.shape[-1]} class; temperature scaling needs at least 2 (with one, softmax is 1 at every T)"
        )
    z = z.double()  # [N, C]
    before = float(_nll(z, y, 1.0))
    if not math.isfinite(before):
        raise ValueError("the NLL at T=1 is infinite: some label sits on a -inf logit")
    if method == "newton":
        log_t = _newton_log_t(z, y, max_iter)
        if _stationary(z, y, log_t):
            return CalibrationFit(
                math.exp(log_t), before, float(_nll(z, y, math.exp(-log_t))), True, "newton", int(y.numel())
            )
    log_t = _golden_log_t(z, y)
    return CalibrationFit(
        math.exp(log_t),
        before,
        float(_nll(z, y, math.exp(-log_t))),
        _stationary(z, y, log_t),
        "golden-section",
        int(y.numel()),
    )


def _top_label(p: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 confidence (fp32, as torchmetrics) and 0/1 correctness; p [N, C], y [N]."""
    conf, pred = p.max(dim=-1)  # [N], [N]
    return conf.float().clamp(0.0, 1.0), pred.eq(y).float()  # [N], [N]


def _bins(conf: torch.Tensor, correct: torch.Tensor, n_bins: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-bin accuracy, mean confidence and count over ``n_bins + 1`` torchmetrics bins."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=conf.dtype)  # [M + 1]
    idx = torch.bucketize(conf, edges, right=True) - 1  # [N], n_bins only for conf == 1.0
    ones = torch.ones_like(conf, dtype=torch.float64)  # [N]
    count = torch.zeros(n_bins + 1, dtype=torch.float64).scatter_add_(0, idx, ones)  # [M + 1]
    conf_sum = torch.zeros_like(count).scatter_add_(0, idx, conf.double())  # [M + 1]
    acc_sum = torch.zeros_like(count).scatter_add_(0, idx, correct.double())  # [M + 1]
    safe = count.clamp_min(1.0)  # [M + 1]; empty bins give acc = conf = 0, a zero gap
    return acc_sum / safe, conf_sum / safe, count


def _norm(acc: torch.Tensor, conf: torch.Tensor, count: torch.Tensor, norm: str) -> float:
    """Calibration error of per-bin stats under ``norm`` in {l1, l2, max}."""
    gap = (acc - conf).abs()  # [M + 1]
    weight = count / count.sum()  # [M + 1]
    if norm == "l1":
        return float((gap * weight).sum())
    if norm == "max":
        return float(gap.max())
    return math.sqrt(float((gap.pow(2) * weight).sum()))


def calibration_error(
    probs: torch.Tensor,
    labels: torch.Tensor,
    n_bins: int = 15,
    norm: str = "l1",
    ignore_index: int = -100,
) -> float:
    """Top-label calibration error over equal-width bins: ECE (l1), RMS (l2) or MCE (max).

    ``probs`` [N, C] or [B, L, V] are probabilities, e.g. ``tempered_softmax(logits, T)``. Agrees
    with ``torchmetrics``' ``multiclass_calibration_error`` on the same bins (Guo et al. 2017).
    """
    checks.choice("norm", norm, NORMS)
    n_bins = checks.positive_int("n_bins", n_bins)
    conf, correct = _top_label(*_flat_probs(probs, labels, ignore_index))  # [N], [N]
    return _norm(*_bins(conf, correct, n_bins), norm)


def _adaptive(conf: torch.Tensor, correct: torch.Tensor, n_bins: int) -> float:
    """Equal-mass ECE: sort by confidence, cut into ``n_bins`` near-equal groups."""
    order = torch.argsort(conf, stable=True)  # [N]
    total = 0.0
    for group in torch.tensor_split(order, n_bins):
        if group.numel():
            gap = correct[group].double().mean() - conf[group].double().mean()
            total += group.numel() * abs(float(gap))
    return total / conf.numel()


def adaptive_calibration_error(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, ignore_index: int = -100
) -> float:
    """Adaptive (equal-mass) ECE: ``n_bins`` bins holding the same number of predictions each."""
    n_bins = checks.positive_int("n_bins", n_bins)
    conf, correct = _top_label(*_flat_probs(probs, labels, ignore_index))  # [N], [N]
    return _adaptive(conf, correct, n_bins)


@dataclass(frozen=True)
class CalibrationMetrics:
    """ECE, MCE, RMS and adaptive ECE plus accuracy and mean confidence, for ``n`` predictions."""

    ece: float
    mce: float
    rmsce: float
    adaptive_ece: float
    accuracy: float
    confidence: float
    n: int
    n_bins: int

    def __post_init__(self) -> None:
        for name in ("ece", "mce", "rmsce", "adaptive_ece", "accuracy", "confidence"):
            value = checks.at_least(name, getattr(self, name), 0.0)
            if value > 1.0:
                raise ValueError(f"{name}={value!r} is not allowed; expected a number in [0, 1]")
        checks.positive_int("n", self.n)
        checks.positive_int("n_bins", self.n_bins)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def calibration_metrics(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, ignore_index: int = -100
) -> CalibrationMetrics:
    """All calibration metrics of ``probs`` [N, C] or [B, L, V] against ``labels`` in one pass."""
    n_bins = checks.positive_int("n_bins", n_bins)
    conf, correct = _top_label(*_flat_probs(probs, labels, ignore_index))  # [N], [N]
    stats = _bins(conf, correct, n_bins)
    return CalibrationMetrics(
        ece=_norm(*stats, "l1"),
        mce=_norm(*stats, "max"),
        rmsce=_norm(*stats, "l2"),
        adaptive_ece=_adaptive(conf, correct, n_bins),
        accuracy=float(correct.double().mean()),
        confidence=float(conf.double().mean()),
        n=int(conf.numel()),
        n_bins=n_bins,
    )


def reliability_bins(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-bin (accuracy, mean confidence, count), each [n_bins], as drawn in the diagram.

    Same bins as the metrics, except that confidences of exactly 1.0 join the top bin.
    """
    n_bins = checks.positive_int("n_bins", n_bins)
    conf, correct = _top_label(*_flat_probs(probs, labels, ignore_index))  # [N], [N]
    acc, mean_conf, count = _bins(conf, correct, n_bins)  # [M + 1] each
    top = count[n_bins - 1 :].sum()  # [], the top bin merged with the conf == 1.0 bin
    if top > 0:
        acc[n_bins - 1] = (acc[n_bins - 1 :] * count[n_bins - 1 :]).sum() / top
        mean_conf[n_bins - 1] = (mean_conf[n_bins - 1 :] * count[n_bins - 1 :]).sum() / top
    count[n_bins - 1] = top
    return acc[:n_bins], mean_conf[:n_bins], count[:n_bins]


def _draw_panel(ax, stats: tuple[torch.Tensor, ...], title: str) -> None:
    """Accuracy bars per bin with their 95% Wilson interval, the gap to the bin's mean confidence,
    and the diagonal; the legend below the axes, off the bars."""
    acc, conf, count = (s.numpy() for s in stats)
    width = 1.0 / len(acc)
    centers = (torch.arange(len(acc), dtype=torch.float64).numpy() + 0.5) * width
    has = count > 0
    ax.bar(centers[has], acc[has], width, color="tab:blue", edgecolor="black", label="accuracy")
    ax.bar(
        centers[has],
        (conf - acc)[has],
        width,
        bottom=acc[has],
        color="tab:red",
        alpha=0.3,
        edgecolor="tab:red",
        hatch="//",
        zorder=3,
        label="gap to confidence",
    )
    cis = [wilson(round(a * n), int(n)) for a, n in zip(acc[has], count[has], strict=True)]  # one per bin
    low, high = (torch.tensor([getattr(c, k) for c in cis], dtype=torch.float64).numpy() for k in ("low", "high"))
    err = (acc[has] - low, high - acc[has])  # [bins] below and above
    ax.errorbar(centers[has], acc[has], err, fmt="none", ecolor="black", capsize=2, label="95% Wilson interval")
    ax.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy", title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)


def reliability_diagram(
    probs: torch.Tensor,
    labels: torch.Tensor,
    path: str | Path,
    n_bins: int = 15,
    title: str = "Reliability diagram",
    after: torch.Tensor | None = None,
    ignore_index: int = -100,
) -> Path:
    """Write a PNG reliability diagram (Guo et al. 2017, fig. 1) with the ECE in the title.

    ``probs`` are probabilities [N, C] or [B, L, V]; pass ``after`` (e.g. the probabilities after
    temperature scaling, same labels) to draw a second "after" panel. Uses the Agg canvas only.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..analysis.style import DPI

    panels = [("before", probs)] if after is not None else [("", probs)]
    panels += [("after", after)] if after is not None else []
    fig = Figure(figsize=(5 * len(panels), 5.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    for i, (name, p) in enumerate(panels):
        ece = calibration_error(p, labels, n_bins, "l1", ignore_index)
        head = f"{title} ({name})" if name else title
        stats = reliability_bins(p, labels, n_bins, ignore_index)
        _draw_panel(fig.add_subplot(1, len(panels), i + 1), stats, f"{head}\nECE = {ece:.4f}")
    path = Path(path)
    fig.savefig(path, format="png")
    return path
