"""What a monitor compares each generated token against: the model's attention at its trained
length, per layer and head, with the spread of single queries that sets each flag's margin.

A :class:`Reference` holds, per statistic of :data:`STEP_STATS`, the mean and standard deviation
per (layer, head) over reference queries (positions ``[start, length)`` of reference texts,
``start`` = length / 2 by default, past the first tokens where every key is recent; or a
monitor's steps at the trained length), and each query's mean over layers and heads, kept per
row in order (``series`` ``[rows, positions]``). A step's *shift* is its mean over layers and
heads minus the reference's. A flag compares the mean shift of the last ``window`` recorded
steps of a row (fewer at the start) with the same mean over ``window`` consecutive reference
queries (``stride`` apart, as the monitor records every ``stride``-th token): its default margin
is the ``quantile`` (:data:`DEFAULT_QUANTILE`) of those, so at the trained length a step is
flagged with probability about 1 - quantile by chance. Single steps vary with the token (a
digit, a space); averaging a few steps keeps that noise out of the margin while a failure that
lasts shows.

Flags (:data:`FLAGS`), each a statistic and a direction: ``collapse`` (recent-token mass above
the reference), ``diffusion`` (normalised entropy H / ln n above it), ``sharpening`` (normalised
entropy below it, the opposite failure), ``sink_loss`` (mass on the first keys below it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..evaluate.corpus import heldout_windows, load_text
from ..hf.introspect import attention_modules, trained_length
from ..hf.patch import is_patched, probes, probing, run_decoder
from ..ops.attention_stats import attention_stats
from ..ops.spec import TemperatureSpec
from ..utils import checks
from .config import DEFAULT_QUANTILE, FLAGS, STEP_STATS
from .measure import AttentionStats, StatOptions

FLAG_STATS = np.array([STEP_STATS.index(s) for s, _ in FLAGS.values()])  # each flag's statistic
FLAG_SIGNS = np.array([d for _, d in FLAGS.values()])  # and its direction


@contextmanager
def probed(model: torch.nn.Module, probe: Any, spec: TemperatureSpec | None = None) -> Iterator[torch.nn.Module]:
    """``probe`` on every attention module: on top of the model's own patch when it is patched
    (its spec stays; ``spec`` must then be None), else under ``patch(model, spec)``."""
    if is_patched(model):
        if spec is not None:
            raise ValueError("spec= is not allowed on a model already patched by attntemp; its own spec applies")
        with probes(model, probe):
            yield model
    else:
        with probing(model, spec or TemperatureSpec(), probe):
            yield model


def trailing_means(dev: np.ndarray, k: int, stride: int = 1) -> np.ndarray:
    """Means of ``k`` consecutive values ``stride`` apart within each row of ``dev`` ``[rows, T]``,
    flat and without the windows that hold NaN (padding)."""
    out = [np.empty(0)]
    for offset in range(stride):
        sub = dev[:, offset::stride]  # [rows, T']
        if sub.shape[1] >= k:
            w = np.lib.stride_tricks.sliding_window_view(sub, k, axis=1).mean(-1)  # [rows, T' - k + 1]
            out.append(w[~np.isnan(w)])
    return np.concatenate(out)


def _nan_list(v: np.ndarray) -> list:
    """``v`` rounded, NaN as None (JSON null)."""
    out = np.round(v, 6).astype(object)
    out[np.isnan(v)] = None
    return out.tolist()


@dataclass(frozen=True)
class Reference:
    """Per-statistic ``mean`` and ``std`` ``[layers, heads]`` and ``series`` ``[rows, positions]``
    (each reference query's mean over layers and heads, NaN where a row is shorter); see the
    module doc."""

    mean: dict[str, np.ndarray]
    std: dict[str, np.ndarray]
    series: dict[str, np.ndarray]
    length: int
    start: int
    sink_tokens: int = 4
    recent_tokens: int = 64
    meta: dict[str, Any] = field(default_factory=dict)
    _margins: dict[tuple, dict[str, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def stacked_mean(self) -> np.ndarray:
        """``[len(STEP_STATS), layers, heads]``: ``mean`` in the order of :data:`STEP_STATS`."""
        return np.stack([self.mean[n] for n in STEP_STATS])

    @functools.cached_property
    def grand_mean(self) -> np.ndarray:
        """``[len(STEP_STATS)]``: :attr:`stacked_mean` over layers and heads (NaN where a head's is)."""
        return self.stacked_mean.reshape(len(STEP_STATS), -1).mean(-1)

    @property
    def shape(self) -> tuple[int, int]:
        layers, heads = self.mean["entropy"].shape
        return int(layers), int(heads)

    def shift(self, name: str, values: np.ndarray) -> np.ndarray:
        """``values`` ``[..., layers, heads]`` minus the reference mean, averaged over layers and
        heads: ``[...]``."""
        return np.nanmean(values - self.mean[name], axis=(-2, -1))

    def deviations(self, name: str) -> np.ndarray:
        """The shift of each reference query itself ``[rows, positions]``."""
        return self.series[name] - float(np.nanmean(self.mean[name]))

    def margins(self, quantile: float = DEFAULT_QUANTILE, window: int = 1, stride: int = 1) -> dict[str, np.ndarray]:
        """Each flag's margins ``[window]``: entry k-1 is the ``quantile`` of direction * (mean shift
        of k consecutive reference queries ``stride`` apart), for a trailing mean of k steps."""
        if not 0.5 < float(quantile) < 1:
            raise ValueError(f"quantile={quantile!r} is not allowed; expected a number in (0.5, 1)")
        checks.positive_int("window", window)
        key = (float(quantile), window, stride)
        if key not in self._margins:  # a monitor per generate call: computed once per reference
            self._margins[key] = self._compute_margins(*key)
        return dict(self._margins[key])

    def _compute_margins(self, quantile: float, window: int, stride: int) -> dict[str, np.ndarray]:
        out = {}
        for flag, (stat, direction) in FLAGS.items():
            dev = direction * self.deviations(stat)  # [rows, positions]
            per_k = [trailing_means(dev, k, stride) for k in range(1, window + 1)]
            if not len(per_k[-1]):
                raise ValueError(
                    f"window={window} is not allowed with every={stride}: the reference's rows hold "
                    f"{dev.shape[1]} queries, too few for {window} recorded steps; use a smaller window"
                )
            out[flag] = np.array([np.quantile(v, quantile) for v in per_k])
        return out

    def band(self, name: str, level: float = 0.95) -> tuple[float, float]:
        """The central ``level`` range of single reference queries' mean over layers and heads."""
        lo, hi = np.nanquantile(self.series[name], [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def to_dict(self) -> dict[str, Any]:
        arrays = {k: {n: _nan_list(v) for n, v in getattr(self, k).items()} for k in ("mean", "std", "series")}
        head = {"format": "attntemp.monitor.Reference/1", "length": self.length, "start": self.start}
        return {
            **head,
            "sink_tokens": self.sink_tokens,
            "recent_tokens": self.recent_tokens,
            "meta": self.meta,
            **arrays,
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict()))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Reference:
        """A saved Reference, or an ``AttentionStats`` JSON (``attntemp measure``'s stats.json)."""
        d = json.loads(Path(path).read_text())
        if d.get("format", "").startswith("attntemp.AttentionStats"):
            return cls.from_stats(AttentionStats.load(path))
        arrays = {k: {n: np.asarray(v, dtype=float) for n, v in d[k].items()} for k in ("mean", "std", "series")}
        return cls(arrays["mean"], arrays["std"], arrays["series"], d["length"], d["start"], d["sink_tokens"],
                   d["recent_tokens"], d.get("meta", {}))  # fmt: skip

    @classmethod
    def from_samples(cls, values: dict[str, np.ndarray], length: int, start: int, **kw: Any) -> Reference:
        """From single queries' statistics ``[rows, positions, layers, heads]`` per name of
        :data:`STEP_STATS` (NaN rows where a row is shorter), e.g. a monitor's steps at the
        trained length (:meth:`Monitor.as_reference`)."""
        flat = {n: values[n].reshape(-1, *values[n].shape[2:]) for n in STEP_STATS}  # [queries, layers, heads]
        return cls(
            mean={n: np.nanmean(flat[n], 0) for n in STEP_STATS},  # [layers, heads]
            std={n: np.nanstd(flat[n], 0) for n in STEP_STATS},
            series={n: np.nanmean(values[n], axis=(-2, -1)) for n in STEP_STATS},  # [rows, positions]
            length=length,
            start=start,
            **kw,
        )

    @classmethod
    def from_stats(cls, stats: AttentionStats, start: int | None = None) -> Reference:
        """From ``measure`` at the trained length: each query-position bucket from ``start`` on is
        one sample (``positions="all"`` on one row gives single queries; wider buckets or several
        rows average queries, so the spread, and the margins, come out narrower)."""
        start = stats.length // 2 if start is None else start
        keep = np.asarray(stats.bucket_edges[:-1]) >= start
        if not keep.any():
            raise ValueError(f"start={start} is past the last bucket (edges {stats.bucket_edges})")
        v = {n: np.moveaxis(stats.stats[n][..., keep], -1, 0)[None] for n in STEP_STATS}  # [1, buckets, layers, heads]
        meta = {**stats.meta, "source": "AttentionStats"}
        return cls.from_samples(v, stats.length, start, sink_tokens=stats.sink_tokens,
                                recent_tokens=stats.recent_tokens, meta=meta)  # fmt: skip


class _Collect:
    """Probe: each layer's statistics ``[B, H, Lq']`` of the queries from ``start`` on, per batch."""

    def __init__(self, start: int, sink: int, recent: int, budget: int):
        self.start, self.sink, self.recent, self.budget = start, sink, recent, budget
        self.sums: dict[int, dict[str, list[torch.Tensor]]] = {}

    def __call__(self, module, query, key, m, scaling, kwargs):
        b, h, lq, _ = query.shape
        mult = None if m is None else m.float().expand(b, h, lq)[..., self.start :]  # [B, H, Lq']
        st = attention_stats(
            query[:, :, self.start :], key, mult, scaling, kwargs.get("softcap"),
            kwargs.get("sliding_window"), self.sink, self.recent, self.budget,
        )  # fmt: skip
        into = self.sums.setdefault(module.layer_idx, {n: [] for n in STEP_STATS})
        for n in STEP_STATS:
            into[n].append(st[n].float().cpu())  # [B, H, Lq']


def _profile(collect: _Collect, length: int, start: int, meta: dict) -> Reference:
    layers = sorted(collect.sums)
    v = {n: torch.stack([torch.cat(collect.sums[i][n]) for i in layers], -1).numpy() for n in STEP_STATS}
    samples = {n: x.transpose(0, 2, 3, 1) for n, x in v.items()}  # [B, H, Lq', layers] -> [B, Lq', layers, H]
    return Reference.from_samples(
        samples, length, start, sink_tokens=collect.sink, recent_tokens=collect.recent, meta=meta
    )


def _ids(model, text: str | Sequence[str] | torch.Tensor, length: int, tokenizer, n_docs: int) -> torch.Tensor:
    """``[n, length]`` token ids: given, the first ``length`` tokens of each given string, or held-out
    windows of a text source (``"stdlib"``, ``"gutenberg:<book>"``, a file or folder)."""
    if isinstance(text, torch.Tensor):
        return text[:n_docs, :length]
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model.config.name_or_path)
    if isinstance(text, str):
        return heldout_windows(tokenizer, length, n=n_docs, docs=load_text(text, name="text"))
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in list(text)[:n_docs]]
    short = [i for i, r in enumerate(rows) if len(r) < length]
    if short:
        raise ValueError(f"text[{short[0]}] has {len(rows[short[0]])} tokens; length={length} needs at least that many")
    return torch.tensor([r[:length] for r in rows])


@torch.no_grad()
def reference(
    model: torch.nn.Module,
    text: str | Sequence[str] | torch.Tensor = "stdlib",
    length: int | None = None,
    *,
    tokenizer: Any = None,
    n_docs: int = 16,
    start: int | None = None,
    batch_size: int = 4,
    opts: StatOptions | None = None,
) -> Reference:
    """The reference profile of ``model`` as it is (patched or not) at ``length`` tokens (default:
    its trained length) on ``n_docs`` rows of ``text``: a source name, strings or ids ``[n, L]``
    (``opts``: the sink and recent windows and the block budget, :class:`StatOptions`)."""
    opts = opts or StatOptions()
    length = checks.positive_int("length", length or trained_length(model))
    start = length // 2 if start is None else start
    if not 0 <= start < length:
        raise ValueError(f"start={start} is not allowed; expected 0 <= start < length={length}")
    ids = _ids(model, text, length, tokenizer, checks.positive_int("n_docs", n_docs))  # [n, length]
    collect = _Collect(start, opts.sink_tokens, opts.recent_tokens, opts.budget_bytes)
    with probed(model, collect):
        for a in range(0, len(ids), checks.positive_int("batch_size", batch_size)):
            run_decoder(model, ids[a : a + batch_size])
    if len(collect.sums) != len(attention_modules(model)):
        raise ValueError("reference: not every attention layer reported (is the model supported by attntemp.patch?)")
    return _profile(collect, length, start, {"rows": len(ids), "text": text if isinstance(text, str) else None})


def shifts(ref: Reference, stats: dict[str, np.ndarray] | np.ndarray) -> np.ndarray:
    """Each statistic's shift from the reference, per row: ``stats`` ``[B, layers, heads]`` per name
    (or already stacked in :data:`STEP_STATS` order, ``[S, B, layers, heads]``) -> ``[S, B]`` (a few
    array ops: this runs at every generated token)."""
    values = stats if isinstance(stats, np.ndarray) else np.stack([stats[n] for n in STEP_STATS])
    s, b = values.shape[:2]
    out = values.reshape(s, b, -1).mean(-1) - ref.grand_mean[:, None]  # [S, B]: mean(v - r) = mean v - mean r
    if not np.isnan(out).any():
        return out
    d = values - ref.stacked_mean[:, None]  # [S, B, layers, heads]
    return np.nanmean(d, axis=(-2, -1))  # NaN: H / ln n of one key; the heads' NaN pairs left out


def raise_flags(trend: np.ndarray, margins: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """``[B]`` booleans per flag: direction * (mean shift of the last ``k`` steps, ``trend``
    ``[len(STEP_STATS), B]``) above the flag's margin for ``k`` steps (``margins`` ``[flags, window]``)."""
    hit = FLAG_SIGNS[:, None] * trend[FLAG_STATS] > margins[:, min(k, margins.shape[1]) - 1, None]  # [flags, B]
    return dict(zip(FLAGS, hit, strict=True))


def worst_heads(ref: Reference, stats: dict[str, np.ndarray], name: str = "norm_entropy") -> np.ndarray:
    """``[B, 3]``: per row the (layer, head) furthest from its reference mean in its reference
    standard deviations, and that signed distance."""
    z = (stats[name] - ref.mean[name]) / np.maximum(ref.std[name], 1e-6)  # [B, layers, heads]
    flat = np.nan_to_num(np.abs(z), nan=-1.0).reshape(len(z), -1).argmax(-1)  # [B]
    layer, head = np.unravel_index(flat, z.shape[1:])
    return np.stack([layer, head, z.reshape(len(z), -1)[np.arange(len(z)), flat]], axis=-1)
