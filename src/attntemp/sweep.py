"""Sweeps: every (length, RoPE method, multiplier, task) point, stored in SQLite as it finishes.

A point is written in its own transaction keyed by (model, length, rope, multiplier, task), so a
sweep killed at any moment (even ``kill -9``) resumes where it stopped with nothing lost or
counted twice. Several multipliers run as one batched forward (one batch row per m) unless
``batched=False``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from . import _validate, data
from .extend import text_config
from .models import load_model
from .patching import patch
from .spec import TemperatureSpec
from .tasks import TASKS, EvalContext, get_task

ROPES = ("none", "linear", "ntk", "dynamic", "yarn")


def parse_multipliers(text: str) -> tuple[float, ...]:
    """``"0.8:1.4:0.05"`` (inclusive range) or ``"0.8,1,1.2"`` -> sorted multipliers (m = 1/T)."""
    try:
        if ":" in text:
            lo, hi, step = (float(x) for x in text.split(":"))
            if step <= 0 or hi < lo:
                raise ValueError
            n = round((hi - lo) / step)
            values = [round(lo + i * step, 6) for i in range(n + 1)]
        else:
            values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"multipliers={text!r} is not allowed; expected LO:HI:STEP or a comma list") from None
    for i, v in enumerate(values):
        _validate.positive(f"multipliers[{i}]", v)
    return tuple(sorted(set(values)))


def rope_for(method: str, length: int, trained_length: int) -> dict[str, Any] | None:
    """The RoPE extension for ``length``: scale s = length / trained length (at least 1).

    YaRN's own attention factor is set to 1, so the swept multiplier is the whole logit
    multiplier (YaRN's default temperature is m = (0.1 ln s + 1)^2 on that axis)."""
    _validate.choice("rope", method, ROPES)
    if method == "none":
        return None
    s = max(1.0, length / trained_length)
    rope = {"rope_type": method, "factor": s}
    if method == "yarn":
        rope.update(original_max_position_embeddings=trained_length, attention_factor=1.0)
    return rope


@dataclass(frozen=True)
class SweepConfig:
    """One configuration for the sweep CLI and ``run_sweep`` alike."""

    out: str
    model: str = "tiny"
    text: str = "stdlib"
    lengths: tuple[int, ...] = (512, 1024)
    rope: tuple[str, ...] = ("none", "yarn")
    multipliers: tuple[float, ...] = (1.0,)
    tasks: tuple[str, ...] = ("perplexity",)
    n_docs: int = 4
    trials: int = 20
    seed: int = 0
    batch_size: int = 16
    batched: bool = True
    gutenberg: str | None = None
    trained_length: int | None = None
    progress: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, n in enumerate(self.lengths):
            _validate.positive_int(f"lengths[{i}]", n)
        for r in self.rope:
            _validate.choice("rope", r, ROPES)
        for t in self.tasks:
            _validate.choice("task", t, TASKS)
        for i, m in enumerate(self.multipliers):
            _validate.positive(f"multipliers[{i}]", m)
        if not self.multipliers:
            raise ValueError("multipliers is empty; give at least one multiplier")


SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    model TEXT, length INTEGER, rope TEXT, mkey TEXT, multiplier REAL, task TEXT,
    metrics TEXT, seconds REAL, batched INTEGER, created REAL,
    PRIMARY KEY (model, length, rope, mkey, task));
CREATE TABLE IF NOT EXISTS runs (started REAL, config TEXT);
"""


def mkey(m: float) -> str:
    return f"{m:.6g}"


class Store:
    """The sweep database: one row per finished point."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.executescript(SCHEMA)

    def done(self, model: str, length: int, rope: str, task: str) -> set[str]:
        cur = self.db.execute("SELECT mkey FROM points WHERE model=? AND length=? AND rope=? AND task=?",
                              (model, length, rope, task))
        return {r[0] for r in cur}

    def add(self, model, length, rope, m, task, metrics, seconds, batched) -> None:
        with self.db:  # one transaction per point
            self.db.execute("INSERT OR IGNORE INTO points VALUES (?,?,?,?,?,?,?,?,?,?)",
                            (model, length, rope, mkey(m), m, task, json.dumps(metrics), seconds,
                             int(batched), time.time()))

    def rows(self) -> list[dict[str, Any]]:
        cur = self.db.execute("SELECT model, length, rope, multiplier, task, metrics, seconds, batched "
                              "FROM points ORDER BY model, task, rope, length, multiplier")
        keys = ("model", "length", "rope", "multiplier", "task", "metrics", "seconds", "batched")
        return [dict(zip(keys, (*r[:5], json.loads(r[5]), *r[6:]), strict=True)) for r in cur]

    def log_run(self, config: SweepConfig) -> None:
        with self.db:
            self.db.execute("INSERT INTO runs VALUES (?, ?)", (time.time(), json.dumps(asdict(config))))

    def close(self) -> None:
        self.db.close()


def eval_context(cfg: Any, trained_length: int) -> EvalContext:
    """The task context of a SweepConfig or TuneConfig (text, gutenberg, n_docs, trials, seed,
    batch_size)."""
    docs = data.load_text(cfg.text)
    hay = data.load_text(cfg.gutenberg) if cfg.gutenberg else ()
    return EvalContext(trained_length, docs, cfg.n_docs, cfg.trials, cfg.seed, batch_size=cfg.batch_size,
                       haystack=hay)


def _groups(pending: Sequence[float], batched: bool) -> Iterator[list[float]]:
    if batched and pending:
        yield list(pending)
    elif not batched:
        for m in pending:
            yield [m]


def run_sweep(cfg: SweepConfig, model=None, tok=None) -> Store:
    """Run every missing point of ``cfg`` into ``cfg.out/sweep.db``; returns the store."""
    store = Store(Path(cfg.out) / "sweep.db")
    store.log_run(cfg)
    if model is None:
        model, tok = load_model(cfg.model)
    trained = cfg.trained_length or text_config(model).max_position_embeddings
    ctx = eval_context(cfg, trained)
    total = len(cfg.lengths) * len(cfg.rope) * len(cfg.tasks) * len(cfg.multipliers)
    bar = tqdm(total=total, desc="sweep", disable=not cfg.progress)
    for length in cfg.lengths:
        for rope in cfg.rope:
            spec = TemperatureSpec(rope=rope_for(rope, length, trained))
            for task_name in cfg.tasks:
                done = store.done(cfg.model, length, rope, task_name)
                pending = [m for m in cfg.multipliers if mkey(m) not in done]
                bar.update(len(cfg.multipliers) - len(pending))
                task = get_task(task_name)
                for group in _groups(pending, cfg.batched):
                    t0 = time.perf_counter()
                    with patch(model, spec):
                        results = task.evaluate(model, tok, length, group, ctx)
                    per_point = (time.perf_counter() - t0) / len(group)
                    for m, metrics in zip(group, results, strict=True):
                        store.add(cfg.model, length, rope, m, task_name, metrics, per_point, cfg.batched)
                        bar.update(1)
                        bar.set_postfix(L=length, rope=rope, task=task_name, m=m)
    bar.close()
    return store
