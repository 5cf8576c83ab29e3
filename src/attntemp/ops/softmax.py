"""Tempered softmax and entropy: the pure math of attention temperature.

Temperature ``T`` divides the logits; the multiplier ``m = 1/T`` multiplies them. ``T > 1`` softens
(flatter, higher entropy), ``T < 1`` sharpens; the order of the weights never changes.

Edge cases, the same in :func:`tempered_softmax` and :func:`entropy` (``tests/ops/test_softmax_edges.py``):

- ``-inf`` is a masked score: weight exactly 0, and it drops out of the entropy.
- A row of only ``-inf`` (every key masked) has no distribution: its weights are all 0 and its
  entropy is 0 (``-sum p log p`` over no mass), never NaN.
- ``+inf`` or NaN in ``scores`` is refused (ValueError): ``+inf / T`` has no softmax.
- Scores near the dtype's largest value with a small T cannot overflow: the row max is subtracted
  before dividing by T (softmax and entropy are shift invariant), so ``(s - max) / T <= 0``; an
  underflow to ``-inf`` there is the exact limit (weight 0).
- T must be finite and in ``[1e-6, 1e6]`` (:data:`T_RANGE`; m = 1/T the same): outside it every row
  of scores an attention layer produces is one-hot or uniform at float32 resolution. Booleans are
  refused. A tensor T is one T per row (constant along ``dim``) or one per entry (per key: then
  the division runs in float64 before the shift, so only float64 scores above ~1e302 can overflow).
"""

from __future__ import annotations

import numbers

import torch

from ..utils import checks
from . import tensor_checks

Number = float | int
TempLike = Number | torch.Tensor
T_RANGE = (1e-6, 1e6)  # the temperatures accepted (inclusive); m = 1/T has the same range


def _compute_dtype(scores: torch.Tensor) -> torch.dtype:
    """fp32 for half types (so T = 1e-3 cannot overflow them), fp64 kept as fp64."""
    return torch.promote_types(scores.dtype, torch.float32)


def _in_range(t: torch.Tensor) -> torch.Tensor:
    lo, hi = T_RANGE[0] * (1 - 1e-6), T_RANGE[1] * (1 + 1e-6)  # the ends as a float32 holds them
    outside = (t < lo) | (t > hi)
    if bool(outside.any()):
        bad = t[outside].flatten()[0].item()
        raise ValueError(
            f"temperature={bad!r} is not allowed; expected a finite number in [{T_RANGE[0]:g}, {T_RANGE[1]:g}] "
            "(outside it the weights are one-hot or uniform at float32 resolution)"
        )
    return t


def _temperature(temperature: TempLike, like: torch.Tensor) -> torch.Tensor:
    """Check ``temperature`` (finite, in :data:`T_RANGE`) and return it as a tensor on ``like``'s device."""
    dtype = _compute_dtype(like)
    if torch.is_tensor(temperature):
        if temperature.dtype == torch.bool:
            raise ValueError("temperature is a boolean tensor; expected numbers in [1e-06, 1e+06]")
        t = tensor_checks.positive_tensor("temperature", temperature.to(device=like.device, dtype=torch.float64))
        try:
            fits = torch.broadcast_shapes(t.shape, like.shape) == like.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"temperature of shape {tuple(t.shape)} does not broadcast to scores {tuple(like.shape)}")
        return _in_range(t).to(dtype)
    if not isinstance(temperature, numbers.Real):
        raise ValueError(f"temperature={temperature!r} is not allowed; expected a number or a tensor")
    value = checks.positive("temperature", temperature)
    return _in_range(torch.tensor(value, device=like.device, dtype=torch.float64)).to(dtype)


def _check_scores(scores: torch.Tensor, row_max: torch.Tensor) -> None:
    """Refuse NaN and ``+inf`` scores (read off the row max, which either one poisons)."""
    if bool((torch.isnan(row_max) | torch.isposinf(row_max)).any()):
        n_nan, n_inf = int(torch.isnan(scores).sum()), int(torch.isposinf(scores).sum())
        if n_nan:
            raise ValueError(f"scores holds NaN at {n_nan} place(s); expected finite numbers or -inf (masked)")
        if n_inf:
            raise ValueError(f"scores holds +inf at {n_inf} place(s); expected finite numbers or -inf (masked)")
        raise ValueError("scores / temperature overflows float64 (per-key temperatures); use a larger temperature")


def _per_key(t: torch.Tensor, scores: torch.Tensor, dim: int) -> bool:
    """True when ``t`` varies along ``dim`` (one T per key): the max shift is then not exact."""
    shape = (1,) * (scores.dim() - t.dim()) + tuple(t.shape)
    return t.dim() > 0 and shape[dim] > 1


def shifted_logits(scores: torch.Tensor, temperature: TempLike = 1.0, dim: int = -1) -> torch.Tensor:
    """``(scores - max) / T`` along ``dim`` in at least fp32: every row's max is 0, masked entries
    stay ``-inf``, a fully masked row stays all ``-inf``. NaN and ``+inf`` scores are refused."""
    s = scores.to(_compute_dtype(scores))  # [..., n]
    t = _temperature(temperature, scores)
    if _per_key(t, scores, dim):
        s, t = s.double() / t.double(), torch.ones((), dtype=torch.float64, device=s.device)  # [..., n]
    row_max = s.amax(dim=dim, keepdim=True)  # [..., 1]
    _check_scores(scores, row_max)
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)  # masked rows: no shift
    return (s - row_max) / t  # [..., n], <= 0


def scaled_logits(scores: torch.Tensor, temperature: TempLike) -> torch.Tensor:
    """``scores / T`` in at least fp32 (unshifted: may overflow to inf; the functions below use
    :func:`shifted_logits`)."""
    t = _temperature(temperature, scores)
    return scores.to(_compute_dtype(scores)) / t  # [..., n]


def _weights(z: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax weights of shifted logits ``z`` and each row's total ``sum exp(z)`` (0 when fully
    masked, else >= 1): the weights of a fully masked row are 0."""
    e = torch.exp(z)  # [..., n], max 1 per row
    total = e.sum(dim=dim, keepdim=True)  # [..., 1]
    return e / total.clamp_min(torch.finfo(z.dtype).tiny), total  # [..., n], [..., 1]


def tempered_softmax(scores: torch.Tensor, temperature: TempLike = 1.0, dim: int = -1) -> torch.Tensor:
    """``softmax(scores / T)`` along ``dim``; returned in the dtype of ``scores``.

    Computed as ``softmax((scores - max) / T)`` in fp32 (fp64 kept), so no T in :data:`T_RANGE`
    overflows any dtype, even with scores near the dtype's max. ``temperature`` is a number or a
    tensor broadcastable to ``scores``. ``-inf`` scores get weight 0; a row of only ``-inf`` gets
    all-zero weights (not NaN); NaN or ``+inf`` scores raise ValueError; so does T outside
    ``[1e-6, 1e6]``, a non-finite T or a boolean. :func:`entropy` of the same input is the
    entropy of these weights (``0 log 0 = 0``).
    """
    z = shifted_logits(scores, temperature, dim)  # [..., n]
    return _weights(z, dim)[0].to(scores.dtype)


def entropy(scores: torch.Tensor, temperature: TempLike = 1.0, dim: int = -1) -> torch.Tensor:
    """Entropy in nats of ``softmax(scores / T)`` from the logits, never forming ``log(0)``.

    ``H = logsumexp(z) - sum_j p_j z_j`` with ``z = (scores - max) / T`` (H is shift invariant, and
    the shift keeps the two terms from cancelling at large magnitude). The edge cases agree with
    :func:`tempered_softmax`: ``-inf`` entries carry zero weight and drop out; a row of only
    ``-inf`` has entropy 0 (its weights are all 0); NaN or ``+inf`` scores and T outside
    ``[1e-6, 1e6]`` raise ValueError. Returned in fp32 or fp64, ``>= 0``.
    """
    z = shifted_logits(scores, temperature, dim)  # [..., n]
    p, total = _weights(z, dim)  # [..., n], [..., 1]
    pz = torch.where(p > 0, p * z, torch.zeros_like(z)).sum(dim=dim, keepdim=True)  # [..., 1], 0 * -inf -> 0
    lse = torch.log(total.clamp_min(torch.finfo(z.dtype).tiny))  # [..., 1]
    h = torch.where(total > 0, lse - pz, torch.zeros_like(pz))  # [..., 1]: fully masked rows: 0
    return h.squeeze(dim).clamp_min(0.0)  # [...]
