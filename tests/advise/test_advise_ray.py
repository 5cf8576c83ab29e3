"""advise --workers 2 on a local Ray cluster: the serial run's scores, row for row, and its decision.

Ray is part of `[dev]`; a local Ray of two workers on 2 cores takes about a minute (marked slow:
`.ci/run` runs it)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3

import pytest

from attntemp.advise.config import AdviseConfig
from attntemp.advise.run import run_advise

SMALL = {
    "length": 512, "race_windows": 4, "block": 2, "min_windows": 2, "n_docs": 2, "tune_m": False,
    "check_lengths": (), "retrieval_per_window": 1, "retrieval_prompts": 2, "engine": "transformers",
    "progress": False, "threads": 1,
}  # fmt: skip


def scores(folder) -> dict[str, dict]:
    con = sqlite3.connect(folder / "scores.db")
    try:
        return {k: json.loads(m) for k, m in con.execute("SELECT key, metrics FROM scores")}
    finally:
        con.close()


@pytest.mark.slow
def test_two_workers_give_the_serial_runs_scores_and_recommendation(tmp_path, monkeypatch):
    """Worker 0 is killed with -9 after the first job returns: Ray restarts it, its job runs again."""
    ray = pytest.importorskip("ray")
    from attntemp.evaluate import distributed

    killed, real_map = [], distributed.RayPool.map

    def map_then_kill(self, *args):
        for out in real_map(self, *args):
            if not killed:
                killed.append(ray.get(self.workers[0].pid.remote()))
                os.kill(killed[0], signal.SIGKILL)
            yield out

    monkeypatch.setattr(distributed.RayPool, "map", map_then_kill)
    serial = run_advise(AdviseConfig(out=str(tmp_path / "serial"), **SMALL))
    on_ray = run_advise(AdviseConfig(out=str(tmp_path / "ray"), workers=2, **SMALL))
    assert killed
    assert scores(tmp_path / "ray") == scores(tmp_path / "serial")
    assert on_ray.recommendation == serial.recommendation
    assert on_ray.by_engine == serial.by_engine
    assert not ray.is_initialized()  # the local Ray it started is shut down


def test_workers_are_checked_before_any_work(tmp_path, monkeypatch):
    from attntemp.evaluate import distributed

    monkeypatch.setattr(distributed.machine, "usable_cpus", lambda: 2)
    with pytest.raises(ValueError, match=r"^workers=3 is not allowed; expected at most 2"):
        run_advise(AdviseConfig(out=str(tmp_path / "a"), workers=3, **SMALL))
    assert not (tmp_path / "a").exists()
    with pytest.raises(ValueError, match=r"^workers=0 is not allowed"):
        AdviseConfig(out="x", workers=0, length=512)
