"""``attntemp.monitor``: attention statistics of every generated token, while ``generate`` runs.

    with attntemp.monitor(model, reference=attntemp.monitor.reference(model, "stdlib")) as mon:
        model.generate(ids, max_new_tokens=64, stopping_criteria=mon.stopping_criteria)
    mon.steps[-1].line()

A probe on attntemp's attention function (on top of the model's temperature patch, if any, whose
multipliers it sees) hands each layer the new query of each row and the cached keys that query
sees to :func:`attntemp.ops.attention_stats.attention_stats`, the blockwise kernel of ``measure``:
one query row is O(n) time and memory, and a step keeps ``[rows, layers, heads]`` numbers, so
memory grows linearly with the generated length. Step k is the query that predicts generated
token k (step 0: the prompt's last query). Keys are located by the query's absolute position
(``position_ids``): with left padding and sliding-window caches a row sees the last
``min(position + 1, window, cached)`` keys, and the sink is the first keys of the sequence. It
needs transformers' default dynamic cache (a static cache keeps empty slots after the keys).

With a :class:`~attntemp.analysis.reference_profile.Reference` each step carries its shift from
the trained-length profile and the flags of :data:`~attntemp.analysis.reference_profile.FLAGS`.
A ``callback(step)`` may return ``"stop"`` (ends ``generate`` through
:attr:`Monitor.stopping_criteria`) or a :class:`TemperatureSpec` with the same RoPE, which the
following steps run under.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..hf.introspect import attention_modules, model_geometry
from ..hf.patch import PROBE, STATE, LayerState, query_positions
from ..ops.rope.params import Rope
from ..ops.spec import TemperatureSpec
from ..utils import checks
from .config import DEFAULT_QUANTILE, DEFAULT_WINDOW, FLAGS, STEP_STATS
from .measure import AttentionStats
from .monitor_rows import Seen, assemble, group_stats, whole_stats
from .reference_profile import (
    Reference,
    probed,
    raise_flags,
    reference,
    shifts,
    worst_heads,
)

STOP = "stop"  # what a callback returns to end generation


@dataclass(frozen=True)
class Step:
    """One recorded generation step: per row its query ``positions`` ``[B]``, ``stats`` per name
    ``[B, layers, heads]``, and with a reference per name its ``shifts`` from it and their ``trend``
    (mean over the row's last ``window`` recorded steps) ``[B]``, the ``flags`` ``[B]`` raised by
    the trend, and the :attr:`worst` head."""

    run: int
    index: int
    positions: np.ndarray
    stats: dict[str, np.ndarray]
    shifts: dict[str, np.ndarray]
    trend: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    reference: Reference | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def worst(self) -> np.ndarray | None:
        """``[B, 3]``: per row the (layer, head) furthest from its reference mean of H / ln n, and
        that distance in reference standard deviations (None without a reference)."""
        return None if self.reference is None else worst_heads(self.reference, self.stats)

    def flagged(self, row: int = 0) -> list[str]:
        return [f for f, v in self.flags.items() if v[row]]

    def line(self, row: int = 0, token: str | None = None) -> str:
        """The compact per-step line: mean entropy and H / ln n, the worst head, the flags."""
        parts = [f"step {self.index:>4}", f"pos {int(self.positions[row]):>6}"]
        if token is not None:
            parts.append(f"{token!r:<10}")
        parts.append(f"H {np.nanmean(self.stats['entropy'][row]):.3f}")
        parts.append(f"H/ln n {np.nanmean(self.stats['norm_entropy'][row]):.3f}")
        if self.worst is not None:
            layer, head, z = self.worst[row]
            parts.append(f"worst L{int(layer)}H{int(head)} {z:+.1f} sd")
        if self.flags:
            parts.append(",".join(self.flagged(row)) or "-")
        return " | ".join(parts)

    def records(self, tokens: list[str] | None = None) -> list[dict[str, Any]]:
        """One JSON-ready dict per row (``tokens``: the token each row's query predicted)."""
        out = []
        for b in range(len(self.positions)):
            rec: dict[str, Any] = {"run": self.run, "step": self.index, "row": b, "position": int(self.positions[b])}
            if tokens is not None:
                rec["token"] = tokens[b]
            rec["mean"] = {n: _num(np.nanmean(v[b])) for n, v in self.stats.items()}
            rec["layers"] = {n: [_num(x) for x in np.nanmean(v[b], -1)] for n, v in self.stats.items()}
            rec["heads"] = {n: [[_num(x) for x in r] for r in v[b]] for n, v in self.stats.items()}
            if self.flags:
                rec["shift"] = {n: _num(v[b]) for n, v in self.shifts.items()}
                rec["trend"] = {n: _num(v[b]) for n, v in self.trend.items()}
                rec["flags"] = self.flagged(b)
                assert self.worst is not None  # set with the flags
                rec["worst"] = {
                    "layer": int(self.worst[b, 0]),
                    "head": int(self.worst[b, 1]),
                    "sd": _num(self.worst[b, 2]),
                }
            out.append(rec)
        return out


def _rows(steps: list[Step], name: str, width: int) -> np.ndarray:
    """One run's steps as ``[B, width, layers, heads]`` (NaN after its last step)."""
    v = np.stack([s.stats[name] for s in steps], 1)  # [B, steps, layers, heads]
    pad = np.full((v.shape[0], width - v.shape[1], *v.shape[2:]), np.nan)
    return np.concatenate([v, pad], 1)


def _num(x: Any) -> float | None:
    x = float(x)
    return None if np.isnan(x) else round(x, 6)


class _Stopper(StoppingCriteria):
    def __init__(self, monitor: Monitor):
        self.monitor = monitor

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        done = torch.full((input_ids.shape[0],), self.monitor.stopped, dtype=torch.bool, device=input_ids.device)
        return done  # type: ignore[return-value]


@dataclass(frozen=True)
class FlagOptions:
    """Flags: a trailing mean over ``window`` steps past a margin (the reference's ``quantile``, or ``margins``)."""

    window: int = DEFAULT_WINDOW
    quantile: float = DEFAULT_QUANTILE
    margins: dict[str, float] | None = None


class Monitor:
    """The context manager ``attntemp.monitor(...)`` returns; ``steps`` holds a :class:`Step` per
    recorded step.

    ``reference``: a :class:`Reference` or an ``AttentionStats`` at the trained length (None: no
    flags); ``every``: record every k-th generated token; ``callback(step)``: after each recorded
    step, may return ``"stop"`` or a spec; ``flags``: :class:`FlagOptions`; ``sink_tokens``,
    ``recent_tokens``: default the reference's (4 and 64 without one)."""

    def __init__(
        self,
        model: torch.nn.Module,
        reference: Reference | AttentionStats | None = None,
        every: int = 1,
        *,
        callback: Callable[[Step], Any] | None = None,
        flags: FlagOptions | None = None,
        sink_tokens: int | None = None,
        recent_tokens: int | None = None,
    ):
        flags = flags or FlagOptions()
        self.model, self.every, self.callback = model, checks.positive_int("every", every), callback
        self.window = checks.positive_int("window", flags.window)
        self.reference = Reference.from_stats(reference) if isinstance(reference, AttentionStats) else reference
        self.sink_tokens, self.recent_tokens = self._windows(sink_tokens, recent_tokens)
        self.margins = self._margins(flags.quantile, flags.margins or {})
        table = [np.resize(self.margins[f], self.window) for f in FLAGS] if self.margins else []
        self._table = np.stack(table) if table else np.zeros((0, self.window))  # [flags, window]
        self._sizes = (self.sink_tokens, self.recent_tokens)
        self.steps: list[Step] = []
        self.stopped = False
        mods = attention_modules(model)
        self._layers = [m.layer_idx for m in mods]
        self._rest = [m for m in mods if m.layer_idx != self._layers[0]]  # probed on recorded steps only
        self._attached = True  # whether the probe is on those modules (``probed`` puts it on all)
        self._heads = model_geometry(model).num_heads
        self._switched: dict[int, LayerState] | None = None
        self._run, self._index, self._recording, self._keys = -1, -1, False, -1
        self._seen: dict[int, Seen] = {}  # layers kept for one stacked call at the step's end
        self._done: dict[int, dict[str, torch.Tensor]] = {}  # layers done as they came
        self._positions: list[int] = []
        self._history: list[np.ndarray] = []  # this run's shifts, [len(STEP_STATS), B] per step
        self._stack = ExitStack()

    def _windows(self, sink: int | None, recent: int | None) -> tuple[int, int]:
        ref = self.reference
        for name, given in (("sink_tokens", sink), ("recent_tokens", recent)):
            if given is not None and ref is not None and given != getattr(ref, name):
                raise ValueError(f"{name}={given} differs from the reference's {getattr(ref, name)}")
        sink = sink or (ref.sink_tokens if ref else 4)
        recent = recent or (ref.recent_tokens if ref else 64)
        return checks.positive_int("sink_tokens", sink), checks.positive_int("recent_tokens", recent)

    def _margins(self, quantile: float, given: dict[str, float]) -> dict[str, np.ndarray]:
        unknown = sorted(set(given) - set(FLAGS))
        if unknown:
            raise ValueError(f"margins={given} has unknown flag(s) {unknown}; allowed: {list(FLAGS)}")
        if self.reference is None:
            if given:
                raise ValueError("margins= needs a reference (the flags compare each step with it)")
            return {}
        fixed = {k: np.array([float(v)]) for k, v in given.items()}  # one margin, whatever the steps
        return {**self.reference.margins(quantile, self.window, self.every), **fixed}

    # ----------------------------------------------------------------------------- context
    def __enter__(self) -> Monitor:
        self._stack.enter_context(probed(self.model, self))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._attach(True)  # as ``probed`` left them: it takes the probe off every layer
        self._stack.close()

    @property
    def stopping_criteria(self) -> StoppingCriteriaList:
        """Pass to ``generate(stopping_criteria=...)`` so that a callback's ``"stop"`` ends it."""
        return StoppingCriteriaList([_Stopper(self)])

    # ----------------------------------------------------------------------------- probe
    def __call__(self, module, query, key, m, scaling, kwargs):
        layer = module.layer_idx
        if layer == self._layers[0]:
            self._begin(query, key, kwargs)
        if self._switched is not None:
            m = self._switched[layer].multiplier(query, key, kwargs)
            m = torch.ones((), device=query.device) if m is None else m  # returning None would keep the old m
        if self._recording:
            seen = Seen(query.detach(), key.detach(), m, scaling, kwargs)
            if seen.whole(self._positions):
                self._seen[layer] = seen  # the usual step: every layer in one kernel call at its end
            else:  # now, while this layer's keys are in the CPU cache for its own attention
                groups = seen.groups(self._positions)
                self._done[layer] = assemble(groups, group_stats(groups, *self._sizes), query.shape[0])
            if layer == self._layers[-1]:
                self._finish()
        return m if self._switched is not None else None

    def _begin(self, query: torch.Tensor, key: torch.Tensor, kwargs: dict) -> None:
        """A new forward: the next step, or the first of a new run (a prefill: several queries or
        as many keys as queries; or positions that do not follow the last step's, e.g. generate
        resumed from a cache filled elsewhere). A step that will not be recorded, one query on one
        more key than the last step, moves every row on by one without reading a tensor; a step to
        be recorded reads the positions, so recorded steps are always exact (a run that restarts
        on an unrecorded step is found at the next one due)."""
        lq, lk, rows = query.shape[2], key.shape[2], query.shape[0]
        quiet = (self._index + 1) % self.every != 0 and self._index >= 0
        if quiet and lq == 1 and lk == self._keys + 1 and rows == len(self._positions):
            self._index, self._keys, self._recording = self._index + 1, lk, False
            self._positions = [p + 1 for p in self._positions]
            self._attach(self._switched is not None)  # the other layers run the bare patch
            return
        self._keys = lk
        pos = query_positions(query, key, kwargs)[:, -1].expand(rows)  # [B]
        positions = [int(p) for p in pos.tolist()]
        follows = len(positions) == len(self._positions) and all(
            p == q + 1 for p, q in zip(positions, self._positions, strict=True)
        )
        if lq > 1 or lk == lq or not follows:
            self._run, self._index, self._history, self._switched = self._run + 1, 0, [], None
        else:
            self._index += 1
        self._positions = positions
        self._recording = self._index % self.every == 0
        self._seen, self._done = {}, {}
        self._attach(self._recording or self._switched is not None)

    def _attach(self, on: bool) -> None:
        """Put the probe on every layer but the first (which counts the steps), or take it off: a
        step that is not recorded then costs one probe call, not one per layer."""
        if on == self._attached:
            return
        for mod in self._rest:
            if on:
                setattr(mod, PROBE, self)
            elif getattr(mod, PROBE, None) is self:
                delattr(mod, PROBE)
        self._attached = on

    def _layer_stats(self) -> np.ndarray:
        """Each layer's rows, ``[len(STEP_STATS), B, layers, H]``. Layers whose rows all see every
        cached key were kept as they came: when they are all the layers, alike, one stacked kernel
        call for them all (:func:`whole_stats`: the per-call overhead outweighs the copy of the keys);
        otherwise they are grouped like the rest, which were done as they came."""
        kept = [i for i in self._layers if i in self._seen]
        seen = [self._seen[i] for i in kept]
        if len(seen) == len(self._layers) and len({x.stack_key() for x in seen}) == 1:
            st = whole_stats(seen, *self._sizes)  # [S, L*B, H]: the usual step
            st = st.reshape(len(STEP_STATS), len(self._layers), -1, st.shape[-1]).transpose(1, 2)  # [S, B, L, H]
            return st.float().cpu().numpy()
        groups = [x.groups(self._positions) for x in seen]  # one group each: whole rows
        stats = {**self._done, **dict(zip(kept, group_stats([g[0] for g in groups], *self._sizes), strict=True))}
        per_name = [torch.stack([stats[i][n] for i in self._layers], 1) for n in STEP_STATS]  # [B, layers, H] each
        return torch.stack(per_name).float().cpu().numpy()

    def _finish(self) -> None:
        stacked = self._layer_stats()  # [S, B, layers, H]
        stats = dict(zip(STEP_STATS, stacked, strict=True))
        self._seen, self._done = {}, {}  # the views of the cache: not kept past the step
        shift, trend, flags = {}, {}, {}
        if self.reference is not None:
            now = shifts(self.reference, stacked)  # [S, B]
            self._history = [*self._history, now][-self.window :]
            mean = np.add.reduce(self._history) / len(self._history)  # [S, B]: the trend over the last window steps
            flags = raise_flags(mean, self._table, len(self._history))
            shift, trend = dict(zip(STEP_STATS, now, strict=True)), dict(zip(STEP_STATS, mean, strict=True))
        step = Step(self._run, self._index, np.asarray(self._positions), stats, shift, trend, flags, self.reference)
        self.steps.append(step)
        self._act(None if self.callback is None else self.callback(step))

    def _act(self, action: Any) -> None:
        if action is None:
            return
        if isinstance(action, TemperatureSpec):
            self.switch(action)
        elif action == STOP:
            self.stopped = True
        else:
            raise ValueError(f"callback returned {action!r}; expected None, {STOP!r} or a TemperatureSpec")

    def switch(self, spec: TemperatureSpec) -> None:
        """Run the following steps under ``spec``'s multipliers. Its RoPE must be the one in use:
        the cached keys carry their rotation."""
        mods = attention_modules(self.model)
        state = getattr(mods[0], STATE, None)
        rope_now = state.spec.rope if state is not None else Rope()
        if spec.rope != rope_now:
            raise ValueError(
                f"spec.rope={spec.rope.to_dict() or None} differs from the RoPE in use ({rope_now.to_dict() or None}); "
                "the cached keys carry it: switch temperatures only"
            )
        spec.check_model(len(mods), self._heads)
        types = model_geometry(self.model).layer_types
        self._switched = {i: LayerState(spec, i, self._heads, types[i]) for i in self._layers}
        self._attach(True)  # every layer's m comes from the probe now

    # ----------------------------------------------------------------------------- results
    def series(self, name: str = "entropy") -> np.ndarray:
        """``[steps, B, layers, heads]`` of one statistic over the recorded steps."""
        checks.choice("name", name, STEP_STATS)
        return np.stack([s.stats[name] for s in self.steps])

    def as_reference(self) -> Reference:
        """The recorded steps as a reference profile (each row of each run one reference row, its
        steps in order): e.g. generation at the trained length, to compare longer runs with."""
        if not self.steps:
            raise ValueError("as_reference needs recorded steps; run generate inside the monitor first")
        runs = sorted({s.run for s in self.steps})
        per_run = [[s for s in self.steps if s.run == r] for r in runs]
        width = max(len(p) for p in per_run)
        values = {n: np.concatenate([_rows(p, n, width) for p in per_run]) for n in STEP_STATS}
        pos = np.concatenate([s.positions for s in self.steps])
        meta = {"source": "monitor steps", "rows": int(values["entropy"].shape[0]), "queries": len(pos)}
        return Reference.from_samples(values, int(pos.max()) + 1, int(pos.min()), sink_tokens=self.sink_tokens,
                                      recent_tokens=self.recent_tokens, meta=meta)  # fmt: skip

    def flag_counts(self) -> dict[str, int]:
        """How many (step, row) pairs raised each flag."""
        return {f: int(sum(s.flags[f].sum() for s in self.steps)) for f in FLAGS} if self.margins else {}

    def save_jsonl(self, path: str | Path, tokens: Callable[[Step], list[str]] | None = None) -> Path:
        """``monitor.jsonl``: one line per recorded (step, row); ``tokens(step)`` names each row's token."""
        path = Path(path)
        with path.open("w") as f:
            for step in self.steps:
                for rec in step.records(None if tokens is None else tokens(step)):
                    f.write(json.dumps(rec) + "\n")
        return path


class _MonitorFactory:
    """``attntemp.monitor(model, reference=None, every=1, ...)`` returns a :class:`Monitor`;
    ``attntemp.monitor.reference(model, text, length)`` builds its reference profile and
    ``attntemp.monitor.load_reference(path)`` reads a saved one."""

    reference = staticmethod(reference)
    load_reference = staticmethod(Reference.load)
    FlagOptions = FlagOptions
    FLAGS = FLAGS
    STOP = STOP

    def __call__(
        self, model: torch.nn.Module, reference: Reference | AttentionStats | None = None, every: int = 1, **kw: Any
    ) -> Monitor:
        return Monitor(model, reference, every, **kw)

    def __repr__(self) -> str:
        return "attntemp.monitor"


monitor = _MonitorFactory()
