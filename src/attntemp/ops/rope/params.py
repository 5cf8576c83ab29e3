"""A typed RoPE extension: :class:`Rope`, what ``TemperatureSpec.rope`` holds.

One :class:`RopeKind` per type in :data:`KINDS` names the keys the type needs and those it may
take (as transformers' ``modeling_rope_utils`` validators do, except that a bad value raises here):

- ``linear``: Position Interpolation (Chen et al., arXiv:2306.15595), every frequency / s;
- ``ntk``: static NTK-aware scaling (bloc97), ``base' = base s^(d / (d - 2))``;
- ``dynamic``: dynamic NTK (emozilla), the NTK base grown with the sequence past L0;
- ``yarn``: YaRN (Peng et al., arXiv:2309.00071), NTK-by-parts with a cos/sin factor
  ``0.1 ln s + 1`` (so ``(0.1 ln s + 1)^2`` on the logits) unless ``attention_factor`` says;
- ``llama3``: Llama 3.1's by-parts interpolation (``low_freq_factor``, ``high_freq_factor``);
- ``longrope``: LongRoPE (Ding et al., arXiv:2402.13753), one divisor per rotary pair,
  ``short_factor`` up to L0 and ``long_factor`` past it, cos/sin factor ``sqrt(1 + ln s / ln L0)``
  unless ``attention_factor`` says.

A :class:`Rope` is immutable and hashable, and reads as the mapping it was made from (``rope["factor"]``,
``dict(rope)``, ``{**rope}``): the dict form lives at the JSON and engine boundaries
(:meth:`Rope.to_dict`); code asks :attr:`Rope.kind`, :attr:`Rope.factor`, :attr:`Rope.l0`,
:meth:`Rope.inv_freq` and :meth:`Rope.cos_sin_factor`. ``Rope()`` is "no extension" (falsy).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...utils import checks
from ...utils.lazy import lazy
from ..attention_config import MAX_FACTOR
from ..geometry import CONTEXT_KEY, L0_KEY, stated_l0
from . import functions as rope_math

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


COMMON = ("rope_type", "factor")  # every extension states its type and its scale s >= 1
PAIR_LISTS = ("short_factor", "long_factor")  # longrope: one factor per rotary pair (rotary_dim / 2) each


@dataclass(frozen=True)
class RopeKind:
    """A RoPE type's keys besides :data:`COMMON`: those it needs and those it may take."""

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...]

    @property
    def keys(self) -> set[str]:
        return {*COMMON, *self.required, *self.optional}


KINDS: dict[str, RopeKind] = {
    "linear": RopeKind("linear", (), (L0_KEY,)),
    "ntk": RopeKind("ntk", (), (L0_KEY,)),
    "dynamic": RopeKind("dynamic", (), (L0_KEY,)),
    "yarn": RopeKind(
        "yarn", (), (L0_KEY, "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")
    ),
    "llama3": RopeKind("llama3", ("low_freq_factor", "high_freq_factor"), (L0_KEY,)),
    "longrope": RopeKind("longrope", PAIR_LISTS, (L0_KEY, "attention_factor", CONTEXT_KEY)),
}
assert set(KINDS) == set(rope_math.EXTENSIONS)


def _deep_tuple(v: Any) -> Any:
    return tuple(_deep_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v


def deep_list(v: Any) -> Any:
    """Nested tuples (or lists) as nested lists: a frozen value as JSON writes it."""
    return [deep_list(x) for x in v] if isinstance(v, (list, tuple)) else v


def frozen_pairs(params: Any, name: str = "rope") -> tuple[tuple[str, Any], ...]:
    """A mapping (or ``(key, value)`` pairs) as sorted pairs, lists made tuples (hashable); a
    ValueError naming ``name`` for anything else (a spec's rope and its schedule_params)."""
    if params is None:
        return ()
    if isinstance(params, Mapping):
        items = list(params.items())
    elif (
        isinstance(params, Sequence)
        and not isinstance(params, str)
        and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in params)
    ):
        items = [tuple(p) for p in params]
    else:
        raise ValueError(f"{name}={params!r} is not allowed; expected an object of named values")
    return tuple(sorted((str(k), _deep_tuple(v)) for k, v in items))


class Rope(Mapping[str, Any]):
    """A RoPE extension's parameters, checked when made (every problem a ValueError naming the key)."""

    __slots__ = ("_pairs",)
    _pairs: tuple[tuple[str, Any], ...]

    def __init__(self, params: Any = None) -> None:
        pairs = params._pairs if isinstance(params, Rope) else frozen_pairs(params)
        object.__setattr__(self, "_pairs", pairs)
        if pairs:
            _check(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Rope is immutable; make a new one")

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and deepcopy (Ray ships specs to workers)
        return (Rope, (self.to_dict(),))

    # ----------------------------------------------------------------------------- the mapping
    def __getitem__(self, key: str) -> Any:
        for k, v in self._pairs:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rope):
            return self._pairs == other._pairs
        if isinstance(other, Mapping):
            return self._pairs == frozen_pairs(other)
        if isinstance(other, tuple):  # the (key, value) pairs TemperatureSpec.rope was before 0.2.0
            try:
                return self._pairs == frozen_pairs(other)
            except ValueError:
                return False
        return NotImplemented

    def __repr__(self) -> str:
        return f"Rope({self.to_dict()!r})"

    # ----------------------------------------------------------------------------- typed reads
    @property
    def kind(self) -> str:
        """The type (a key of :data:`KINDS`), or ``"none"`` for no extension."""
        return str(self.get("rope_type", "none"))

    @property
    def factor(self) -> float:
        """The scale s (1 without an extension)."""
        return float(self.get("factor", 1.0))

    @property
    def l0(self) -> int | None:
        """The trained length it states (None: the model's own)."""
        value = stated_l0(self)
        return None if value is None else int(value)

    @property
    def params(self) -> dict[str, Any]:
        """The type's own keys (everything but :data:`COMMON` and L0), lists as lists."""
        return {k: deep_list(v) for k, v in self._pairs if k not in (*COMMON, L0_KEY)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON / engine form: a plain dict, lists as lists (``{}`` for no extension)."""
        return {k: deep_list(v) for k, v in self._pairs}

    def updated(self, **values: Any) -> Rope:
        """This extension with ``values`` set (checked as a new one is): L0 filled in
        (``updated(original_max_position_embeddings=L0)``), longrope's short factors made its long
        ones."""
        return Rope({**dict(self._pairs), **values})

    def arguments(self, trained: int, seq_len: int | None = None) -> dict[str, Any]:
        """The keyword arguments of :mod:`.rope`'s function of this type for a sequence of
        ``seq_len`` tokens, L0 the stated one or ``trained``."""
        l0 = self.l0 or checks.positive_int("trained", trained)
        if self.kind in ("linear", "ntk"):
            return {"factor": self.factor}
        if self.kind == "dynamic":
            return {"factor": self.factor, "max_position_embeddings": l0, "seq_len": seq_len}
        extra = {"seq_len": seq_len} if self.kind == "longrope" else {}
        return {"factor": self.factor, L0_KEY: l0, **self.params, **extra}

    def inv_freq(self, dim: int, base: float, trained: int, seq_len: int | None = None) -> torch.Tensor:
        """``[dim/2]`` inverse frequencies for a sequence of ``seq_len`` tokens (dynamic and longrope
        depend on it; transformers' reading); plain RoPE without an extension."""
        if not self:
            return rope_math.default(dim, base)[0]  # [dim/2]
        return rope_math.ROPE_FUNCTIONS[self.kind](dim, base, **self.arguments(trained, seq_len))[0]  # [dim/2]

    def cos_sin_factor(self, trained: int, dim: int = 64, base: float = 10000.0) -> float:
        """The factor on cos and sin (so its square on the logits): YaRN's and LongRoPE's own, or
        the stated ``attention_factor``; 1 for the other types."""
        if not self:
            return 1.0
        dim = 2 * len(self["short_factor"]) if self.kind == "longrope" else dim  # its lists fix the dim
        return float(rope_math.ROPE_FUNCTIONS[self.kind](dim, base, **self.arguments(trained, None))[1])


def _check_keys(rope: Rope) -> RopeKind:
    """A known ``rope_type``, a ``factor``, the keys the type needs and no others."""
    kind = KINDS[checks.choice("rope.rope_type", rope.get("rope_type", ""), tuple(KINDS))]
    if "factor" not in rope:
        raise ValueError(f"rope has no 'factor' (the scale s >= 1 of {kind.name!r}); got keys {sorted(rope)}")
    unknown = sorted(set(rope) - kind.keys)
    if unknown:
        raise ValueError(f"rope has unknown key(s) {unknown} for {kind.name!r}; allowed: {sorted(kind.keys)}")
    missing = [k for k in kind.required if k not in rope]
    if missing:
        raise ValueError(
            f"rope has no {missing[0]!r} for {kind.name!r} (transformers refuses a {kind.name} rope without "
            f"{' and '.join(kind.required)}); got keys {sorted(rope)}"
        )
    return kind


def _check_pair_lists(rope: Rope) -> int:
    """longrope's factor lists: numbers > 0, as many in each; returns that count (rotary_dim / 2)."""
    sizes = []
    for key in PAIR_LISTS:
        values = rope[key]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(
                f"rope.{key}={values!r} is not allowed; expected a list of numbers > 0, one per frequency pair "
                "(rotary_dim / 2)"
            )
        sizes.append(len([checks.positive(f"rope.{key}[{i}]", v) for i, v in enumerate(values)]))
    if sizes[0] != sizes[1]:
        raise ValueError(
            f"rope.short_factor has {sizes[0]} values and rope.long_factor {sizes[1]}; expected the same count in "
            "each, one per frequency pair (rotary_dim / 2)"
        )
    return sizes[0]


def _check(rope: Rope) -> None:
    """The keys (:func:`_check_keys`), ``factor`` in [1, MAX_FACTOR], L0 a positive integer, and
    every value checked by computing the frequencies of a 64-dim RoPE (longrope: the dimension
    its factor lists give)."""
    kind = _check_keys(rope)
    checks.within("rope.factor", rope["factor"], 1.0, MAX_FACTOR, " (a context 10,000 times L0 at most)")
    if stated_l0(rope) is not None:
        checks.positive_int(L0_KEY, stated_l0(rope))
    if not isinstance(rope.get("truncate", True), bool):  # "yes" or 0 would be read by truthiness
        raise ValueError(f"rope.truncate={rope['truncate']!r} is not allowed; expected true or false")
    dim = 2 * _check_pair_lists(rope) if kind.name == "longrope" else 64
    try:
        rope_math.ROPE_FUNCTIONS[kind.name](dim, 10000.0, **rope.arguments(2048))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"rope ({kind.name}): {exc}") from None
