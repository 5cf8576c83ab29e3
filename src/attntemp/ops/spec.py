"""TemperatureSpec: what multiplier m = 1/T each (layer, head) gets, and by position.

The multiplier of head h in layer l at query position p with n visible keys is

    m = multiplier * layers[l] * heads[l][h] * schedule(l, p, n)

where ``layers`` and ``heads`` are optional and ``schedule`` is one of
``attntemp.ops.schedules.SCHEDULES`` (constant, gated_constant, yarn, yarn_sqrt, logn, llama4, ssmax, ...). Per-layer
and per-head multipliers have this one representation: the ``layers`` and ``heads`` fields.
``rope`` optionally names a RoPE extension (``{"rope_type": "yarn", "factor": 4.0, ...}``) applied
together with the temperatures.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..utils import checks
from ..utils.lazy import is_tensor, lazy
from . import schedules
from .attention_config import MULTIPLIERS
from .rope.params import PAIR_LISTS, Rope, deep_list, frozen_pairs

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


GRANULARITIES = ("global", "layer", "head")  # one m for the model, one per layer, one per head
FORMAT = "attntemp.TemperatureSpec/1"
FIELDS = ("multiplier", "layers", "heads", "schedule", "schedule_params", "rope", "layer_types")
LAYER_TYPES = ("full_attention", "sliding_attention")  # transformers' config.layer_types values


Params = Mapping[str, Any] | Sequence[tuple[str, Any]] | None


def _positive(name: str, value: Any) -> float:
    """A finite number > 0: an int or float (a tensor scalar too), never a string or a boolean."""
    if is_tensor(value) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (str, bytes)) or value is None:
        raise ValueError(f"{name}={value!r} is not allowed; expected a finite number > 0")
    return checks.positive(name, value)


def _number(name: str, value: Any) -> float:
    """A multiplier m: a finite number in :data:`MULTIPLIERS` (outside, attention is uniform or one-hot)."""
    return checks.within(name, _positive(name, value), *MULTIPLIERS, why=": outside it attention is uniform or one-hot")


def _row(name: str, values: Any) -> tuple[float, ...]:
    """A sequence of positive multipliers as floats, or a ValueError naming ``name``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name}={values!r} is not allowed; expected a list of numbers")
    return tuple(_number(f"{name}[{i}]", m) for i, m in enumerate(values))


def _heads(heads: Any) -> tuple[tuple[float, ...], ...] | None:
    """Rows of per-head multipliers, one per layer, all of one length (a ValueError otherwise)."""
    rows = heads.tolist() if is_tensor(heads) else heads
    if rows is None:
        return None
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise ValueError(f"heads={heads!r} is not allowed; expected a list of rows (one list per layer)")
    table = tuple(_row(f"heads[{i}]", r) for i, r in enumerate(rows))
    sizes = sorted({len(r) for r in table})
    if len(sizes) > 1:
        raise ValueError(f"heads has rows of {sizes} values; expected one row per layer, each with one m per head")
    return table


def _layer_types(types: Any) -> tuple[str, ...] | None:
    """None, or a non-empty list of ``LAYER_TYPES`` as a sorted tuple (a ValueError naming the value)."""
    if types is None:
        return None
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence) or not types:
        raise ValueError(f"layer_types={types!r} is not allowed; expected a non-empty list of {list(LAYER_TYPES)}")
    return tuple(sorted({checks.choice("layer_types[]", t, LAYER_TYPES) for t in types}))


@dataclass(frozen=True, init=False)
class TemperatureSpec:
    """Per-(layer, head) logit multipliers (m = 1/T) and a position schedule; JSON round-trips.

    ``multiplier``: global m. ``layers``: one m per layer. ``heads``: one row of m per layer (a
    list of lists or a ``[layers, heads]`` tensor). ``schedule`` / ``schedule_params``: a position
    schedule (``schedules.SCHEDULES`` name and its keyword arguments). ``rope``: optional RoPE
    extension for ``attntemp.extend_context`` (a dict). ``layer_types``: the layer types the spec
    tempers (``full_attention``, ``sliding_attention``; None: every layer), the others keep m = 1;
    whoever asks a layer's m then says its type. Stored normalised: tuples, sorted pairs (JSON
    leaves ``layer_types`` out when it is None, so older specs read and write unchanged).
    """

    multiplier: float
    layers: tuple[float, ...] | None
    heads: tuple[tuple[float, ...], ...] | None
    schedule: str
    schedule_params: tuple[tuple[str, Any], ...]
    rope: Rope
    layer_types: tuple[str, ...] | None
    _schedule: schedules.Schedule = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        multiplier: float = 1.0,
        layers: Sequence[float] | None = None,
        heads: Sequence[Sequence[float]] | torch.Tensor | None = None,
        schedule: str = "constant",
        schedule_params: Params = (),
        rope: Params = (),
        layer_types: Sequence[str] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "multiplier", _number("multiplier", multiplier))
        set_(self, "layers", None if layers is None else _row("layers", layers))
        set_(self, "heads", _heads(heads))
        if not isinstance(schedule, str):
            raise ValueError(f"schedule={schedule!r} is not allowed; expected one of {sorted(schedules.SCHEDULES)}")
        set_(self, "schedule", checks.choice("schedule", schedule, schedules.SCHEDULES))
        set_(self, "schedule_params", frozen_pairs(schedule_params, "schedule_params"))
        set_(self, "rope", Rope(rope))
        set_(self, "layer_types", _layer_types(layer_types))
        try:
            set_(self, "_schedule", schedules.SCHEDULES[schedule](**dict(self.schedule_params)))
        except (TypeError, ValueError) as exc:
            params = dict(self.schedule_params)
            raise ValueError(f"schedule_params={params} for {schedule!r}: {exc}") from None

    # ----------------------------------------------------------------------------- queries
    @property
    def position_dependent(self) -> bool:
        return self._schedule.position_dependent

    @functools.cached_property
    def is_identity(self) -> bool:
        """True when every multiplier is exactly 1 (the patch then changes nothing)."""
        if self.position_dependent:
            return False
        ones = self.multiplier == 1.0 and all(m == 1.0 for m in self.layers or ())
        ones = ones and all(m == 1.0 for row in self.heads or () for m in row)
        return ones and self.schedule_multiplier() == 1.0

    def schedule_multiplier(self) -> float:
        """The static schedule's m as a Python float (1 for ``constant`` without parameters);
        raise for a position-dependent schedule, whose m is no single number."""
        if not isinstance(self._schedule, schedules.StaticSchedule):
            raise ValueError(f"schedule={self.schedule!r} is position-dependent: its m changes with the query")
        return self._schedule.value()

    def check_model(self, num_layers: int, num_heads: int) -> None:
        """Raise unless ``layers``/``heads`` fit a model of this size."""
        if self.layers is not None and len(self.layers) != num_layers:
            raise ValueError(f"layers has {len(self.layers)} values; the model has {num_layers} layers")
        if self.heads is not None:
            if len(self.heads) != num_layers:
                raise ValueError(f"heads has {len(self.heads)} rows; the model has {num_layers} layers")
            for i, row in enumerate(self.heads):
                if len(row) != num_heads:
                    raise ValueError(f"heads[{i}] has {len(row)} values; the model has {num_heads} heads")
        self._schedule.check_model(num_layers, num_heads)

    def check_rotary(self, rotary_dim: int | None) -> None:
        """Raise unless a longrope ``rope``'s factor lists hold one value per frequency pair of a model
        whose rotary dimension is ``rotary_dim`` (None: not known, nothing to check)."""
        rope = self.rope
        if rotary_dim is None or rope.kind != "longrope":
            return
        for key in PAIR_LISTS:
            if len(rope[key]) != rotary_dim // 2:
                raise ValueError(
                    f"rope.{key} has {len(rope[key])} values; expected {rotary_dim // 2}, one per frequency pair of "
                    f"the model's rotary dimension {rotary_dim}"
                )

    def targets(self, layer_type: str | None) -> bool:
        """Whether a layer of ``layer_type`` is tempered (every layer when ``layer_types`` is None);
        a ValueError when the spec targets layer types and the caller did not say the layer's."""
        if self.layer_types is None:
            return True
        if layer_type is None:
            raise ValueError(f"the spec tempers layer_types={list(self.layer_types)} only; give each layer's type")
        return layer_type in self.layer_types

    def static_multipliers(self, layer: int, num_heads: int, layer_type: str | None = None) -> torch.Tensor:
        """The position-independent part ``multiplier * layers[l] * heads[l]`` as ``[H]`` fp32
        (ones on a layer whose type the spec does not target)."""
        if not self.targets(layer_type):
            return torch.ones(num_heads, dtype=torch.float32)  # [H]
        m = torch.full((num_heads,), self.multiplier, dtype=torch.float32)  # [H]
        if self.layers is not None:
            m = m * self.layers[layer]
        if self.heads is not None:
            m = m * torch.tensor(self.heads[layer], dtype=torch.float32)  # [H]
        if not self.position_dependent:
            m = m * self.schedule_multiplier()
        return m

    def multipliers(
        self, layer: int, num_heads: int, positions: torch.Tensor, n_keys: torch.Tensor, layer_type: str | None = None
    ) -> torch.Tensor:
        """m for each head and query: ``[H, Lq]`` (positions, n_keys ``[Lq]``) or ``[B, H, Lq]``."""
        static = self.static_multipliers(layer, num_heads, layer_type).to(positions.device)  # [H]
        if not self.position_dependent or not self.targets(layer_type):
            return static.unsqueeze(-1)  # [H, 1]
        flat_p, flat_n = positions.reshape(-1), n_keys.reshape(-1)  # [B*Lq]
        sched = self._schedule(layer, num_heads, flat_p, flat_n)  # [1 or H, B*Lq]
        out = static.unsqueeze(-1) * sched  # [H, B*Lq]
        if positions.dim() == 1:
            return out  # [H, Lq]
        b, lq = positions.shape
        return out.reshape(num_heads, b, lq).transpose(0, 1)  # [B, H, Lq]

    # ----------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field in its order, tuples as lists (``layer_types`` left out when None)."""
        d = {
            "multiplier": self.multiplier,
            "layers": deep_list(self.layers),
            "heads": deep_list(self.heads),
            "schedule": self.schedule,
            "schedule_params": {k: deep_list(v) for k, v in self.schedule_params},
            "rope": self.rope.to_dict() or None,
        }
        return d if self.layer_types is None else {**d, "layer_types": list(self.layer_types)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TemperatureSpec:
        """A spec from its JSON object; every field's type and value checked (ValueError naming it)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"spec must be an object of {list(FIELDS)}, got {type(data).__name__}")
        unknown = set(data) - set(FIELDS) - {"format"}
        if unknown:
            hint = (
                " (a baked checkpoint's record: its temperature is already in the weights)" if "baked" in data else ""
            )
            raise ValueError(f"spec has unknown field(s) {sorted(unknown)}; allowed: {list(FIELDS)}{hint}")
        if data.get("format", FORMAT) != FORMAT:
            raise ValueError(f"spec format={data['format']!r} is not allowed; expected {FORMAT!r}")
        return cls(**{k: v for k, v in data.items() if k in FIELDS and v is not None})

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **self.to_dict()}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> TemperatureSpec:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"spec is not valid JSON: {str(exc)[:200]}") from None
        if not isinstance(data, dict):
            raise ValueError(f"spec JSON must be an object, got {type(data).__name__}")
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> TemperatureSpec:
        """The spec in a JSON file; every problem raised as ``spec='PATH': what is wrong``."""
        path = Path(path)
        if not str(path) or path.is_dir():
            raise ValueError(f"spec={str(path)!r} is a folder; expected a TemperatureSpec JSON file")
        if not path.is_file():
            raise FileNotFoundError(f"spec={str(path)!r}: no such file")
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"spec={str(path)!r}: {exc}") from None

    # ----------------------------------------------------------------------------- builders
    @classmethod
    def per_head(cls, heads: torch.Tensor | list, **kw: Any) -> TemperatureSpec:
        """A spec from a ``[layers, heads]`` table of multipliers."""
        rows = heads.tolist() if is_tensor(heads) else heads
        return cls(heads=tuple(tuple(r) for r in rows), **kw)

    @classmethod
    def yarn(cls, factor: float, original_max_position_embeddings: int, **rope: Any) -> TemperatureSpec:
        """YaRN frequencies with its temperature as a spec: m = (0.1 ln s + 1)^2 on the logits.

        The rope's own attention_factor is set to 1 so the temperature is applied once, by us.
        """
        rope = {
            "rope_type": "yarn",
            "factor": float(factor),
            "original_max_position_embeddings": int(original_max_position_embeddings),
            "attention_factor": 1.0,
            **rope,
        }
        return cls(schedule="yarn", schedule_params={"s": float(factor)}, rope=rope)

    def with_layer_types(self, layer_types: Sequence[str] | None) -> TemperatureSpec:
        """This spec tempering ``layer_types`` only (None: every layer)."""
        d = self.to_dict()
        d["layer_types"] = None if layer_types is None else list(layer_types)
        return TemperatureSpec.from_dict(d)

    def with_rope(self, rope: Params) -> TemperatureSpec:
        """This spec with ``rope`` (a :class:`Rope`, or its dict form; None: no extension) in place of its own."""
        return replace(self, rope=Rope(rope))

    def heads_table(self, num_layers: int, num_heads: int, layer_types: Sequence[str] | None = None) -> torch.Tensor:
        """The static multipliers as a ``[layers, heads]`` table (for plots and baking); ``layer_types``:
        the model's type of each layer, needed when the spec targets layer types."""
        types = list(layer_types) if layer_types is not None else [None] * num_layers
        return torch.stack([self.static_multipliers(i, num_heads, types[i]) for i in range(num_layers)])  # [L, H]


def log_multiplier_table(spec: TemperatureSpec, num_layers: int, num_heads: int) -> list[list[float]]:
    """ln m per (layer, head), rounded for display."""
    t = spec.heads_table(num_layers, num_heads)
    return [[round(math.log(float(x)), 6) for x in row] for row in t]
