"""The task registry and what every task shares: :class:`Metric` (a metric's facts, declared once),
:class:`EvalContext` (what a task needs besides the model), :class:`EvalOptions` (the evaluating
commands' options), :class:`Task` (intervals, paired comparisons and verdicts in words), and
:func:`register_task` / :func:`get_task` over :data:`TASKS`.

The tasks themselves live in :mod:`.tasks` (perplexity, passkey, needle), :mod:`.key_tokens`
and :mod:`.needles`; :mod:`.tasks` imports them all, so ``TASKS`` is complete wherever it is
imported. A task module imports this one, never :mod:`.tasks`.
"""

from __future__ import annotations

import abc
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..hf.model_options import ModelOptions
from ..ops import intervals
from ..ops.intervals import Interval
from ..utils import checks
from ..utils.options import option
from . import corpus

KEY_NGRAM = 8  # tokens of context that must repeat (8 bytes of the tiny model: more than a common word)
KEY_ALPHA, KEY_BETA = 2.0, -2.0  # LongPPL's defaults (the longppl package's compute_longppl)
NEEDLES_PER_FORWARD = 8
MAX_NEEDLES = 64  # distinct keys the needles task has words for


def check_distant(opts: Any) -> None:
    """The key_tokens and needles options of ``opts`` (an :class:`EvalSettings`), naming the field."""
    if checks.positive_int("key_ngram", opts.key_ngram) > 64:
        raise ValueError(f"key_ngram={opts.key_ngram} is not allowed; expected an integer in [1, 64]")
    if opts.key_distance is not None:
        checks.positive_int("key_distance", opts.key_distance)
    for name in ("key_alpha", "key_beta"):
        value = getattr(opts, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name}={value!r} is not allowed; expected a finite number")
    if opts.key_evaluator is not None and (not isinstance(opts.key_evaluator, str) or not opts.key_evaluator):
        raise ValueError(f"key_evaluator={opts.key_evaluator!r} is not allowed; expected a model name or path")
    if opts.needles_per_forward is not None and not (
        1 <= checks.positive_int("needles_per_forward", opts.needles_per_forward) <= MAX_NEEDLES
    ):
        raise ValueError(
            f"needles_per_forward={opts.needles_per_forward} is not allowed; expected an integer in [1, {MAX_NEEDLES}]"
        )


@dataclass(frozen=True)
class Metric:
    """A task's metric: its name, whether higher is better, its unit (for tables), and its interval
    rule (a name in :data:`attntemp.ops.intervals.RULES`), which also says how two specs are
    compared on it: their ``ratio`` (perplexity) or their ``difference`` (accuracy, log-probability).
    As lm-eval's ``MetricSpec``: the one place a metric's interval is decided."""

    name: str
    higher_is_better: bool
    unit: str = ""
    rule: str = "mean"
    # the keys of a result it is made of (per window or per trial); a perplexity's second: tokens
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        checks.choice("rule", self.rule, intervals.RULES)

    @property
    def interval_rule(self) -> intervals.IntervalRule:
        return intervals.RULES[self.rule]

    @property
    def comparison(self) -> str:
        """``"ratio"`` or ``"difference"``: how its rule compares two specs."""
        return self.interval_rule.comparison

    @property
    def null(self) -> float:
        """The comparison's value for "no change": 1 for a ratio, 0 for a difference."""
        return self.interval_rule.null


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """What picks and scores the windows besides the text, declared once: the sizes and seed, the
    key-token rule and the needles' count. The evaluating commands take them as flags
    (:class:`EvalOptions`) and every task reads them off its :class:`EvalContext`; both are these."""

    n_docs: int = option(16, "held-out documents (windows) per evaluation", flag="--docs")
    trials: int = option(50, "passkey / needle trials per point (and depth)")
    seed: int = option(0, "seed of the passkey and needle keys and depths")
    batch_size: int = option(16, "rows per forward (one row per window and multiplier)")
    key_ngram: int = option(KEY_NGRAM, "key_tokens: a token is key when its preceding n-gram of this many tokens ...")
    key_distance: int | None = option(
        None,
        "... last occurred more than K tokens back, followed by it (default K: half the trained length)",
        parse=int,
    )
    key_evaluator: str | None = option(
        None,
        "key_tokens: LongPPL's rule instead (arXiv:2410.23771): key when this model's log p with the whole window "
        "beats log p with the last K tokens by > --key-alpha and log p > --key-beta",
        metavar="MODEL",
    )
    key_alpha: float = option(KEY_ALPHA, "key_tokens with --key-evaluator: the log-probability gain threshold")
    key_beta: float = option(KEY_BETA, "key_tokens with --key-evaluator: the least log-probability of a key token")
    needles_per_forward: int | None = option(
        None,
        f"needles: keyed facts hidden and asked in one forward (default: as many as fit the shortest length, up "
        f"to {NEEDLES_PER_FORWARD})",
        parse=int,
    )

    def __post_init__(self) -> None:
        checks.positive_int("n_docs", self.n_docs)
        checks.positive_int("trials", self.trials)
        checks.positive_int("batch_size", self.batch_size)
        check_distant(self)
        for name, default in (("key_alpha", KEY_ALPHA), ("key_beta", KEY_BETA)):
            if self.key_evaluator is None and getattr(self, name) != default:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not allowed without key_evaluator=MODEL: it is a threshold of "
                    "LongPPL's rule, which only an evaluator model applies; add one, or leave it out"
                )

    def eval_settings(self) -> dict[str, Any]:
        """These fields by name: what an :class:`EvalContext` is built with."""
        return {f.name: getattr(self, f.name) for f in fields(EvalSettings)}


@dataclass(frozen=True)
class EvalContext(EvalSettings):
    """What every task needs besides the model: the trained length, the text, and the
    :class:`EvalSettings` (``needles_per_forward`` None: :data:`NEEDLES_PER_FORWARD`)."""

    trained_length: int
    docs: Sequence[corpus.Document] = field(default=(), repr=False)
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    haystack: Sequence[corpus.Document] = field(default=(), repr=False)
    tuning_docs: Sequence[corpus.Document] = field(default=(), repr=False)  # the other pool: tuners use it
    # score only windows (or trials) [a, b) of the n_docs (trials) drawn: a race scores a block at a time
    window_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.positive_int("trained_length", self.trained_length)
        if self.needles_per_forward is None:
            object.__setattr__(self, "needles_per_forward", NEEDLES_PER_FORWARD)  # frozen: set once, here
        if self.window_range is not None:
            a, b = self.window_range
            if not (isinstance(a, int) and isinstance(b, int) and 0 <= a < b):
                raise ValueError(f"window_range={self.window_range!r} is not allowed; expected (a, b) with 0 <= a < b")

    def pick(self, rows: Sequence[Any]) -> Sequence[Any]:
        """The rows of :attr:`window_range` (all of them without one); refused past the last row."""
        if self.window_range is None:
            return rows
        a, b = self.window_range
        if b > len(rows):
            raise ValueError(f"window_range={self.window_range!r} is not allowed: only {len(rows)} windows were drawn")
        return rows[a:b]

    @property
    def key_span(self) -> int:
        """K: the key-token distance given, or half the trained length."""
        return self.key_distance or max(1, self.trained_length // 2)

    @property
    def needles_k(self) -> int:
        """Needles per forward, as an int (:meth:`__post_init__` filled in the default)."""
        return self.needles_per_forward or NEEDLES_PER_FORWARD


@dataclass(frozen=True, kw_only=True)
class EvalOptions(EvalSettings, ModelOptions):
    """What every command that evaluates takes: the model, the text and the evaluation's settings."""

    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    gutenberg: str | None = option(None, "needle haystack, e.g. gutenberg:melville-moby_dick")
    progress: bool = option(True, "no progress bars", flag="--quiet", invert=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gutenberg is not None and not self.gutenberg.strip():
            raise ValueError(f"gutenberg={self.gutenberg!r} is empty; expected gutenberg:<book>, a file or a folder")


def eval_context(opts: EvalOptions, trained_length: int, tuning: bool = False) -> EvalContext:
    """The task context of any evaluating config: its text loaded and split into the evaluation
    and the tuning pool (:func:`attntemp.evaluate.corpus.pool`), the haystack, its sizes. A text of
    too few documents for two pools is evaluated whole, or, for a run that ``tuning``, cut in
    halves: the tuner takes the first half of each document, the evidence the second
    (:func:`attntemp.evaluate.corpus.halves`)."""
    docs = corpus.load_text(opts.text, name="text")
    hay = corpus.load_text(opts.gutenberg, name="gutenberg") if opts.gutenberg else ()
    evaluation, tuners = corpus.pool(docs, "evaluation"), corpus.pool(docs, "tuning")
    if not evaluation or not tuners:
        tuners, evaluation = corpus.halves(docs) if tuning else ([], list(docs))
    return EvalContext(trained_length, evaluation, haystack=hay, tuning_docs=tuners, **opts.eval_settings())


def tuning_context(ctx: EvalContext) -> EvalContext:
    """What a tuner scores on: the tuning pool, and other passkey keys and depths."""
    if not ctx.tuning_docs:
        raise ValueError(
            f"text: its {len(ctx.docs)} document(s) cannot be split into a tuning and an evaluation pool; "
            "tuning needs documents its evidence is not scored on: give a folder of several files"
        )
    return replace(ctx, docs=ctx.tuning_docs, tuning_docs=(), seed=ctx.seed + 1000)


TASKS: dict[str, type[Task]] = {}
# The registered tasks' names, in order: what a config's help and checks read without importing the
# tasks (which import torch). ``tests/evaluate/test_tasks.py`` holds them to :data:`TASKS`.
TASK_NAMES = ("perplexity", "passkey", "needle", "key_tokens", "needles", "multikey", "multikey_keys")


def register_task(cls: type[Task]) -> type[Task]:
    TASKS[cls.name] = cls
    return cls


def get_task(name: str) -> Task:
    return TASKS[checks.choice("task", name, TASKS)]()


class Task(abc.ABC):
    name: str = ""
    metrics: tuple[Metric, ...] = ()
    objective: str = ""  # the metric tuning optimises
    per_window: tuple[str, ...] = ()  # the result's keys holding one value per window (or trial), in order

    def merge(self, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Results of consecutive window blocks of one spec as one result: the per-window values
        concatenated, each ``*_digest`` a digest of the parts' digests (two merges of the same
        blocks agree, so they pair), every metric recomputed from the merged values."""
        if not parts:
            raise ValueError("merge needs at least one result")
        out = dict(parts[0])
        for key in self.per_window:
            out[key] = [v for p in parts for v in p[key]]
        for key in (k for k in out if k.endswith("_digest")):
            out[key] = digest_of([str(p[key]) for p in parts]) if len(parts) > 1 else out[key]
        for m in self.metrics:
            ci = self.interval(out, m.name)
            if ci is not None:
                out[m.name] = ci.value
        return self.finish(out)

    def finish(self, merged: dict[str, Any]) -> dict[str, Any]:
        """Recompute a merged result's aggregates that are not metrics (a task's own; none here)."""
        return merged

    def windows_of(self, result: dict[str, Any]) -> int:
        """How many windows (or trials) ``result`` holds: forward rows per spec."""
        return len(result[self.per_window[0]]) if self.per_window else 1

    @abc.abstractmethod
    def evaluate(self, model, tok, length: int, multipliers: Sequence[float], ctx: EvalContext) -> list[dict[str, Any]]:
        """One metrics dict per multiplier (model already patched with the base spec)."""

    def metric(self, name: str) -> Metric:
        """The declared metric called ``name``."""
        checks.choice("metric", name, [m.name for m in self.metrics])
        return next(m for m in self.metrics if m.name == name)

    def higher_is_better(self, metric: str) -> bool:
        return self.metric(metric).higher_is_better

    @property
    def headline(self) -> Metric:
        """The metric tables and reports show first."""
        return self.metrics[0]

    def values_of(self, result: dict[str, Any], metric: Metric) -> tuple[list[Any], list[Any] | None]:
        """What ``metric``'s interval rule reads from ``result``: its values per window (or trial)
        and, for a perplexity, each window's token count (a count kept once stands for every
        window); no values from a result stored without them."""
        values = list(result.get(metric.values[0], ()))
        if len(metric.values) < 2:
            return values, None
        tokens = result.get(metric.values[1])
        return values, list(tokens) if isinstance(tokens, (list, tuple)) else [tokens] * len(values)

    def check_pair(self, a: dict[str, Any], b: dict[str, Any], metric: Metric) -> None:
        """Raise unless ``a`` and ``b`` were scored on the same windows (a task's digests; none here)."""
        return None

    def interval(self, metrics: dict[str, Any], name: str, seed: int = 0) -> Interval | None:
        """``name`` of one evaluation with its 95% interval by the metric's rule, from the per-window /
        per-trial values it keeps; None for fewer than two or a result stored without them (an older
        sweep database)."""
        m = self.metric(name)
        values, tokens = self.values_of(metrics, m)
        return m.interval_rule.interval(values, tokens, seed) if len(values) >= 2 else None

    def paired(self, a: dict[str, Any], b: dict[str, Any], name: str, seed: int = 0) -> Interval | None:
        """``a`` against ``b`` (the same windows or trials) on ``name``: the paired interval of their
        ratio or difference by the metric's rule (:attr:`Metric.comparison`); None without per-window
        values."""
        m = self.metric(name)
        (va, tokens), (vb, _) = self.values_of(a, m), self.values_of(b, m)
        if len(va) < 2 or len(vb) < 2:
            return None
        self.check_pair(a, b, m)
        return m.interval_rule.paired(va, vb, tokens, seed)

    def describe(self, metrics: dict[str, Any], name: str, digits: int = 4) -> str:
        """``"6.061 [5.87, 6.25]"``: the figure with its 95% interval; the figure and "(no
        interval)" from a single window or trial, or a result stored without them."""
        ci = self.interval(metrics, name)
        return f"{metrics[name]:.{digits}g} (no interval)" if ci is None else ci.format(digits)

    def compare(self, a: dict[str, Any], b: dict[str, Any], name: str, decimals: int = 4) -> str:
        """``"0.5812 [0.5203, 0.6411] better"``: ``a`` against ``b`` on the same windows, in words too."""
        ci = self.paired(a, b, name)
        return (
            "no interval (fewer than 2 windows or trials)"
            if ci is None
            else f"{ci.fixed(decimals)} {self.verdict(ci, name)}"
        )

    def verdict(self, comparison: Interval, name: str) -> str:
        """ "better", "worse" or "not distinguishable" (the interval holds "no change"), in words."""
        m = self.metric(name)
        return intervals.verdict(comparison, m.null, lower_is_better=not m.higher_is_better)


def digest_of(parts: Sequence[str]) -> str:
    """sha256 of strings joined: one digest for a sequence of digests."""
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def tail_start(length: int, trained_length: int) -> int:
    """First query position of the tail: the trained length, or 3/4 of a shorter length."""
    return trained_length if length > trained_length else (3 * length) // 4
