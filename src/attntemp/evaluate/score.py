"""One way to score a spec: :func:`score` / :func:`score_many`, every result kept in a
:class:`ScoreStore` under a digest of what made it.

``score(model, tok, spec, task, length, ctx)`` patches the model with the spec and runs the
registered task on the windows of ``ctx`` (all of them, or the block ``ctx.window_range``).
The key of a result is a digest of

- the spec, whole (per-head tables, schedules, RoPE and LongRoPE factors included),
- the task and length,
- the windows: a digest of the text's documents and every context field that picks or scores
  them (documents, trials, seed, window block, key-token rule, needles per forward, haystack),
- the weights (a digest the caller computed once: :func:`model_identity`).

So any spec has a key, and a store shared by a sweep, a tune, ``advise`` and the scripts never
scores the same thing twice. Specs that differ only in their global multiplier run as one
batched forward (one batch row per m, as the tasks do); each result is written in its own
transaction, so a run killed at any moment resumes with nothing lost or counted twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from ..hf import preflight
from ..hf.patch import patch
from ..ops.spec import TemperatureSpec
from .task_base import EvalContext, get_task

SCORES_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    key TEXT PRIMARY KEY, task TEXT, length INTEGER, spec TEXT, metrics TEXT,
    seconds REAL, created REAL);
"""
SCORES_COLUMNS = ("key", "task", "length", "spec", "metrics", "seconds", "created")
# EvalContext fields that are the documents themselves (digested by content instead)
_DOC_FIELDS = ("docs", "haystack", "tuning_docs")
_DOC_DIGESTS: dict[int, tuple[Any, str]] = {}  # id(docs) -> (docs, digest): the documents kept alive


@dataclass(frozen=True)
class Result:
    """A spec's metrics on one task at one length (per-window values kept), and how it was made."""

    spec: TemperatureSpec
    task: str
    length: int
    metrics: dict[str, Any] = field(repr=False)
    key: str
    seconds: float
    cached: bool
    rows: int  # forward rows this spec's result needs (windows or trials), read from the store or not

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(),
            "task": self.task,
            "length": self.length,
            "metrics": self.metrics,
            "key": self.key,
            "seconds": self.seconds,
            "cached": self.cached,
        }


def documents_digest(docs: Sequence[Any]) -> str:
    """sha256 of the documents' names and texts (computed once per documents object)."""
    hit = _DOC_DIGESTS.get(id(docs))
    if hit is not None and hit[0] is docs:
        return hit[1]
    h = hashlib.sha256()
    for d in docs:
        h.update(d.name.encode() + b"\0" + d.text.encode("utf-8", "surrogatepass") + b"\0")
    if len(_DOC_DIGESTS) > 16:
        _DOC_DIGESTS.clear()
    _DOC_DIGESTS[id(docs)] = (docs, h.hexdigest())
    return h.hexdigest()


def context_digest(ctx: EvalContext) -> str:
    """A digest of everything in ``ctx`` that picks or scores the windows."""
    plain = {f.name: getattr(ctx, f.name) for f in fields(ctx) if f.name not in _DOC_FIELDS}
    plain.update({name: documents_digest(getattr(ctx, name)) for name in ("docs", "haystack")})
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


def score_key(spec: TemperatureSpec, task: str, length: int, ctx: EvalContext, model_id: str) -> str:
    """The store's key of ``spec`` on ``task`` at ``length`` on ``ctx``'s windows, with these weights."""
    what = {"spec": spec.to_dict(), "task": task, "length": int(length), "ctx": context_digest(ctx), "model": model_id}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def model_identity(model: Any, name: str | None = None) -> str:
    """What the scores' keys take as the weights: the digest of the named model's weights files
    when it is local (with the dtype they run in when it is not float32: a bfloat16 run's scores
    are not a float32 run's), else a digest of the parameters' bytes (the model in memory)."""
    found = preflight.weights_digest(name) if name else None
    if found:
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        return f"files:{found}" + ("" if dtype == "float32" else f":{dtype}")
    h = hashlib.blake2b(digest_size=16)
    for key, t in model.state_dict().items():
        h.update(key.encode())
        h.update(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return f"params:{h.hexdigest()}"


class NotStored(ValueError):
    """A score a read-only store does not hold: computing it would take a forward. ``short`` says
    how many specs are missing, in a few words (a table cell)."""

    def __init__(self, message: str, short: str = "not yet scored") -> None:
        super().__init__(message)
        self.short = short


def check_store(path: str | Path) -> None:
    """An existing file at ``path`` is a score store this version can use: an SQLite file with no
    table yet, or with a ``scores`` table of :data:`SCORES_COLUMNS`. Read-only, so a foreign file is
    refused before anything is written to it; the ValueError names the file."""
    path = Path(path)
    if not path.exists():
        return
    bad = f"{str(path)!r} is not a usable score store"
    if not path.is_file():
        raise ValueError(f"{bad}: it is not a file")
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60)
        try:
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            columns = {row[1] for row in db.execute("PRAGMA table_info(scores)")}
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ValueError(f"{bad}: {exc}") from None
    if "scores" not in tables:
        if tables:
            raise ValueError(f"{bad}: it holds table(s) {sorted(tables)} and no scores table (another program's file)")
        return
    missing = [c for c in SCORES_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"{bad}: its scores table has no column(s) {missing} (another program's file)")


class ScoreStore:
    """Results by key in SQLite (``scores`` table): one transaction per result. ``read_only``: an
    existing store opened read-only (a run in progress may be writing it); a score it lacks
    raises :class:`NotStored` instead of being computed."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path, self.read_only = Path(path), read_only
        try:
            if read_only:
                if not self.path.is_file():
                    raise sqlite3.OperationalError("no such file")
                check_store(self.path)
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=60)
                self.db.execute("SELECT COUNT(*) FROM scores")
                return
            check_store(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=60)  # one file (no WAL): a copy or commit of it is whole
            self.db.executescript(SCORES_SCHEMA)
        except sqlite3.Error as exc:
            raise ValueError(f"{str(self.path)!r} is not a usable score store: {exc}") from None

    def get(self, key: str) -> tuple[dict[str, Any], float] | None:
        row = self.db.execute("SELECT metrics, seconds FROM scores WHERE key=?", (key,)).fetchone()
        return None if row is None else (json.loads(row[0]), float(row[1]))

    def put(self, key: str, task: str, length: int, spec: TemperatureSpec, metrics: dict, seconds: float) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO scores VALUES (?,?,?,?,?,?,?)",
                (key, task, int(length), spec.to_json(), json.dumps(metrics), seconds, time.time()),
            )

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class Kept:
    """Where scores are kept: the store, and the model's identity in it (:func:`model_identity`)."""

    store: ScoreStore
    model_id: str = ""


_PROGRESS: ContextVar[Callable[[str], None] | None] = ContextVar("attntemp_score_progress", default=None)


@contextlib.contextmanager
def reporting(say: Callable[[str], None] | None) -> Iterator[None]:
    """Within this block :func:`score_many` hands ``say`` a line after each batch of forwards
    (None: no lines); what was set before is put back on the way out, even on error."""
    token = _PROGRESS.set(say)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


Job = tuple[TemperatureSpec, list[float]]  # a base spec and the global multipliers batched on it


def run_job(model: Any, tok: Any, task: str, length: int, ctx: EvalContext, job: Job) -> tuple[list[dict], float]:
    """One batched forward set: ``job``'s base patched on, its multipliers as batch rows; the
    metrics per multiplier and the seconds per spec."""
    base, multipliers = job
    t0 = time.perf_counter()
    with patch(model, base):
        results = get_task(task).evaluate(model, tok, length, multipliers, ctx)
    return results, (time.perf_counter() - t0) / len(multipliers)


class Pool(Protocol):
    """Where :func:`score_many` runs its jobs when not in this process (Ray workers:
    :class:`attntemp.evaluate.distributed.RayPool`): ``(job index, metrics, seconds)`` as each ends."""

    def map(
        self, task: str, length: int, ctx: EvalContext, jobs: Sequence[Job]
    ) -> Iterator[tuple[int, list[dict], float]]: ...


_POOL: ContextVar[Pool | None] = ContextVar("attntemp_score_pool", default=None)


@contextlib.contextmanager
def scoring_on(pool: Pool | None) -> Iterator[None]:
    """Within this block :func:`score_many` runs its forwards on ``pool`` (None: here), writing each
    result to the store as it arrives; what was set before is put back on the way out."""
    token = _POOL.set(pool)
    try:
        yield
    finally:
        _POOL.reset(token)


def _run_here(model: Any, tok: Any, task: str, length: int, ctx: EvalContext, jobs: Sequence[Job]):
    for j, job in enumerate(jobs):
        yield (j, *run_job(model, tok, task, length, ctx, job))


def base_of(spec: TemperatureSpec) -> TemperatureSpec:
    """``spec`` with its global multiplier 1: specs with one base run as one batched forward."""
    return spec if spec.multiplier == 1.0 else replace(spec, multiplier=1.0)


def score_many(
    model: Any,
    tok: Any,
    specs: Sequence[TemperatureSpec],
    task: str,
    length: int,
    ctx: EvalContext,
    store: ScoreStore | None = None,
    model_id: str = "",
) -> list[Result]:
    """Each spec scored on ``task`` (read from ``store`` when there): specs that share a base run
    batched, as many as fill ``ctx.batch_size`` rows with their windows per forward. Inside
    :func:`reporting`, a line after each batch of forwards says how many of the specs are done."""
    keys = [score_key(s, task, length, ctx, model_id) for s in specs]
    out: dict[int, Result] = {}
    for i, (s, key) in enumerate(zip(specs, keys, strict=True)):
        found = store.get(key) if store is not None else None
        if found is not None:
            out[i] = Result(s, task, length, found[0], key, found[1], True, get_task(task).windows_of(found[0]))
    by_base: dict[TemperatureSpec, list[int]] = {}
    for i, s in enumerate(specs):
        if i not in out and keys[i] not in {keys[j] for j in by_base.get(base_of(s), [])}:
            by_base.setdefault(base_of(s), []).append(i)
    if by_base and store is not None and store.read_only:
        missing = sum(len(v) for v in by_base.values())
        short = f"{missing} of {len(specs)} specs not yet scored"
        raise NotStored(f"{short} on {task} at {length} in {str(store.path)!r}", short)
    per = max(1, ctx.batch_size // _rows_per_spec(ctx))
    chunks = [idx[a : a + per] for idx in by_base.values() for a in range(0, len(idx), per)]
    jobs = [(base_of(specs[c[0]]), [specs[i].multiplier for i in c]) for c in chunks]
    pool = _POOL.get()
    ran = (
        pool.map(task, length, ctx, jobs)
        if pool is not None and jobs
        else _run_here(model, tok, task, length, ctx, jobs)
    )
    done, todo = 0, sum(len(c) for c in chunks)
    for j, results, seconds in ran:  # each written as it arrives: a killed run loses no finished job
        for i, metrics in zip(chunks[j], results, strict=True):
            if store is not None:
                store.put(keys[i], task, length, specs[i], metrics, seconds)
            out[i] = Result(
                specs[i], task, length, metrics, keys[i], seconds, False, get_task(task).windows_of(metrics)
            )
        done += len(chunks[j])
        if (say := _PROGRESS.get()) is not None:
            say(f"{task} at {length}: {done} of {todo} specs scored ({seconds:.0f} s a spec)")
    for i, key in enumerate(keys):  # a spec given twice: scored once
        if i not in out:
            first = next(j for j in out if keys[j] == key)
            out[i] = Result(specs[i], task, length, out[first].metrics, key, out[first].seconds, True, out[first].rows)
    return [out[i] for i in range(len(specs))]


def score(
    model: Any,
    tok: Any,
    spec: TemperatureSpec,
    task: str,
    length: int,
    ctx: EvalContext,
    store: ScoreStore | None = None,
    model_id: str = "",
) -> Result:
    """``spec`` on ``task`` at ``length`` on ``ctx``'s windows: the one way a spec is scored."""
    return score_many(model, tok, [spec], task, length, ctx, store, model_id)[0]


def _rows_per_spec(ctx: EvalContext) -> int:
    if ctx.window_range is not None:
        return ctx.window_range[1] - ctx.window_range[0]
    return ctx.n_docs


def merged(task: str, parts: Sequence[Result]) -> dict[str, Any]:
    """The metrics of consecutive window blocks of one spec as one result (:meth:`Task.merge`)."""
    return get_task(task).merge([p.metrics for p in parts])
