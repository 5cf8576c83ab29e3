"""Registered evaluation tasks (lm-evaluation-harness style): each declares its metrics and
whether higher is better, and scores several logit multipliers m at once (one batch row per m,
folded into q by ``attntemp.hf.patch.batch_multipliers``).

Each task's metrics are the one source of their facts (name, higher-is-better, unit); the first is
the task's headline metric (tables and reports show it), ``objective`` the one tuning optimises.

- ``perplexity``: token-weighted perplexity by query-position bucket on held-out documents; the
  ``tail`` is the predictions made at positions >= the trained length (the last quarter when the
  length is within it).
- ``passkey``: the YaRN paper's passkey prompt; exact match of the greedy key, plus the mean
  log-probability of the key's tokens (a graded signal for small models).
- ``needle``: a fact hidden at several depths in real text (Gutenberg or stdlib), scored the
  same two ways, per depth.
"""

from __future__ import annotations

import abc
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..hf.loading import ModelOptions
from ..hf.patch import batch_multipliers
from ..ops import intervals
from ..ops.intervals import Interval
from ..utils import checks
from ..utils.options import option
from . import corpus
from .corpus import heldout_windows
from .lm import first_integer, greedy, multiplier_nll, repeat_rows, token_nll

NEEDLE = "The special magic number is {key}."
NEEDLE_QUESTION = "What is the special magic number? The special magic number is"


@dataclass(frozen=True)
class Metric:
    """A task's metric: its name, whether higher is better, its unit (for tables), and how two
    specs are compared on it: their ``ratio`` (perplexity) or their ``difference`` (accuracy)."""

    name: str
    higher_is_better: bool
    unit: str = ""
    comparison: str = "difference"
    values: tuple[str, ...] = ()  # the keys of a result it is made of (per window or per trial)

    @property
    def null(self) -> float:
        """The comparison's value for "no change": 1 for a ratio, 0 for a difference."""
        return 1.0 if self.comparison == "ratio" else 0.0


@dataclass(frozen=True)
class EvalContext:
    """What every task needs besides the model: trained length, text and sizes."""

    trained_length: int
    docs: Sequence[corpus.Document] = field(default=(), repr=False)
    n_docs: int = 4
    trials: int = 20
    seed: int = 0
    depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    batch_size: int = 16
    haystack: Sequence[corpus.Document] = field(default=(), repr=False)
    tuning_docs: Sequence[corpus.Document] = field(default=(), repr=False)  # the other pool: tuners use it

    def __post_init__(self) -> None:
        checks.positive_int("trained_length", self.trained_length)
        checks.positive_int("n_docs", self.n_docs)
        checks.positive_int("trials", self.trials)


@dataclass(frozen=True, kw_only=True)
class EvalOptions(ModelOptions):
    """What every command that evaluates takes: the model, the text and the evaluation's sizes."""

    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    n_docs: int = option(16, "held-out documents (windows) per evaluation", flag="--docs")
    trials: int = option(50, "passkey / needle trials per point (and depth)")
    seed: int = option(0, "seed of the passkey and needle keys and depths")
    batch_size: int = option(16, "rows per forward (one row per window and multiplier)")
    gutenberg: str | None = option(None, "needle haystack, e.g. gutenberg:melville-moby_dick")
    progress: bool = option(True, "no progress bars", flag="--quiet", invert=True)

    def __post_init__(self) -> None:
        checks.positive_int("n_docs", self.n_docs)
        checks.positive_int("trials", self.trials)
        checks.positive_int("batch_size", self.batch_size)


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
    return EvalContext(
        trained_length,
        evaluation,
        opts.n_docs,
        opts.trials,
        opts.seed,
        batch_size=opts.batch_size,
        haystack=hay,
        tuning_docs=tuners,
    )


def tuning_context(ctx: EvalContext) -> EvalContext:
    """What a tuner scores on: the tuning pool, and other passkey keys and depths."""
    if not ctx.tuning_docs:
        raise ValueError(
            f"text: its {len(ctx.docs)} document(s) cannot be split into a tuning and an evaluation pool; "
            "tuning needs documents its evidence is not scored on: give a folder of several files"
        )
    return replace(ctx, docs=ctx.tuning_docs, tuning_docs=(), seed=ctx.seed + 1000)


TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    TASKS[cls.name] = cls
    return cls


def get_task(name: str) -> Task:
    return TASKS[checks.choice("task", name, TASKS)]()


class Task(abc.ABC):
    name: str = ""
    metrics: tuple[Metric, ...] = ()
    objective: str = ""  # the metric tuning optimises

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

    @abc.abstractmethod
    def interval(self, metrics: dict[str, Any], name: str, seed: int = 0) -> Interval | None:
        """``name`` of one evaluation with its 95% interval, from the per-window / per-trial values
        it keeps; None for a result stored without them (an older sweep database)."""

    @abc.abstractmethod
    def paired(self, a: dict[str, Any], b: dict[str, Any], name: str, seed: int = 0) -> Interval | None:
        """``a`` against ``b`` (the same windows or trials) on ``name``: the paired interval of their
        ratio or difference (:attr:`Metric.comparison`); None without per-window values."""

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


def tail_start(length: int, trained_length: int) -> int:
    """First query position of the tail: the trained length, or 3/4 of a shorter length."""
    return trained_length if length > trained_length else (3 * length) // 4


@register
class Perplexity(Task):
    name = "perplexity"
    metrics = (
        Metric("tail_ppl", False, "perplexity past the trained length", "ratio", ("window_tail_nll", "tail_tokens")),
        Metric("ppl", False, "perplexity", "ratio", ("window_nll", "tokens")),
    )
    objective = "tail_ppl"

    def interval(self, metrics, name, seed=0):
        nll_key, tok_key = self.metric(name).values
        if len(metrics.get(nll_key, ())) < 2:  # one document has no spread to resample
            return None
        tokens = [metrics[tok_key]] * len(metrics[nll_key])
        return intervals.perplexity_interval(metrics[nll_key], tokens, seed=seed)

    def paired(self, a, b, name, seed=0):
        nll_key, tok_key = self.metric(name).values
        if len(a.get(nll_key, ())) < 2 or len(b.get(nll_key, ())) < 2:
            return None
        if a.get("windows_digest") != b.get("windows_digest") or a[tok_key] != b[tok_key]:
            raise ValueError("the two results were scored on different windows; a paired comparison needs the same")
        tokens = [a[tok_key]] * len(a[nll_key])
        return intervals.paired_ratio_interval(a[nll_key], b[nll_key], tokens, seed=seed)

    def evaluate(self, model, tok, length, multipliers, ctx):
        ids = heldout_windows(tok, length, n=ctx.n_docs, docs=ctx.docs)
        nll = multiplier_nll(model, ids, multipliers, ctx.batch_size)  # [k, n, L-1]
        start = tail_start(length, ctx.trained_length)
        edges = sorted({round(i * (length - 1) / 8) for i in range(9)})
        out = []
        digest = corpus.windows_digest(ids)
        for row in nll.double():  # [n, L-1]
            buckets = [math.exp(float(row[:, a:b].mean())) for a, b in itertools.pairwise(edges)]
            out.append(
                {
                    "ppl": math.exp(float(row.mean())),
                    "tail_ppl": math.exp(float(row[:, start:].mean())),
                    "tail_start": start,
                    "bucket_edges": edges,
                    "bucket_ppl": buckets,
                    # what the figures are made of: summed NLL per window (and per window and bucket)
                    "window_nll": row.sum(1).tolist(),
                    "window_tail_nll": row[:, start:].sum(1).tolist(),
                    "tokens": row.shape[1],
                    "tail_tokens": row.shape[1] - start,
                    "bucket_nll": [[float(w[a:b].sum()) for a, b in itertools.pairwise(edges)] for w in row],
                    "bucket_tokens": [b - a for a, b in itertools.pairwise(edges)],
                    "windows_digest": digest,
                }
            )
        return out


def _grouped(prompts: list[tuple[int, tuple[list[int], list[int], int]]]):
    """Group ``(index, (prompt ids, answer ids, key))`` by prompt and answer length (no padding)."""
    groups: dict[tuple[int, int], list] = {}
    for i, p in prompts:
        groups.setdefault((len(p[0]), len(p[1])), []).append((i, p))
    return list(groups.values())


@torch.no_grad()
def score_prompts(model, tok, prompts, multipliers, batch_size) -> list[dict[str, Any]]:
    """Exact match of the greedy key and mean log-probability of the answer tokens, per m; each
    trial's outcome (``hits``) and key log-probability (``logps``) kept, in the order of ``prompts``.

    Greedy decoding runs for the answer's length plus 2 tokens: enough to read the first integer
    (and see that it ends where the key ends)."""
    k = len(multipliers)
    hits, logps = torch.zeros(k, len(prompts)), torch.zeros(k, len(prompts))
    for group in _grouped(list(enumerate(prompts))):
        for a in range(0, len(group), max(1, batch_size // k)):
            order = [i for i, _ in group[a : a + max(1, batch_size // k)]]
            part = [p for _, p in group[a : a + max(1, batch_size // k)]]
            full = torch.tensor([p + ans for p, ans, _ in part])  # [n, P + A]
            rows, m = repeat_rows(full, multipliers)  # [k*n, P + A]
            plen = len(part[0][0])
            with batch_multipliers(model, m):
                ans_lp = -token_nll(model, rows.to(model.device), start=plen - 1).mean(-1)  # [k*n]: answer tokens
                gen = greedy(model, rows[:, :plen].to(model.device), rows.shape[1] - plen + 2)  # [k*n, A+2]
            texts = tok.batch_decode(gen, skip_special_tokens=True)
            keys = [key for _, _, key in part] * k
            ok = torch.tensor([first_integer(t) == key for t, key in zip(texts, keys, strict=True)]).float()
            hits[:, order] = ok.reshape(k, -1)  # [k, n]
            logps[:, order] = ans_lp.cpu().float().reshape(k, -1)  # [k, n]
    return [
        {"acc": float(h.mean()), "logp": float(lp.mean()), "hits": h.int().tolist(), "logps": lp.tolist()}
        for h, lp in zip(hits, logps, strict=True)
    ]


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _keyed(tok, rng: random.Random, prompt_for) -> tuple[list[int], list[int], int]:
    """A random key, its prompt's ids and the answer's ids (" {key}")."""
    key = rng.randint(*corpus.KEY_RANGE)
    return _encode(tok, prompt_for(key)), _encode(tok, f" {key}"), key


class RetrievalTask(Task):
    """A task scored per trial: ``acc`` (Wilson interval) and ``logp`` (bootstrap over trials)."""

    metrics = (
        Metric("acc", True, "share of trials", "difference", ("hits",)),
        Metric("logp", True, "nats per answer token", "difference", ("logps",)),
    )
    objective = "logp"

    def interval(self, metrics, name, seed=0):
        (key,) = self.metric(name).values
        if len(metrics.get(key, ())) < 2:
            return None
        if name == "acc":
            return intervals.wilson(int(sum(metrics["hits"])), len(metrics["hits"]))
        return intervals.mean_interval(metrics["logps"], seed=seed)

    def paired(self, a, b, name, seed=0):
        (key,) = self.metric(name).values
        if len(a.get(key, ())) < 2 or len(b.get(key, ())) < 2:
            return None
        return intervals.paired_difference_interval(a[key], b[key], seed=seed)


@register
class Passkey(RetrievalTask):
    name = "passkey"

    def evaluate(self, model, tok, length, multipliers, ctx):
        rng = random.Random(ctx.seed)
        prompts = [
            _keyed(tok, rng, lambda key: corpus.passkey_prompt(key, length - 10, rng.random(), tok))
            for _ in range(ctx.trials)
        ]
        return score_prompts(model, tok, prompts, multipliers, ctx.batch_size)


def needle_prompt(tok, haystack: str, key: int, n_tokens: int, depth: float) -> str:
    """``haystack`` cut to fit ``n_tokens`` with the needle sentence at ``depth`` (at a line
    break near it), then the question."""
    fixed = len(_encode(tok, "\n" + NEEDLE.format(key=key) + "\n\n" + NEEDLE_QUESTION))
    budget = n_tokens - fixed
    if budget < 8:
        raise ValueError(f"n_tokens={n_tokens} is too short for a needle prompt (needs > {fixed + 8})")
    ids = _encode(tok, haystack)[:budget]
    text = tok.decode(ids)
    while len(_encode(tok, text)) > budget:  # decode/encode may not round-trip at the cut
        text = text[: int(len(text) * 0.98)]
    cut = round(depth * len(text))
    nl = text.rfind("\n", 0, cut) if 0 < cut < len(text) else cut
    cut = nl if nl > 0 else cut
    return text[:cut] + "\n" + NEEDLE.format(key=key) + "\n" + text[cut:] + "\n" + NEEDLE_QUESTION


@register
class Needle(RetrievalTask):
    name = "needle"

    def evaluate(self, model, tok, length, multipliers, ctx):
        hay = list(ctx.haystack) or corpus.split(list(ctx.docs), "heldout")
        hay = [d for d in hay if len(d.text) > 2 * length][: max(1, ctx.n_docs)]
        if not hay:
            raise ValueError(f"no haystack document is long enough for length={length}")
        rng = random.Random(ctx.seed)
        per_depth = []
        for depth in ctx.depths:
            prompts = [
                _keyed(
                    tok, rng, lambda key, t=t, d=depth: needle_prompt(tok, hay[t % len(hay)].text, key, length - 10, d)
                )
                for t in range(ctx.trials)
            ]
            per_depth.append(score_prompts(model, tok, prompts, multipliers, ctx.batch_size))
        out = []
        for i in range(len(multipliers)):
            accs = [d[i]["acc"] for d in per_depth]
            lps = [d[i]["logp"] for d in per_depth]
            out.append(
                {
                    "acc": sum(accs) / len(accs),
                    "logp": sum(lps) / len(lps),
                    "depths": list(ctx.depths),
                    "acc_by_depth": accs,
                    "logp_by_depth": lps,
                    "hits": [h for d in per_depth for h in d[i]["hits"]],  # trials of every depth, in order
                    "logps": [lp for d in per_depth for lp in d[i]["logps"]],
                }
            )
        return out
