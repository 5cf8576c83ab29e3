"""What a sweep stores and how its points are grouped: :class:`SweepConfig`, the SQLite
:class:`Store`, the multiplier keys, and one group of points evaluated (:func:`evaluate_group`).

Used by the runner in this process (:mod:`.sweep`) and by the Ray workers (:mod:`.distributed`);
it imports neither. A point is written in its own transaction keyed by (model, length, rope,
multiplier, task); everything else that changes a number (:data:`SETTINGS`) is recorded once per
database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...ops.rope.scalings import rope_for
from ...ops.spec import TemperatureSpec
from ..score import score_many
from ..tasks import EvalContext
from .config import SweepConfig, mkey

SWEEP_SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    model TEXT, length INTEGER, rope TEXT, mkey TEXT, multiplier REAL, task TEXT,
    metrics TEXT, seconds REAL, batched INTEGER, created REAL,
    PRIMARY KEY (model, length, rope, mkey, task));
CREATE TABLE IF NOT EXISTS runs (started REAL, config TEXT);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


LOCK_FILE = ".sweep.lock"
# key_tokens' rule and the needles' count (a database from before them recorded none: not compared)
DISTANT_SETTINGS = ("key_ngram", "key_distance", "key_evaluator", "key_alpha", "key_beta", "needles_per_forward")
# What changes a point's numbers besides its key (asdict of the config, plus what run_sweep adds).
# model_weights: a digest of the weights files' bytes (a database from before it recorded none: it is
# recorded on the next run, the points already there taken as made with the weights found then)
SETTINGS = (
    "model",
    "text",
    "n_docs",
    "trials",
    "seed",
    "gutenberg",
    "dtype",
    "trained_length",
    "model_files",
    "model_weights",
    *DISTANT_SETTINGS,
)


class Store:
    """The sweep database: one row per finished point (``readonly`` to read one, e.g. reports)."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        try:
            if readonly:
                self.db = sqlite3.connect(self.path.absolute().as_uri() + "?mode=ro", uri=True)
                self.db.execute("SELECT mkey FROM points LIMIT 1").fetchall()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path)
                self.db.executescript(SWEEP_SCHEMA)
                with self.db:  # a read-only file or folder fails here, not after the first point
                    self.db.execute("INSERT OR REPLACE INTO meta VALUES ('opened', ?)", (str(time.time()),))
        except sqlite3.Error as exc:
            raise ValueError(f"{str(self.path)!r} is not a usable sweep database: {exc}") from None

    def done(self, model: str, length: int, rope: str, task: str) -> dict[str, float]:
        """The finished points of a (model, length, rope, task): their key -> exact multiplier."""
        cur = self.db.execute(
            "SELECT mkey, multiplier FROM points WHERE model=? AND length=? AND rope=? AND task=?",
            (model, length, rope, task),
        )
        return {r[0]: r[1] for r in cur}

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM points").fetchone()[0])

    def recorded_settings(self) -> dict[str, Any] | None:
        """The settings the database's points were made with: recorded, or for a database from
        before they were, those of its first logged run (None for a database without points)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='settings'").fetchone()
        if row:
            found = dict(json.loads(row[0]))
            if "key_distance" in found and found["key_distance"] is None and found.get("trained_length"):
                found["key_distance"] = max(
                    1, int(found["trained_length"]) // 2
                )  # recorded as typed: None, the default
            return found
        first = self.db.execute("SELECT config FROM runs ORDER BY started LIMIT 1").fetchone()
        if first is None or not self.count():
            return None
        old = json.loads(first[0])
        row = self.db.execute("SELECT value FROM meta WHERE key='trained_length'").fetchone()
        was = int(row[0]) if row else None  # as recorded; never the tail-start guess
        kept = {k: old[k] for k in ("model", "text", "n_docs", "trials", "seed", "gutenberg") if k in old}
        return kept | ({"trained_length": was} if was else {})

    def check_settings(self, settings: dict[str, Any]) -> None:
        """Record ``settings``, or raise naming every one that differs from the recorded ones."""
        old = self.recorded_settings()
        if old is not None:
            differ = [k for k in SETTINGS if k in old and k in settings and old[k] != settings[k]]
            if differ:
                was = ", ".join(f"{k}={old[k]!r}" for k in differ)
                now = ", ".join(f"{k}={settings[k]!r}" for k in differ)
                raise ValueError(
                    f"out={str(self.path.parent)!r} holds points made with {was}; this run has {now}. "
                    "Their numbers would mix: rerun with the same settings to resume, or use another out folder"
                )
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('settings', ?)", (json.dumps({**(old or {}), **settings}),)
            )

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
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='trained_length'").fetchone()
        except sqlite3.OperationalError:  # an old database without the meta table
            row = None
        if row:
            return int(row[0])
        for r in self.rows():
            start = r["metrics"].get("tail_start")
            if r["task"] == "perplexity" and start is not None and r["length"] > start:
                return int(start)
        return None

    def close(self) -> None:
        self.db.close()


def multiplier_groups(pending: Sequence[float], batched: bool) -> Iterator[list[float]]:
    if batched and pending:
        yield list(pending)
    elif not batched:
        for m in pending:
            yield [m]


def check_exact(done: dict[str, float], multipliers: Sequence[float]) -> None:
    """Raise when a stored point's exact multiplier differs from the one asked under its key."""
    for i, m in enumerate(multipliers):
        if mkey(m) in done and done[mkey(m)] != m:
            raise ValueError(
                f"multipliers[{i}]={m!r} shares its sweep.db key {mkey(m)!r} with the stored m={done[mkey(m)]!r} "
                "(6 significant digits); give that stored value, or multipliers that differ within 6 digits"
            )


def point_groups(cfg: SweepConfig, store: Store) -> Iterator[tuple[int, str, str, list[float]]]:
    """``(length, rope, task, multipliers)`` of every group of points still missing from ``store``,
    grouped as :func:`run_sweep` runs them (one batched forward per group)."""
    for length in cfg.lengths:
        for rope in cfg.rope:
            for task_name in cfg.tasks:
                done = store.done(cfg.model, length, rope, task_name)
                check_exact(done, cfg.multipliers)
                pending = [m for m in cfg.multipliers if mkey(m) not in done]
                for group in multiplier_groups(pending, cfg.batched):
                    yield length, rope, task_name, group


def evaluate_group(
    model, tok, ctx: EvalContext, length: int, rope: str, task_name: str, group: Sequence[float]
) -> tuple[list[dict[str, Any]], float]:
    """One group's metrics (one dict per multiplier, per-window values kept) and seconds per point,
    scored in one batched forward (:func:`attntemp.evaluate.score.score_many`)."""
    base = rope_for(rope, length, ctx.trained_length)
    specs = [TemperatureSpec(multiplier=m, rope=base) for m in group]
    results = score_many(model, tok, specs, task_name, length, ctx)
    return [r.metrics for r in results], results[0].seconds
