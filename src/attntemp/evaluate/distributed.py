"""Sweeps and advise on Ray: the points of a sweep, or the forwards of advise's race and
confirmation, spread over workers, one model per worker.

``run_sweep`` comes here when ``workers > 1`` or ``ray_address`` is given. Each worker is a Ray
actor (:class:`SweepWorker`) that loads the model once and evaluates one group of points at a time:
one (length, RoPE, task) and its pending multipliers, the same groups and the same batched forward
as the single-process sweep (:func:`attntemp.evaluate.sweep.store.point_groups`), so the figures are the
same. A worker takes one GPU (``num_gpus=1``) where the cluster has GPUs and the device is not
``cpu``, and a share of the CPUs otherwise. Workers only compute and return each point's metrics
with their per-window values; the driver alone writes the SQLite store, one transaction per
point, so ``kill -9`` of the driver or of a worker loses no finished point and a rerun resumes
(a killed worker is restarted by Ray and its group run again).

advise's forwards go through :class:`RayPool`: :func:`attntemp.evaluate.score.score_many` hands it
its jobs (a base spec and the multipliers batched on it, on one task, length and block of windows),
the workers (:class:`ScoreWorker`) run them exactly as the driver would (:func:`~.score.run_job`),
and the driver writes each result to the one ``scores.db`` as it arrives; a killed worker is
restarted and its job run again, so the scores, and the decision, are a serial run's.

Ray is imported only when a sweep or advise asks for it (``pip install 'attntemp[ray]'``).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..hf import introspect
from ..hf.loading import load_model
from ..ops.spec import TemperatureSpec
from ..utils import resources as machine
from .ray_address import CONNECT_TIMEOUT, check_address, quiet_init  # noqa: F401 (CONNECT_TIMEOUT: read here too)
from .score import Job, run_job, scoring_on
from .sweep.config import SweepConfig
from .sweep.store import Store, evaluate_group, point_groups
from .task_base import EvalContext
from .tasks import eval_context

INSTALL = "pip install 'attntemp[ray]'"
RETRIES = 3  # restarts of a killed worker, and retries of the group it was running
NAMED_ADDRESSES = ("auto", "local")  # Ray finds these itself (RAY_ADDRESS, the local session)


def preflight_ray(cfg: Any) -> None:
    """Before the store opens or Ray starts: a local Ray's workers within this machine's CPUs (one
    model each), and ``ray_address`` not empty and answering as a Ray head within
    :data:`CONNECT_TIMEOUT` seconds (:func:`~.ray_address.check_address`; ``auto`` and ``local``
    are Ray's to find)."""
    if cfg.ray_address is not None and not cfg.ray_address.strip():
        raise ValueError("ray_address='' is not allowed; expected auto, or HOST:PORT of a Ray cluster's head")
    if cfg.ray_address is None:
        cpus = machine.usable_cpus()
        if cfg.workers > cpus:
            raise ValueError(
                f"workers={cfg.workers} is not allowed; expected at most {cpus}: a local Ray runs one worker "
                f"(one model) per CPU, and this process may use {cpus}; join a cluster with --ray-address for more"
            )
    elif cfg.ray_address not in NAMED_ADDRESSES:
        check_address(cfg.ray_address)


def import_ray(cfg: Any, what: str = "the sweep") -> Any:
    """The ``ray`` module, or a one-line error naming the flag and the install command."""
    try:
        import ray
    except ImportError:
        flag = f"--ray-address {cfg.ray_address}" if cfg.ray_address else f"--workers {cfg.workers}"
        raise ValueError(f"{flag} runs {what} on Ray, which is not installed here: {INSTALL}") from None
    return ray


class SweepWorker:
    """A Ray actor's state: the model loaded once, the task context, and groups evaluated on demand."""

    def __init__(self, cfg: SweepConfig, threads: int, on_gpu: bool) -> None:
        device = "cuda" if on_gpu and cfg.device.startswith("cuda") else cfg.device  # Ray picks the GPU
        self.model, self.tok = load_model(cfg.model, **cfg.load_args(device=device, threads=cfg.threads or threads))
        self.trained = cfg.trained_length or introspect.trained_length(self.model)
        self.ctx = eval_context(cfg, self.trained)

    def trained_length(self) -> int:
        return self.trained

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, length: int, rope: str, task: str, group: Sequence[float]) -> tuple[list[dict[str, Any]], float]:
        """One group's metrics (one dict per multiplier) and the seconds per point."""
        return evaluate_group(self.model, self.tok, self.ctx, length, rope, task, group)


def connect(ray: Any, cfg: Any) -> bool:
    """Join ``cfg.ray_address``, or start a local Ray with this machine's CPUs (and GPUs); True
    when this call started it (and its shutdown is ours)."""
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if cfg.ray_address:
        quiet_init(ray, cfg.ray_address, **quiet)  # one line naming --ray-address, Ray's own kept off the terminal
    else:
        quiet_init(ray, None, num_cpus=machine.usable_cpus(), **quiet)  # workers checked against it (preflight_ray)
    return True


def resources(cfg: Any, cluster: dict[str, float]) -> dict[str, float]:
    """Each worker's Ray resources: one GPU where the cluster has GPUs and the device allows, else
    an equal share of the CPUs. Raises when the cluster has fewer GPUs than workers."""
    gpus = int(cluster.get("GPU", 0))
    if cfg.device != "cpu" and gpus > 0:
        if cfg.workers > gpus:
            raise ValueError(f"workers={cfg.workers} is not allowed: the Ray cluster has {gpus} GPU(s), one per worker")
        return {"num_gpus": 1, "num_cpus": 1}
    if cfg.device.startswith("cuda"):
        raise ValueError(f"device={cfg.device!r} is not allowed: the Ray cluster has no GPU; expected cpu or auto")
    cpus = int(cluster.get("CPU", 1))
    if cfg.workers > cpus:  # each would wait for a CPU forever
        raise ValueError(f"workers={cfg.workers} is not allowed: the Ray cluster has {cpus} CPU(s), one per worker")
    return {"num_gpus": 0, "num_cpus": max(1, cpus // cfg.workers)}


def start_workers(ray: Any, cfg: SweepConfig) -> list[Any]:
    """``cfg.workers`` actors, each with its model loaded (restarted up to :data:`RETRIES` times)."""
    res = resources(cfg, ray.cluster_resources())
    actor = ray.remote(SweepWorker).options(max_restarts=RETRIES, max_task_retries=RETRIES, **res)
    return [actor.remote(cfg, int(res["num_cpus"]), res["num_gpus"] > 0) for _ in range(cfg.workers)]


def drain(ray: Any, workers: list[Any], jobs: Sequence[tuple], store: Store, cfg: SweepConfig) -> int:
    """Keep every worker busy with one group until all are done; write each returned point in its
    own transaction as soon as it arrives. Returns the number of points written."""
    queue, idle, written = deque(jobs), list(workers), 0
    running: dict[Any, tuple[Any, tuple]] = {}  # Ray future -> (worker, job)
    with tqdm(
        total=sum(len(j[3]) for j in jobs), desc=f"sweep on {len(workers)} workers", disable=not cfg.progress
    ) as bar:
        while queue or running:
            while idle and queue:
                worker, job = idle.pop(), queue.popleft()
                running[worker.evaluate.remote(*job)] = (worker, job)
            ready, _ = ray.wait(list(running), num_returns=1)
            worker, (length, rope, task, group) = running.pop(ready[0])
            results, seconds = ray.get(ready[0])
            for m, metrics in zip(group, results, strict=True):
                store.add(cfg.model, length, rope, m, task, metrics, seconds, cfg.batched)
                written += 1
            bar.update(len(group))
            idle.append(worker)
    return written


def run_distributed(cfg: SweepConfig) -> Store:
    """Every missing point of ``cfg`` into ``cfg.out/sweep.db``, evaluated on Ray workers."""
    ray = import_ray(cfg)
    store = Store(Path(cfg.out) / "sweep.db")
    store.log_run(cfg)
    started = connect(ray, cfg)
    workers: list[Any] = []
    try:
        workers = start_workers(ray, cfg)
        trained = cfg.trained_length or ray.get(workers[0].trained_length.remote())
        store.set_trained_length(trained)
        drain(ray, workers, list(point_groups(cfg, store)), store, cfg)
    finally:
        for w in workers:
            ray.kill(w)
        if started:
            ray.shutdown()
    return store


# ----------------------------------------------------------------------------- advise's forwards
class ScoreWorker:
    """A Ray actor's state for advise: the model loaded once; jobs of :func:`score_many` run on demand."""

    def __init__(self, model: str, load_args: dict[str, Any]) -> None:
        self.model, self.tok = load_model(model, **load_args)

    def pid(self) -> int:
        return os.getpid()

    def run(self, task: str, length: int, ctx: EvalContext, base: dict, multipliers: list) -> tuple[list, float]:
        """One job's metrics per multiplier and its seconds per spec (:func:`~.score.run_job`)."""
        return run_job(self.model, self.tok, task, length, ctx, (TemperatureSpec.from_dict(base), multipliers))


class RayPool:
    """``cfg.workers`` :class:`ScoreWorker` actors (``cfg``: a config with the model options and
    ``workers``/``ray_address``), each job sent to an idle one; :meth:`close` ends them (and a local
    Ray this pool started)."""

    def __init__(self, cfg: Any) -> None:
        self.ray = import_ray(cfg, "advise")
        self.started = connect(self.ray, cfg)
        res = resources(cfg, self.ray.cluster_resources())
        device = "cuda" if res["num_gpus"] > 0 and cfg.device.startswith("cuda") else cfg.device
        args = cfg.load_args(device=device, threads=cfg.threads or int(res["num_cpus"]))
        actor = self.ray.remote(ScoreWorker).options(max_restarts=RETRIES, max_task_retries=RETRIES, **res)
        self.workers = [actor.remote(cfg.model, args) for _ in range(cfg.workers)]

    def map(self, task: str, length: int, ctx: EvalContext, jobs: Sequence[Job]):
        """``(job index, metrics, seconds)`` of each job as it ends, every worker kept busy."""
        ctx_ref = self.ray.put(ctx)  # the windows' documents sent once, not once per job
        queue, idle = deque(enumerate(jobs)), list(self.workers)
        running: dict[Any, tuple[Any, int]] = {}  # Ray future -> (worker, job index)
        while queue or running:
            while idle and queue:
                worker, (j, (base, ms)) = idle.pop(), queue.popleft()
                running[worker.run.remote(task, length, ctx_ref, base.to_dict(), list(ms))] = (worker, j)
            ready, _ = self.ray.wait(list(running), num_returns=1)
            worker, j = running.pop(ready[0])
            results, seconds = self.ray.get(ready[0])
            idle.append(worker)
            yield j, results, seconds

    def close(self) -> None:
        for w in self.workers:
            self.ray.kill(w)
        if self.started:
            self.ray.shutdown()


@contextmanager
def scoring_on_ray(cfg: Any) -> Iterator[None]:
    """advise's forwards on Ray within this block where ``cfg.workers > 1`` or ``cfg.ray_address``
    is given (else here); the workers and a local Ray it started are ended on the way out."""
    if cfg.workers <= 1 and cfg.ray_address is None:
        yield
        return
    pool = RayPool(cfg)
    try:
        with scoring_on(pool):
            yield
    finally:
        pool.close()
