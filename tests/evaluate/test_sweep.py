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
    assert rope_for("yarn", 1024, 256) == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 256,
        "attention_factor": 1.0,
    }
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
    cfg = SweepConfig(
        out=str(tmp_path), lengths=(320,), rope=("none", "yarn"), multipliers=(0.9, 1.1), n_docs=1, progress=False
    )
    rows = run_sweep(cfg, model, tok).rows
    assert len(rows) == 4 and {r["rope"] for r in rows} == {"none", "yarn"}
    first = {(r["rope"], r["multiplier"]): r["metrics"]["tail_ppl"] for r in rows}
    rows2 = run_sweep(cfg, model, tok).rows  # everything done: nothing recomputed or duplicated
    assert len(rows2) == 4 and {(r["rope"], r["multiplier"]): r["metrics"]["tail_ppl"] for r in rows2} == first


def test_kill_9_then_resume_loses_nothing_and_counts_nothing_twice(tmp_path):
    out = tmp_path / "sw"
    cmd = [
        sys.executable,
        "-m",
        "attntemp",
        "sweep",
        "--lengths",
        "256,320",
        "--rope",
        "none,yarn",
        "--multipliers",
        "0.8:1.2:0.1",
        "--docs",
        "1",
        "--sequential",
        "--out",
        str(out),
    ]
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


# ----------------------------------------------------------------------------- hostile input (issue 15)
def _small(tmp_path, **kw):
    base = dict(out=str(tmp_path / "sw"), lengths=(64,), rope=("none",), multipliers=(1.0,), n_docs=1, progress=False)
    return SweepConfig(**{**base, **kw})


def test_a_resume_with_other_settings_is_refused_naming_them(tiny, tmp_path):
    model, tok = tiny
    run_sweep(_small(tmp_path), model, tok)
    for change, named in (
        ({"n_docs": 2}, "n_docs=1"),
        ({"seed": 3}, "seed=0"),
        ({"trials": 7}, "trials=50"),
        ({"trained_length": 128}, "trained_length=256, key_distance=128"),  # K's default: L0 / 2
        ({"text": "gutenberg:melville-moby_dick"}, "text='stdlib'"),
    ):
        with pytest.raises(ValueError, match=f"holds points made with {named}; this run has"):
            run_sweep(_small(tmp_path, **change), model, tok)
    assert len(run_sweep(_small(tmp_path, multipliers=(1.0, 1.1)), model, tok).rows) == 2  # same settings: resumes
    assert len(run_sweep(_small(tmp_path, key_distance=128), model, tok).rows) == 2  # the default K, typed out


def test_multipliers_that_share_a_key_are_refused(tiny, tmp_path):
    with pytest.raises(ValueError, match=r"multipliers\[1\]=1.0000002 and 1.0000001 are the same to 6"):
        _small(tmp_path, multipliers=(1.0000001, 1.0000002))
    model, tok = tiny
    run_sweep(_small(tmp_path), model, tok)
    with pytest.raises(ValueError, match=r"multipliers\[0\]=1.0000001 shares its sweep.db key '1' with the stored"):
        run_sweep(_small(tmp_path, multipliers=(1.0000001,)), model, tok)


def test_a_second_sweep_on_the_same_folder_is_refused_while_the_first_runs(tiny, tmp_path, held_lock):
    """The lock another process holds (as a running sweep does) refuses this one, naming its pid;
    released (here: the holder killed), the folder is free again."""
    from attntemp.evaluate.sweep import LOCK_FILE

    out = tmp_path / "sw"
    out.mkdir()
    model, tok = tiny
    with held_lock(out / LOCK_FILE) as pid:
        with pytest.raises(ValueError, match=rf"is in use by another sweep \(pid {pid}\); wait for it"):
            run_sweep(_small(tmp_path), model, tok)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing computed or written
    run_sweep(_small(tmp_path), model, tok)  # the kernel dropped the lock with its holder


def test_a_failed_sweep_leaves_no_empty_database_or_folder(tiny, tmp_path, monkeypatch):
    import attntemp.evaluate.sweep.run as S

    model, tok = tiny

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(S, "evaluate_group", broken)
    with pytest.raises(RuntimeError, match="boom"):
        run_sweep(_small(tmp_path, out=str(tmp_path / "a" / "b")), model, tok)
    assert list(tmp_path.iterdir()) == []


def test_an_old_database_still_opens_and_resumes(tiny, tmp_path):
    """A sweep.db from before settings were recorded: its first run's config stands in for them."""
    import json

    out = tmp_path / "sw"
    out.mkdir()
    db = sqlite3.connect(out / "sweep.db")
    db.executescript("""
        CREATE TABLE points (model TEXT, length INTEGER, rope TEXT, mkey TEXT, multiplier REAL, task TEXT,
            metrics TEXT, seconds REAL, batched INTEGER, created REAL, PRIMARY KEY (model, length, rope, mkey, task));
        CREATE TABLE runs (started REAL, config TEXT);""")
    metrics = json.dumps({"tail_ppl": 5.0, "ppl": 5.0, "tail_start": 48})
    db.execute("INSERT INTO points VALUES ('tiny', 64, 'none', '1', 1.0, 'perplexity', ?, 1.0, 1, 0)", (metrics,))
    db.execute("INSERT INTO runs VALUES (0, ?)", (json.dumps({"model": "tiny", "text": "stdlib", "n_docs": 1}),))
    db.commit()
    db.close()
    reader = Store(out / "sweep.db", readonly=True)
    assert len(reader.rows()) == 1
    reader.close()
    model, tok = tiny
    with pytest.raises(ValueError, match="n_docs=1; this run has n_docs=2"):
        run_sweep(_small(tmp_path, n_docs=2), model, tok)
    rows = run_sweep(_small(tmp_path, multipliers=(1.0, 1.2)), model, tok).rows
    assert [r["multiplier"] for r in rows] == [1.0, 1.2] and rows[0]["metrics"]["ppl"] == 5.0


def test_a_checkpoint_changed_in_place_is_refused_and_an_old_database_gets_the_digest(tmp_path, monkeypatch):
    """Other weights of the same shapes written over the folder (as ``bake --overwrite`` does): the
    config and the safetensors header are unchanged, the weights digest is not."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from attntemp.assets import tiny_path

    monkeypatch.setenv("ATTNTEMP_CACHE", str(tmp_path / "cache"))
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_path(), ckpt)
    cfg = SweepConfig(out=str(tmp_path / "s"), model=str(ckpt), lengths=(64,), multipliers=(1.0,), n_docs=1,
                      progress=False)  # fmt: skip
    run_sweep(cfg)
    weights = load_file(ckpt / "model.safetensors")
    weights["model.layers.0.self_attn.q_proj.weight"] *= 1.1
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})  # same header, other bytes
    with pytest.raises(ValueError, match=r"holds points made with model_weights='[0-9a-f]{32}'; this run has"):
        run_sweep(cfg)
    cache = json.loads((tmp_path / "cache" / "digests.json").read_text())
    assert len(cache) == 1 and next(iter(cache.values()))["stamp"][0] == (ckpt / "model.safetensors").stat().st_size
    db = sqlite3.connect(tmp_path / "s" / "sweep.db")  # a database from before the digest was recorded
    settings = json.loads(db.execute("SELECT value FROM meta WHERE key='settings'").fetchone()[0])
    del settings["model_weights"]
    with db:
        db.execute("UPDATE meta SET value=? WHERE key='settings'", (json.dumps(settings),))
    db.close()
    run_sweep(cfg)  # opens; the digest is recorded now
    store = Store(tmp_path / "s" / "sweep.db", readonly=True)
    assert store.recorded_settings()["model_weights"] is not None and store.count() == 2
    store.close()
