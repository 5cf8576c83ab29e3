"""Temperature schedules: each gives the logit multiplier ``m = 1/T`` (never T itself).

A schedule is a frozen dataclass called as ``schedule(layer, num_heads, positions, n_keys)`` with
``positions`` the absolute 0-indexed query positions ``[Lq]`` and ``n_keys`` the number of keys
each query sees ``[Lq]``; it returns the multiplier broadcastable to ``[num_heads, Lq]`` (fp32).
The scale factor ``s`` is a field of the schedules that use one.

References: YaRN (Peng et al., arXiv:2309.00071, eq. 22: sqrt(1/t) = 0.1 ln s + 1), Qwen v1
``use_logn_attn``, Llama 4's NoPE-layer attention temperature, SSMax (arXiv:2501.19399).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from . import _validate


def yarn_mscale(s: float, mscale: float = 1.0) -> float:
    """YaRN's cos/sin factor ``0.1 * mscale * ln s + 1`` (1 for s <= 1); transformers' get_mscale."""
    s = _validate.positive("s", s)
    return 1.0 if s <= 1 else 0.1 * mscale * math.log(s) + 1.0


def yarn_multiplier(s: float) -> float:
    """Logit multiplier of YaRN: ``(0.1 ln s + 1)^2`` (the cos/sin factor lands on q and k)."""
    return yarn_mscale(s) ** 2


def yarn_sqrt_multiplier(s: float) -> float:
    """``sqrt(0.1 ln s + 1)``: a variant seen in tutorials; NOT the paper's (which squares)."""
    return math.sqrt(yarn_mscale(s))


class Schedule(abc.ABC):
    """Base of every schedule; ``position_dependent`` says whether m varies with the query."""

    position_dependent: bool = False

    @abc.abstractmethod
    def __call__(
        self, layer: int, num_heads: int, positions: torch.Tensor, n_keys: torch.Tensor
    ) -> torch.Tensor:
        """The multiplier m = 1/T, broadcastable to ``[num_heads, Lq]``."""


def _const(value: float | torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A constant multiplier as an fp32 tensor ``[1, 1]`` or ``[H, 1]`` on ``positions``' device."""
    t = torch.as_tensor(value, dtype=torch.float32, device=positions.device)
    return t.reshape(-1, 1)  # [1 or H, 1]


@dataclass(frozen=True)
class Constant(Schedule):
    """Every head, layer and position gets ``multiplier``."""

    multiplier: float = 1.0

    def __post_init__(self) -> None:
        _validate.positive("multiplier", self.multiplier)

    def __call__(self, layer, num_heads, positions, n_keys):
        return _const(self.multiplier, positions)  # [1, 1]


@dataclass(frozen=True)
class PerLayer(Schedule):
    """Layer ``l`` gets ``multipliers[l]``."""

    multipliers: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for i, m in enumerate(self.multipliers):
            _validate.positive(f"multipliers[{i}]", m)

    def __call__(self, layer, num_heads, positions, n_keys):
        if not 0 <= layer < len(self.multipliers):
            raise ValueError(
                f"layer={layer} has no multiplier; per-layer schedule has {len(self.multipliers)}"
            )
        return _const(self.multipliers[layer], positions)  # [1, 1]


@dataclass(frozen=True)
class PerHead(Schedule):
    """Layer ``l``, head ``h`` gets ``multipliers[l][h]``."""

    multipliers: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        for i, row in enumerate(self.multipliers):
            for j, m in enumerate(row):
                _validate.positive(f"multipliers[{i}][{j}]", m)

    def __call__(self, layer, num_heads, positions, n_keys):
        if not 0 <= layer < len(self.multipliers):
            raise ValueError(f"layer={layer} has no multipliers; schedule has {len(self.multipliers)}")
        row = self.multipliers[layer]
        if len(row) != num_heads:
            raise ValueError(
                f"multipliers[{layer}] has {len(row)} values; the layer has {num_heads} heads"
            )
        return _const(row, positions)  # [H, 1]


@dataclass(frozen=True)
class Yarn(Schedule):
    """YaRN attention temperature for scale factor ``s``: ``m = (0.1 ln s + 1)^2``."""

    s: float = 1.0

    def __post_init__(self) -> None:
        _validate.at_least("s", self.s, 1.0)

    def __call__(self, layer, num_heads, positions, n_keys):
        return _const(yarn_multiplier(self.s), positions)  # [1, 1]


@dataclass(frozen=True)
class YarnSqrt(Schedule):
    """The tutorial variant ``m = sqrt(0.1 ln s + 1)``, kept apart from YaRN under its own name."""

    s: float = 1.0

    def __post_init__(self) -> None:
        _validate.at_least("s", self.s, 1.0)

    def __call__(self, layer, num_heads, positions, n_keys):
        return _const(yarn_sqrt_multiplier(self.s), positions)  # [1, 1]


@dataclass(frozen=True)
class LogN(Schedule):
    """Qwen v1 log-n scaling: ``m = log_{L0}(p)`` for 1-indexed position ``p > L0``, else 1."""

    trained_len: int = 2048
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        if _validate.positive_int("trained_len", self.trained_len) < 2:
            raise ValueError(f"trained_len={self.trained_len} is not allowed; expected >= 2")

    def __call__(self, layer, num_heads, positions, n_keys):
        p = positions.to(torch.float32) + 1.0  # [Lq], 1-indexed
        m = torch.log(p) / math.log(self.trained_len)  # [Lq]
        return torch.where(p > self.trained_len, m, torch.ones_like(m)).unsqueeze(0)  # [1, Lq]


@dataclass(frozen=True)
class Llama4(Schedule):
    """Llama 4 (NoPE layers): ``m = 1 + attn_scale * log1p(floor((pos + 1) / floor_scale))``."""

    floor_scale: float = 8192.0
    attn_scale: float = 0.1
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        _validate.positive("floor_scale", self.floor_scale)
        _validate.positive("attn_scale", self.attn_scale)

    def __call__(self, layer, num_heads, positions, n_keys):
        p = positions.to(torch.float32)  # [Lq], 0-indexed
        m = 1.0 + self.attn_scale * torch.log1p(torch.floor((p + 1.0) / self.floor_scale))  # [Lq]
        return m.unsqueeze(0)  # [1, Lq]


@dataclass(frozen=True)
class SSMax(Schedule):
    """Scalable-Softmax (arXiv:2501.19399): ``m = s * ln n`` over the ``n`` visible keys.

    At ``n = 1`` this is 0; a single visible key has weight 1 whatever m is, so m is floored at a
    tiny positive value to keep it a valid multiplier.
    """

    s: float = 0.43
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        _validate.positive("s", self.s)

    def __call__(self, layer, num_heads, positions, n_keys):
        n = n_keys.to(torch.float32)  # [Lq]
        return (self.s * torch.log(n)).clamp_min(1e-6).unsqueeze(0)  # [1, Lq]


def constant(multiplier: float = 1.0) -> Constant:
    return Constant(multiplier)


def per_layer(multipliers: Sequence[float]) -> PerLayer:
    return PerLayer(tuple(float(m) for m in multipliers))


def per_head(multipliers: Sequence[Sequence[float]] | torch.Tensor) -> PerHead:
    rows = multipliers.tolist() if torch.is_tensor(multipliers) else multipliers
    return PerHead(tuple(tuple(float(m) for m in row) for row in rows))


def yarn(s: float) -> Yarn:
    return Yarn(float(s))


def yarn_sqrt(s: float) -> YarnSqrt:
    return YarnSqrt(float(s))


def logn(trained_len: int) -> LogN:
    return LogN(trained_len)


def llama4(floor_scale: float = 8192.0, attn_scale: float = 0.1) -> Llama4:
    return Llama4(float(floor_scale), float(attn_scale))


def ssmax(s: float = 0.43) -> SSMax:
    return SSMax(float(s))


SCHEDULES = {
    "constant": Constant,
    "per_layer": PerLayer,
    "per_head": PerHead,
    "yarn": Yarn,
    "yarn_sqrt": YarnSqrt,
    "logn": LogN,
    "llama4": Llama4,
    "ssmax": SSMax,
}
