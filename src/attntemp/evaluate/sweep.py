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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..hf import introspect
from ..hf.loading import load_model
from ..hf.patch import patch
from ..hf.rope_scaling import SCALINGS, rope_for
from ..ops.spec import TemperatureSpec
from ..utils import checks, options
from ..utils.options import option
from .tasks import TASKS, EvalOptions, eval_context, get_task


@dataclass(frozen=True, kw_only=True)
class SweepConfig(EvalOptions):
    """``attntemp sweep`` and :func:`run_sweep`: every (length, rope, multiplier, task) point."""

    out: str = option(help="output folder (sweep.db; a rerun resumes it)")
    lengths: tuple[int, ...] = option((512, 1024), "tokens per window, comma list", parse=options.ints)
    rope: tuple[str, ...] = option(
        ("none", "yarn"),
        f"RoPE extensions, comma list of {', '.join(SCALINGS)} (s = length / trained length)",
        parse=options.names,
    )
    multipliers: tuple[float, ...] = option(
        (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4),
        "logit multipliers m = 1/T: LO:HI:STEP or a comma list",
        parse=options.multipliers,
    )
    tasks: tuple[str, ...] = option(("perplexity",), f"comma list of {', '.join(TASKS)}", parse=options.names)
    batched: bool = option(True, "one forward per multiplier (no batching)", flag="--sequential", invert=True)
    trained_length: int | None = option(None, "the model's trained context L0 (default: from its config)", parse=int)

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, n in enumerate(self.lengths):
            checks.positive_int(f"lengths[{i}]", n)
        for r in self.rope:
            checks.choice("rope", r, SCALINGS)
        for i, t in enumerate(self.tasks):
            checks.choice(f"tasks[{i}]", t, TASKS)
        for i, m in enumerate(self.multipliers):
            checks.positive(f"multipliers[{i}]", m)
        if not self.multipliers:
            raise ValueError("multipliers is empty; give at least one multiplier")


SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    model TEXT, length INTEGER, rope TEXT, mkey TEXT, multiplier REAL, task TEXT,
    metrics TEXT, seconds REAL, batched INTEGER, created REAL,
    PRIMARY KEY (model, length, rope, mkey, task));
CREATE TABLE IF NOT EXISTS runs (started REAL, config TEXT);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
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
        cur = self.db.execute(
            "SELECT mkey FROM points WHERE model=? AND length=? AND rope=? AND task=?", (model, length, rope, task)
        )
        return {r[0] for r in cur}

    def add(self, model, length, rope, m, task, metrics, seconds, batched) -> None:
        with self.db:  # one transaction per point
            self.db.execute(
                "INSERT OR IGNORE INTO points VALUES (?,?,?,?,?,?,?,?,?,?)",
                (model, length, rope, mkey(m), m, task, json.dumps(metrics), seconds, int(batched), time.time()),
            )

    def rows(self) -> list[dict[str, Any]]:
        cur = self.db.execute(
            "SELECT model, length, rope, multiplier, task, metrics, seconds, batched "
            "FROM points ORDER BY model, task, rope, length, multiplier"
        )
        keys = ("model", "length", "rope", "multiplier", "task", "metrics", "seconds", "batched")
        return [dict(zip(keys, (*r[:5], json.loads(r[5]), *r[6:]), strict=True)) for r in cur]

    def log_run(self, config: SweepConfig) -> None:
        with self.db:
            self.db.execute("INSERT INTO runs VALUES (?, ?)", (time.time(), json.dumps(asdict(config))))

    def set_trained_length(self, length: int) -> None:
        """Record the model's trained length L0 (reports read it back with :meth:`trained_length`)."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('trained_length', ?)", (str(int(length)),))

    def trained_length(self) -> int | None:
        """L0 as recorded by the sweep; for a database from before it was recorded, the tail start
        of a perplexity point longer than it (the tail starts at L0 there)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='trained_length'").fetchone()
        if row:
            return int(row[0])
        for r in self.rows():
            start = r["metrics"].get("tail_start")
            if r["task"] == "perplexity" and start is not None and r["length"] > start:
                return int(start)
        return None

    def close(self) -> None:
        self.db.close()


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
    trained = cfg.trained_length or introspect.trained_length(model)
    store.set_trained_length(trained)
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
