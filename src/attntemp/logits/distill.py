"""Knowledge distillation with a softmax temperature (Hinton et al. 2015, arXiv:1503.02531).

The temperature ``T`` divides both the student and the teacher logits in the soft term. The
gradient of ``KL(softmax(t / T) || softmax(s / T))`` with respect to the student logits scales as
``1 / T^2`` once T is large, so the soft term is multiplied by ``T^2``: its gradient then stays the
same order of magnitude as the hard cross-entropy term whatever T is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops import tensor_checks
from ..utils import checks


def _compute_dtype(x: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 -> fp32 for the softmax; fp32/fp64 unchanged (so gradcheck runs in fp64)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _check_logits(student: torch.Tensor, teacher: torch.Tensor) -> None:
    """Same float shape [..., V] with V >= 1 and at least one row, no NaN."""
    for name, x in (("student_logits", student), ("teacher_logits", teacher)):
        if not torch.is_tensor(x) or not x.is_floating_point() or x.dim() < 2 or x.numel() == 0:
            got = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
            raise ValueError(f"{name} must be a non-empty float tensor [N, V] or [B, L, V], got {got}")
        tensor_checks.finite_tensor(name, x)
    if student.shape != teacher.shape:
        raise ValueError(
            f"student_logits shape {tuple(student.shape)} does not match "
            f"teacher_logits shape {tuple(teacher.shape)}; expected equal shapes"
        )


def _alpha(alpha: float) -> float:
    """``alpha`` as a float in [0, 1]."""
    a = checks.at_least("alpha", alpha, 0.0)
    if a > 1.0:
        raise ValueError(f"alpha={alpha!r} is not allowed; expected a number in [0, 1]")
    return a


def _kept_labels(labels: torch.Tensor, shape: torch.Size, ignore_index: int) -> torch.Tensor:
    """Flat labels [N] checked against logits ``shape`` [..., V]; returns the keep mask [N]."""
    if not torch.is_tensor(labels) or labels.is_floating_point() or labels.dtype == torch.bool:
        got = labels.dtype if torch.is_tensor(labels) else type(labels).__name__
        raise ValueError(f"labels must be an integer tensor, got {got}")
    if tuple(labels.shape) != tuple(shape[:-1]):
        raise ValueError(
            f"labels shape {tuple(labels.shape)} does not match logits shape "
            f"{tuple(shape)}; expected {tuple(shape[:-1])}"
        )
    y = labels.reshape(-1)  # [N]
    keep = y != ignore_index  # [N]
    if not bool(keep.any()):
        raise ValueError(f"no labelled positions: every label is ignore_index={ignore_index}")
    v = shape[-1]
    bad = keep & ((y < 0) | (y >= v))  # [N]
    if bool(bad.any()):
        raise ValueError(
            f"labels hold {int(y[bad][0])} at {int(bad.sum())} place(s); expected "
            f"0..{v - 1} (V={v}) or ignore_index={ignore_index}"
        )
    return keep


def soft_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over rows of ``KL(softmax(teacher / T) || softmax(student / T))`` in nats, no T^2.

    ``student`` and ``teacher`` are [N, V]; ``temperature`` is T (divides both). Entries where the
    teacher probability is 0 (a ``-inf`` teacher logit) contribute 0, with a zero gradient.
    """
    t = checks.positive("temperature", temperature)
    log_p_s = F.log_softmax(_compute_dtype(student) / t, dim=-1)  # [N, V]
    log_p_t = F.log_softmax(_compute_dtype(teacher) / t, dim=-1)  # [N, V]
    p_t = log_p_t.exp()  # [N, V]
    diff = torch.where(p_t > 0, log_p_t - log_p_s, torch.zeros_like(p_t))  # [N, V]
    return (p_t * diff).sum(dim=-1).mean()  # []


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    labels: torch.Tensor | None = None,
    alpha: float = 0.5,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Distillation loss ``alpha * CE(s, y) + (1 - alpha) * T^2 * KL(p_t^T || p_s^T)``.

    Hinton et al. 2015 (arXiv:1503.02531). ``temperature`` is T > 0 and divides both logit sets in
    the soft term only; the hard cross-entropy uses the raw student logits. Inputs are [N, V] or
    [B, L, V]; both terms are averaged per token (a mean over the kept positions, not a sum over
    the sequence). Positions whose label is ``ignore_index`` are dropped from both terms.

    With ``labels=None`` there is no hard term and the loss is the soft term at full weight,
    ``T^2 * KL``; ``alpha`` is then not used. The ``T^2`` factor is always present.
    """
    t = checks.positive("temperature", temperature)
    a = _alpha(alpha)
    _check_logits(student_logits, teacher_logits)
    v = student_logits.shape[-1]
    s = student_logits.reshape(-1, v)  # [N, V]
    te = teacher_logits.reshape(-1, v)  # [N, V]
    if labels is None:
        return t * t * soft_kl(s, te, t)  # []
    keep = _kept_labels(labels, student_logits.shape, ignore_index)  # [N]
    s, te, y = s[keep], te[keep], labels.reshape(-1)[keep]  # [N', V], [N', V], [N']
    hard = F.cross_entropy(_compute_dtype(s), y)  # []
    return a * hard + (1.0 - a) * t * t * soft_kl(s, te, t)  # []
