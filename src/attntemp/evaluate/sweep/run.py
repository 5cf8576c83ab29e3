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

import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ...hf import devices, introspect, preflight
from ...hf.loading import load_model
from ...utils import outputs
from .. import limits
from ..distributed import preflight_ray, run_distributed
from ..tasks import EvalOptions, eval_context
from .config import SweepConfig, mkey
from .store import LOCK_FILE, SETTINGS, Store, check_exact, evaluate_group, multiplier_groups
from .table import BEST_NOTE, best_table

__all__ = [
    "LOCK_FILE",
    "Store",
    "SweepConfig",
    "SweepPlan",
    "SweepResult",
    "check_resumable",
    "preflight_sweep",
    "run_sweep",
]


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep consumes, worked out once by :func:`preflight_sweep`."""

    cfg: SweepConfig  # the needles per forward fitted to the lengths
    tok: Any
    trained: int | None  # L0 (--trained-length, the model's or its config's); None: read off the loaded model
    settings: dict[str, Any]  # what the database records (:data:`SETTINGS`)


def preflight_sweep(cfg: SweepConfig, model=None, tok=None) -> SweepPlan:
    """Before the model loads: each length long enough for each task (the tokenizer alone), each
    forward within the memory available; returns the plan: the tokenizer, the needles fitted, the
    trained length and the settings to record."""
    config = model.config.to_dict() if model is not None else preflight.source_config(cfg.model)
    tok = tok if tok is not None else preflight.load_tokenizer(cfg.model)
    trained = cfg.trained_length or (
        introspect.trained_length(model) if model is not None else preflight.source_trained_length(config)
    )
    cfg = limits.fit_needles(cfg, cfg.lengths, tok)
    limits.check_lengths("lengths", cfg.lengths, cfg.tasks, tok, opts=cfg, trained=trained)
    limits.check_evaluator(cfg, tok)
    k = len(cfg.multipliers) if cfg.batched else 1
    rows = limits.forward_rows(cfg.batch_size, cfg.n_docs, cfg.trials, k)
    retrieval = cfg.trials if set(cfg.tasks) & {"passkey", "needle"} else 0
    limits.check_length_memory("lengths", cfg.lengths, config and preflight.text_part(config), rows, retrieval)
    given = getattr(cfg, "dtype", None)  # auto: measured at load; the scores' keys carry the dtype it chose
    dtype = "auto" if given == "auto" else str(devices.check_dtype(given, getattr(cfg, "device", "cpu"))).split(".")[-1]
    files = {"model_files": preflight.fingerprint(cfg.model), "model_weights": preflight.weights_digest(cfg.model)}
    used = {"key_distance": cfg.key_distance or max(1, (trained or 2) // 2)}  # the value used, typed or not
    found = {**asdict(cfg), "dtype": dtype, "trained_length": trained, **files, **used}
    return SweepPlan(cfg, tok, trained, {k: found.get(k) for k in SETTINGS})


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


@dataclass(frozen=True)
class SweepResult:
    """What ``out/sweep.db`` holds after a sweep: every point (this run's and earlier ones) and the
    trained length it recorded; ``db`` is the database (closed: open it with :class:`Store`)."""

    out: str
    db: Path
    trained_length: int | None
    rows: list[dict[str, Any]] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:  # the --json document
        return {"out": self.out, "trained_length": self.trained_length, "points": self.rows}

    def markdown(self) -> str:
        return (
            f"{best_table(self.rows, self.trained_length)}\n\n{BEST_NOTE}\n\n"
            f"{len(self.rows)} points in {self.out}/sweep.db; `attntemp report {self.out}` makes the plots"
        )


def run_sweep(cfg: SweepConfig, model=None, tok=None) -> SweepResult:
    """Run every missing point of ``cfg`` into ``cfg.out/sweep.db`` (:func:`sweep_into`); returns
    every point it holds, the store closed."""
    store = sweep_into(cfg, model, tok)
    try:
        return SweepResult(cfg.out, store.path, store.trained_length(), store.rows())
    finally:
        store.close()


def sweep_into(cfg: SweepConfig, model=None, tok=None) -> Store:
    """Run every missing point of ``cfg`` into ``cfg.out/sweep.db``; returns the store, open. With
    ``cfg.workers > 1`` or ``cfg.ray_address`` the points run on Ray workers, each loading its own
    model (:mod:`.distributed`; ``model`` and ``tok`` are not used then).

    Checked before the model loads: ``out`` (a writable folder, not in use by another sweep), the
    lengths and memory (:func:`preflight_sweep`) and the settings of points already stored. A run
    that fails leaves no empty ``sweep.db`` and no empty ``out`` folder it created."""
    out = outputs.check_out(cfg.out)
    if cfg.workers > 1 or cfg.ray_address is not None:
        preflight_ray(cfg)  # before the folder, the store or Ray: workers within the CPUs, the address answering
    db = out / "sweep.db"
    existed = db.exists()
    with outputs.output_folder(out, scratch=(LOCK_FILE,)), outputs.exclusive(out / LOCK_FILE, "sweep"):
        plan = preflight_sweep(cfg, model, tok)
        given, cfg = cfg, plan.cfg
        store = Store(db)
        try:
            store.check_settings(plan.settings)
            limits.say_needles(given, cfg, cfg.lengths)
            for length in cfg.lengths:  # stored multipliers that only share a key: refused before loading
                for rope in cfg.rope:
                    for task in cfg.tasks:
                        check_exact(store.done(cfg.model, length, rope, task), cfg.multipliers)
            if cfg.workers > 1 or cfg.ray_address:
                store.close()
                return run_distributed(cfg)
            return _run_here(plan, store, model)
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


def _run_here(plan: SweepPlan, store: Store, model=None) -> Store:
    """The sweep in this process (store opened and its settings checked)."""
    cfg, tok = plan.cfg, plan.tok
    store.log_run(cfg)
    if model is None:
        model, _ = load_model(cfg.model, **cfg.load_args())
    trained = plan.trained or introspect.trained_length(model)
    store.set_trained_length(trained)
    ctx = eval_context(cfg, trained)
    total = len(cfg.lengths) * len(cfg.rope) * len(cfg.tasks) * len(cfg.multipliers)
    with tqdm(total=total, desc="sweep", disable=not cfg.progress) as bar:  # closed (line ended) on errors too
        for length in cfg.lengths:
            for rope in cfg.rope:
                for task_name in cfg.tasks:
                    done = store.done(cfg.model, length, rope, task_name)
                    pending = [m for m in cfg.multipliers if mkey(m) not in done]
                    bar.update(len(cfg.multipliers) - len(pending))
                    for group in multiplier_groups(pending, cfg.batched):
                        results, per_point = evaluate_group(model, tok, ctx, length, rope, task_name, group)
                        for m, metrics in zip(group, results, strict=True):
                            store.add(cfg.model, length, rope, m, task_name, metrics, per_point, cfg.batched)
                            bar.update(1)
                            bar.set_postfix(L=length, rope=rope, task=task_name, m=m)
    return store
