"""Temperature schedules: each gives the logit multiplier ``m = 1/T`` (never T itself).

A schedule is a frozen dataclass called as ``schedule(layer, num_heads, positions, n_keys)`` with
``positions`` the absolute 0-indexed query positions ``[Lq]`` and ``n_keys`` the number of keys
each query sees ``[Lq]``; it returns the multiplier broadcastable to ``[num_heads, Lq]`` (fp32).
The scale factor ``s`` is a field of the schedules that use one.

References: YaRN (Peng et al., arXiv:2309.00071, eq. 22: sqrt(1/t) = 0.1 ln s + 1), Qwen v1
``use_logn_attn``, Llama 4's NoPE-layer attention temperature, SSMax (arXiv:2501.19399),
scale-invariant attention (arXiv:2505.17083) for the length law ``log_length``.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..utils import checks
from ..utils.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


def yarn_mscale(s: float, mscale: float = 1.0) -> float:
    """YaRN's cos/sin factor ``0.1 * mscale * ln s + 1`` (1 for s <= 1); transformers' get_mscale."""
    s = checks.positive("s", s)
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
    def __call__(self, layer: int, num_heads: int, positions: torch.Tensor, n_keys: torch.Tensor) -> torch.Tensor:
        """The multiplier m = 1/T, broadcastable to ``[num_heads, Lq]``."""

    def check_model(self, num_layers: int, num_heads: int) -> None:  # noqa: B027 (most have no parameters)
        """Raise unless the schedule's parameters fit a model of this size (most have none to check)."""


def _const(value: float, positions: torch.Tensor) -> torch.Tensor:
    """A constant multiplier as an fp32 tensor ``[1, 1]`` on ``positions``' device."""
    return torch.tensor(value, dtype=torch.float32, device=positions.device).reshape(1, 1)  # [1, 1]


class StaticSchedule(Schedule):
    """A schedule whose m is one number for every layer, head and position (``value()``, float64)."""

    @abc.abstractmethod
    def value(self) -> float:
        """The multiplier m = 1/T as a Python float."""

    def __call__(self, layer, num_heads, positions, n_keys):
        return _const(self.value(), positions)  # [1, 1]


@dataclass(frozen=True)
class Constant(StaticSchedule):
    """Every head, layer and position gets ``multiplier``."""

    multiplier: float = 1.0

    def __post_init__(self) -> None:
        checks.positive("multiplier", self.multiplier)

    def value(self) -> float:
        return float(self.multiplier)


@dataclass(frozen=True)
class Yarn(StaticSchedule):
    """YaRN attention temperature for scale factor ``s``: ``m = (0.1 ln s + 1)^2``."""

    s: float = 1.0

    def __post_init__(self) -> None:
        checks.at_least("s", self.s, 1.0)

    def value(self) -> float:
        return yarn_multiplier(self.s)


@dataclass(frozen=True)
class YarnSqrt(StaticSchedule):
    """The tutorial variant ``m = sqrt(0.1 ln s + 1)``, kept apart from YaRN under its own name."""

    s: float = 1.0

    def __post_init__(self) -> None:
        checks.at_least("s", self.s, 1.0)

    def value(self) -> float:
        return yarn_sqrt_multiplier(self.s)


@dataclass(frozen=True)
class LogN(Schedule):
    """Qwen v1 log-n scaling: ``m = log_{L0}(p)`` for 1-indexed position ``p > L0``, else 1."""

    trained_len: int = 2048
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        if checks.positive_int("trained_len", self.trained_len) < 2:
            raise ValueError(f"trained_len={self.trained_len} is not allowed; expected >= 2")

    def __call__(self, layer, num_heads, positions, n_keys):
        p = positions.to(torch.float32) + 1.0  # [Lq], 1-indexed
        m = torch.log(p) / math.log(self.trained_len)  # [Lq]
        return torch.where(p > self.trained_len, m, torch.ones_like(m)).unsqueeze(0)  # [1, Lq]


@dataclass(frozen=True)
class SqrtLogN(LogN):
    """``m = sqrt(log_{L0}(p))`` for 1-indexed position ``p > L0``, else 1: the sqrt(2 ln n) growth
    of the largest of n Gaussian scores, normalised to 1 at the trained length (the law that, with
    Qwen's ln n, arXiv:2605.12697 tells apart from each row's score gaps)."""

    def __call__(self, layer, num_heads, positions, n_keys):
        return super().__call__(layer, num_heads, positions, n_keys).sqrt()  # [1, Lq]


@dataclass(frozen=True)
class GatedConstant(Schedule):
    """A constant gated by length: ``m = multiplier`` for a query that sees more than ``trained_len``
    keys, 1 for one that sees at most that many.

    Nothing changes up to the trained length L0 (unlike ``constant``, which tempers every query);
    only the queries past it, the ones whose attention spreads over more keys than in training,
    get ``multiplier`` (< 1 softens, > 1 sharpens). The step at L0 is the gate of Qwen v1's log-n
    (1 up to L0); here the value past it is one number instead of ``log_{L0}(p)``. A query of a
    sliding-window layer never sees more than its window, so it is never gated on when the window
    is at most L0.
    """

    trained_len: int = 2048
    multiplier: float = 1.0
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        checks.positive_int("trained_len", self.trained_len)
        checks.positive("multiplier", self.multiplier)

    def __call__(self, layer, num_heads, positions, n_keys):
        past = n_keys.to(torch.float32) > self.trained_len  # [Lq]
        m = torch.where(past, self.multiplier, 1.0).to(torch.float32)  # [Lq]
        return m.unsqueeze(0)  # [1, Lq]


@dataclass(frozen=True)
class Llama4(Schedule):
    """Llama 4 (NoPE layers): ``m = 1 + attn_scale * log1p(floor((pos + 1) / floor_scale))``."""

    floor_scale: float = 8192.0
    attn_scale: float = 0.1
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        checks.positive("floor_scale", self.floor_scale)
        checks.positive("attn_scale", self.attn_scale)

    def __call__(self, layer, num_heads, positions, n_keys):
        p = positions.to(torch.float32)  # [Lq], 0-indexed
        m = 1.0 + self.attn_scale * torch.log1p(torch.floor((p + 1.0) / self.floor_scale))  # [Lq]
        return m.unsqueeze(0)  # [1, Lq]


@dataclass(frozen=True)
class Llama4Scaling(Schedule):
    """Mistral 3's ``llama_4_scaling_beta`` (Ministral 3, Mistral Large 3, Mistral 4; transformers'
    ``get_llama_4_attn_scale``): ``m = 1 + beta * log1p(floor(pos / L0))``, L0 the rope's
    ``original_max_position_embeddings``. Llama 4's form (:class:`Llama4`) counts from pos + 1."""

    beta: float = 0.1
    original_max_position_embeddings: float = 16384.0
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        checks.positive("beta", self.beta)
        checks.positive("original_max_position_embeddings", self.original_max_position_embeddings)

    def __call__(self, layer, num_heads, positions, n_keys):
        p = positions.to(torch.float32)  # [Lq], 0-indexed
        m = 1.0 + self.beta * torch.log1p(torch.floor(p / self.original_max_position_embeddings))  # [Lq]
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
        checks.positive("s", self.s)

    def __call__(self, layer, num_heads, positions, n_keys):
        n = n_keys.to(torch.float32)  # [Lq]
        return (self.s * torch.log(n)).clamp_min(1e-6).unsqueeze(0)  # [1, Lq]


Coefficient = float | tuple[float, ...] | tuple[tuple[float, ...], ...]


def _coefficient(name: str, value: object) -> Coefficient:
    """A number, one per layer, or one per (layer, head): as floats in (nested) tuples."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"{name}={value!r} is not allowed; expected a finite number")
        return v
    if isinstance(value, (list, tuple)) and value:
        rows = tuple(_coefficient(f"{name}[{i}]", v) for i, v in enumerate(value))
        if all(isinstance(r, float) for r in rows) or all(
            isinstance(r, tuple) and all(isinstance(x, float) for x in r) for r in rows
        ):
            return rows  # type: ignore[return-value]
    raise ValueError(
        f"{name}={value!r} is not allowed; expected a number, a list per layer, or a list of lists per (layer, head)"
    )


def _row(c: Coefficient, layer: int, num_heads: int, device: torch.device) -> torch.Tensor:
    """The coefficient of ``layer`` as ``[H or 1, 1]`` fp32."""
    if isinstance(c, float):
        return torch.tensor([[c]], device=device)  # [1, 1]
    row = c[layer]
    if isinstance(row, tuple):
        return torch.tensor(row, dtype=torch.float32, device=device).reshape(-1, 1)  # [H, 1]
    return torch.tensor([[row]], dtype=torch.float32, device=device)  # [1, 1]


def _shape(c: Coefficient) -> tuple[int, ...]:
    if isinstance(c, float):
        return ()
    first = c[0]
    return (len(c),) if isinstance(first, float) else (len(c), len(first))


# the schedules a gradient learns (hf.learnable): the second learns b alone (a stays at init, 0: m = 1 up to L0)
LEARNED_SCHEDULES = ("log_length", "log_length_slope")


@dataclass(frozen=True)
class LogLength(Schedule):
    """A power law of the visible keys n past the trained length L0, per layer or head:

    ``ln m = a + b ln(max(1, n / L0))``, i.e. ``m = e^a`` up to L0 and ``e^a (n / L0)^b`` beyond.

    ``a`` and ``b`` are each a number, one per layer, or one per (layer, head). With ``a = 0``
    nothing changes up to the trained length. Qwen's log-n (``m = ln n / ln L0``) and SSMax
    (``m = s ln n``, arXiv:2501.19399) grow like ``ln n``; this law spans sharper and softer
    growth with one slope, the form of the position-dependent logit scaling of scale-invariant
    attention (arXiv:2505.17083). Learnable by ``attntemp tune --method gradient --schedule log_length``.
    """

    trained_len: int = 2048
    a: Coefficient = 0.0
    b: Coefficient = 0.0
    position_dependent: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        checks.positive_int("trained_len", self.trained_len)
        object.__setattr__(self, "a", _coefficient("a", self.a))
        object.__setattr__(self, "b", _coefficient("b", self.b))

    def check_model(self, num_layers: int, num_heads: int) -> None:
        for name in ("a", "b"):
            shape = _shape(getattr(self, name))
            if shape and (shape[0] != num_layers or (len(shape) == 2 and shape[1] != num_heads)):
                raise ValueError(
                    f"schedule_params {name} has shape {list(shape)}; the model has {num_layers} "
                    f"layers of {num_heads} heads (expected a number, [{num_layers}] or "
                    f"[{num_layers}, {num_heads}])"
                )

    def __call__(self, layer, num_heads, positions, n_keys):
        dev = n_keys.device
        x = (n_keys.to(torch.float32) / self.trained_len).clamp_min(1.0).log().unsqueeze(0)  # [1, Lq]
        a, b = _row(self.a, layer, num_heads, dev), _row(self.b, layer, num_heads, dev)  # [H|1, 1]
        return (a + b * x).exp()  # [H|1, Lq]


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "constant": Constant,
    "yarn": Yarn,
    "yarn_sqrt": YarnSqrt,
    "logn": LogN,
    "llama4": Llama4,
    "llama_4_scaling": Llama4Scaling,
    "ssmax": SSMax,
    "log_length": LogLength,
    "sqrt_logn": SqrtLogN,
    "gated_constant": GatedConstant,
}
