"""Sweeps: config validation, multiplier parsing, and resume after kill -9."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from attntemp.evaluate.sweep import Store, SweepConfig, run_sweep
from attntemp.hf.rope_scaling import rope_for
from attntemp.utils.options import multipliers as parse_multipliers


def test_parse_multipliers():
    assert parse_multipliers("0.8:1.0:0.1") == (0.8, 0.9, 1.0)
    assert parse_multipliers("1.2,0.8,1.2") == (0.8, 1.2)
    for bad, match in (("1:0.5:0.1", "LO:HI:STEP"), ("a,b", "LO:HI:STEP"), ("0,1", r"multipliers\[0\]=0")):
        with pytest.raises(ValueError, match=match):
            parse_multipliers(bad)


def test_rope_for():
    assert rope_for("none", 1024, 256) is None
    assert rope_for("yarn", 1024, 256) == {"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 256, "attention_factor": 1.0}
    assert rope_for("linear", 128, 256)["factor"] == 1.0
    with pytest.raises(ValueError, match="Did you mean 'yarn'"):
        rope_for("yarm", 1, 1)


def test_config_validation():
    with pytest.raises(ValueError, match="Did you mean 'perplexity'"):
        SweepConfig(out="x", tasks=("perplexty",))
    with pytest.raises(ValueError, match=r"lengths\[0\]=0"):
        SweepConfig(out="x", lengths=(0,))


def test_sweep_runs_and_skips_finished_points(tiny, tmp_path):
    model, tok = tiny
    cfg = SweepConfig(out=str(tmp_path), lengths=(320,), rope=("none", "yarn"), multipliers=(0.9, 1.1),
                      n_docs=1, progress=False)
    rows = run_sweep(cfg, model, tok).rows()
    assert len(rows) == 4 and {r["rope"] for r in rows} == {"none", "yarn"}
    first = {(r["rope"], r["multiplier"]): r["metrics"]["tail_ppl"] for r in rows}
    rows2 = run_sweep(cfg, model, tok).rows()  # everything done: nothing recomputed or duplicated
    assert len(rows2) == 4 and {(r["rope"], r["multiplier"]): r["metrics"]["tail_ppl"] for r in rows2} == first


def test_kill_9_then_resume_loses_nothing_and_counts_nothing_twice(tmp_path):
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "attntemp", "sweep", "--lengths", "256,320", "--rope", "none,yarn",
           "--multipliers", "0.8:1.2:0.1", "--docs", "1", "--sequential", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / "sweep.db"
    deadline = time.time() + 240
    killed = False
    while time.time() < deadline and not killed:
        if db.is_file():  # count under an exclusive lock: the sweep cannot commit between count and kill
            con = sqlite3.connect(db, timeout=30, isolation_level=None)
            try:
                con.execute("BEGIN EXCLUSIVE")
                killed = con.execute("SELECT COUNT(*) FROM points").fetchone()[0] >= 3
                if killed:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
            except sqlite3.OperationalError:  # schema not written yet
                pass
            finally:
                con.close()
        time.sleep(0.02)
    if not killed:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    store = Store(db)
    killed_at = len(store.rows())
    store.close()
    assert 3 <= killed_at < 20
    assert subprocess.run(cmd, capture_output=True, timeout=600).returncode == 0
    store = Store(db)
    rows = store.rows()
    keys = [(r["length"], r["rope"], r["multiplier"]) for r in rows]
    assert len(rows) == 20 and len(set(keys)) == 20
    assert len(store.db.execute("SELECT * FROM runs").fetchall()) == 2
