"""Sweeps: every (length, RoPE method, multiplier, task) point, stored in SQLite as it finishes.

A point is written in its own transaction keyed by (model, length, rope, multiplier, task), so a
sweep killed at any moment (even ``kill -9``) resumes where it stopped with nothing lost or
counted twice. Several multipliers run as one batched forward (one batch row per m) unless
``batched=False``.

Everything else that changes a number (text, documents, trials, seed, haystack, dtype, trained
length, the model's files: :data:`SETTINGS`) is recorded once per database; a rerun with other
settings is refused, naming the difference, instead of mixing its points with the old ones.
Multipliers are keyed to 6 significant digits: two that share a key are refused. One sweep at a
time writes a folder (a lock on ``.sweep.lock``; a second one is refused, naming the first's pid).
Lengths, memory and ``out`` are checked before the model loads (:mod:`.limits`).
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

from ..hf import devices, introspect, preflight
from ..hf.loading import load_model
from ..hf.patch import patch
from ..hf.rope_scaling import SCALINGS, rope_for
from ..ops.spec import TemperatureSpec
from ..utils import checks, options, outputs
from ..utils.options import option
from . import limits
from .tasks import TASKS, EvalContext, EvalOptions, eval_context, get_task


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
    workers: int = option(1, "Ray workers, one model each (one GPU each where there are GPUs); > 1 starts a local Ray")
    ray_address: str | None = option(None, "join this Ray cluster (e.g. auto, or HOST:6379) instead of a local one")

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
        for name in ("lengths", "rope", "tasks", "multipliers"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty; give at least one value")
        distinct_keys("multipliers", self.multipliers)
        if self.trained_length is not None:
            checks.positive_int("trained_length", self.trained_length)
        checks.positive_int("workers", self.workers)


SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    model TEXT, length INTEGER, rope TEXT, mkey TEXT, multiplier REAL, task TEXT,
    metrics TEXT, seconds REAL, batched INTEGER, created REAL,
    PRIMARY KEY (model, length, rope, mkey, task));
CREATE TABLE IF NOT EXISTS runs (started REAL, config TEXT);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


LOCK_FILE = ".sweep.lock"
# What changes a point's numbers besides its key (asdict of the config, plus what run_sweep adds).
SETTINGS = ("model", "text", "n_docs", "trials", "seed", "gutenberg", "dtype", "trained_length", "model_files")


def mkey(m: float) -> str:
    return f"{m:.6g}"


def distinct_keys(name: str, values: Sequence[float]) -> None:
    """Raise when two multipliers share a database key (the same to 6 significant digits)."""
    seen: dict[str, float] = {}
    for i, m in enumerate(values):
        if mkey(m) in seen and seen[mkey(m)] != m:
            raise ValueError(
                f"{name}[{i}]={m!r} and {seen[mkey(m)]!r} are the same to 6 significant digits, which is how "
                "sweep.db keys a point; give multipliers that differ within 6 digits"
            )
        seen[mkey(m)] = m


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
                self.db.executescript(SCHEMA)
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
            return dict(json.loads(row[0]))
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


def _groups(pending: Sequence[float], batched: bool) -> Iterator[list[float]]:
    if batched and pending:
        yield list(pending)
    elif not batched:
        for m in pending:
            yield [m]


def preflight_sweep(cfg: SweepConfig, model=None, tok=None) -> tuple[Any, dict[str, Any]]:
    """Before the model loads: each length long enough for each task (the tokenizer alone), each
    forward within the memory available; returns the tokenizer and the settings to record."""
    config = model.config.to_dict() if model is not None else preflight.source_config(cfg.model)
    tok = tok if tok is not None else preflight.load_tokenizer(cfg.model)
    limits.check_lengths("lengths", cfg.lengths, cfg.tasks, tok)
    k = len(cfg.multipliers) if cfg.batched else 1
    rows = limits.forward_rows(cfg.batch_size, cfg.n_docs, cfg.trials, k)
    retrieval = cfg.trials if set(cfg.tasks) - {"perplexity"} else 0
    limits.check_memory("lengths", cfg.lengths, config and preflight.text_part(config), rows, retrieval)
    trained = cfg.trained_length or (
        introspect.trained_length(model) if model is not None else preflight.trained_length(config or {})
    )
    dtype = str(devices.check_dtype(getattr(cfg, "dtype", None), getattr(cfg, "device", "cpu"))).split(".")[-1]
    found = {**asdict(cfg), "dtype": dtype, "trained_length": trained, "model_files": preflight.fingerprint(cfg.model)}
    return tok, {k: found.get(k) for k in SETTINGS}


def check_resumable(out: str | Path, opts: EvalOptions) -> None:
    """Raise when ``out/sweep.db`` holds points made with other evaluation settings than ``opts``
    (the text, documents, trials, seed, haystack, model): a run that sweeps into ``out`` later
    would be refused then; this says so before any work."""
    db = Path(out) / "sweep.db"
    if not db.is_file():
        return
    store = Store(db, readonly=True)
    try:
        old = store.recorded_settings() or {}
    finally:
        store.close()
    new = asdict(opts)
    differ = [k for k in ("model", "text", "n_docs", "trials", "seed", "gutenberg") if k in old and old[k] != new[k]]
    if differ:
        was = ", ".join(f"{k}={old[k]!r}" for k in differ)
        raise ValueError(
            f"out={str(out)!r} holds a sweep.db made with {was}; use the same settings, another out folder, "
            "or delete that sweep.db"
        )


def check_exact(done: dict[str, float], multipliers: Sequence[float]) -> None:
    """Raise when a stored point's exact multiplier differs from the one asked under its key."""
    for i, m in enumerate(multipliers):
        if mkey(m) in done and done[mkey(m)] != m:
            raise ValueError(
                f"multipliers[{i}]={m!r} shares its sweep.db key {mkey(m)!r} with the stored m={done[mkey(m)]!r} "
                "(6 significant digits); give that stored value, or multipliers that differ within 6 digits"
            )


def run_sweep(cfg: SweepConfig, model=None, tok=None) -> Store:
    """Run every missing point of ``cfg`` into ``cfg.out/sweep.db``; returns the store. With
    ``cfg.workers > 1`` or ``cfg.ray_address`` the points run on Ray workers, each loading its own
    model (:mod:`.distributed`; ``model`` and ``tok`` are not used then).

    Checked before the model loads: ``out`` (a writable folder, not in use by another sweep), the
    lengths and memory (:func:`preflight_sweep`) and the settings of points already stored. A run
    that fails leaves no empty ``sweep.db`` and no empty ``out`` folder it created."""
    out = outputs.check_out(cfg.out)
    db = out / "sweep.db"
    existed = db.exists()
    with outputs.output_folder(out, scratch=(LOCK_FILE,)), outputs.exclusive(out / LOCK_FILE, "sweep"):
        tok, settings = preflight_sweep(cfg, model, tok)
        store = Store(db)
        try:
            store.check_settings(settings)
            for length in cfg.lengths:  # stored multipliers that only share a key: refused before loading
                for rope in cfg.rope:
                    for task in cfg.tasks:
                        check_exact(store.done(cfg.model, length, rope, task), cfg.multipliers)
            if cfg.workers > 1 or cfg.ray_address:
                store.close()
                from .distributed import run_distributed  # Ray is imported only here

                return run_distributed(cfg)
            return _run_here(cfg, store, model, tok)
        except BaseException:
            _drop_if_empty(store, db, existed)
            raise


def _drop_if_empty(store: Store, db: Path, existed: bool) -> None:
    """Close ``store``; delete its file when this run created it and no point was written."""
    try:
        empty = not existed and store.count() == 0
    except sqlite3.Error:
        empty = False
    store.close()
    if empty:
        for p in (db, db.with_name(db.name + "-journal")):
            p.unlink(missing_ok=True)


def _run_here(cfg: SweepConfig, store: Store, model=None, tok=None) -> Store:
    """The sweep in this process (store opened and its settings checked)."""
    store.log_run(cfg)
    if model is None:
        model, tok = load_model(cfg.model, **cfg.load_args())
    trained = cfg.trained_length or introspect.trained_length(model)
    store.set_trained_length(trained)
    ctx = eval_context(cfg, trained)
    total = len(cfg.lengths) * len(cfg.rope) * len(cfg.tasks) * len(cfg.multipliers)
    with tqdm(total=total, desc="sweep", disable=not cfg.progress) as bar:  # closed (line ended) on errors too
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
    return store


def point_groups(cfg: SweepConfig, store: Store) -> Iterator[tuple[int, str, str, list[float]]]:
    """``(length, rope, task, multipliers)`` of every group of points still missing from ``store``,
    grouped as :func:`run_sweep` runs them (one batched forward per group)."""
    for length in cfg.lengths:
        for rope in cfg.rope:
            for task_name in cfg.tasks:
                done = store.done(cfg.model, length, rope, task_name)
                check_exact(done, cfg.multipliers)
                pending = [m for m in cfg.multipliers if mkey(m) not in done]
                for group in _groups(pending, cfg.batched):
                    yield length, rope, task_name, group


def evaluate_group(
    model, tok, ctx: EvalContext, length: int, rope: str, task_name: str, group: Sequence[float]
) -> tuple[list[dict[str, Any]], float]:
    """One group's metrics (one dict per multiplier, per-window values kept) and seconds per point."""
    spec = TemperatureSpec(rope=rope_for(rope, length, ctx.trained_length))
    t0 = time.perf_counter()
    with patch(model, spec):
        results = get_task(task_name).evaluate(model, tok, length, list(group), ctx)
    return results, (time.perf_counter() - t0) / len(group)
