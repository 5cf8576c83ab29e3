"""`attntemp sweep --workers N` on Ray: the same database rows as the single-process sweep, a resumed
store, a worker killed with -9 restarted, the driver killed with -9 and rerun; one-line errors.

Ray is part of `[dev]` (the README's test command and `.ci/run` install it): a missing Ray fails
these tests."""

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import ray
import torch

from attntemp.cli import main
from attntemp.evaluate import distributed
from attntemp.evaluate.sweep import SweepConfig, run_sweep

POINTS = {"lengths": (192, 320), "rope": ("none", "yarn"), "multipliers": (0.9, 1.0, 1.2), "n_docs": 2}
ROWS = "SELECT model, length, rope, mkey, multiplier, task, metrics, batched FROM points"


def rows(db):
    """Every column but the timings (seconds, created), sorted."""
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute(ROWS).fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """The single-process sweep, one CPU thread (as each of 2 workers on 2 cores gets)."""
    out = tmp_path_factory.mktemp("sequential")
    threads = torch.get_num_threads()
    try:
        run_sweep(SweepConfig(out=str(out), progress=False, threads=1, **POINTS))
    finally:
        torch.set_num_threads(threads)
    return rows(out / "sweep.db")


def test_ray_is_not_imported_with_attntemp():
    code = (
        "import sys, attntemp, attntemp.evaluate.sweep, attntemp.cli; attntemp.cli.build_parser(); "
        "print('ray' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_missing_ray_is_one_line_before_loading(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.setattr(distributed, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["sweep", "--workers", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "attntemp sweep: error: --workers 2 runs the sweep on Ray, which is not installed here: "
        "pip install 'attntemp[ray]'"
    ]
    assert main(["sweep", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert "--workers=0 is not allowed; expected an integer >= 1" in capsys.readouterr().err


def test_worker_resources():
    cfg = SweepConfig(out="x", workers=2, device="auto")
    assert distributed.resources(cfg, {"CPU": 16.0, "GPU": 2.0}) == {"num_gpus": 1, "num_cpus": 1}
    assert distributed.resources(cfg, {"CPU": 16.0}) == {"num_gpus": 0, "num_cpus": 8}
    assert distributed.resources(SweepConfig(out="x", workers=2), {"CPU": 16.0, "GPU": 2.0})["num_gpus"] == 0
    with pytest.raises(ValueError, match=r"^workers=3 is not allowed: the Ray cluster has 2 GPU\(s\)"):
        distributed.resources(SweepConfig(out="x", workers=3, device="auto"), {"CPU": 16.0, "GPU": 2.0})
    cuda = SweepConfig(out="x", device="cuda:1")  # the driver need not have the GPU; the cluster must
    with pytest.raises(ValueError, match=r"^device='cuda:1' is not allowed: the Ray cluster has no GPU"):
        distributed.resources(cuda, {"CPU": 4.0})
    with pytest.raises(ValueError, match=r"^workers=3 is not allowed: the Ray cluster has 2 CPU\(s\), one per worker"):
        distributed.resources(SweepConfig(out="x", workers=3), {"CPU": 2.0})  # else each waits for a CPU forever


SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame


@contextlib.contextmanager
def _loopback_server(reply: bytes):
    """A port on 127.0.0.1 that sends ``reply`` to each connection and closes it (in a thread)."""
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen()
    head.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = head.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield head.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        head.close()


def test_workers_and_the_address_are_checked_before_ray_starts(monkeypatch):
    monkeypatch.setattr(distributed.machine, "usable_cpus", lambda: 3)
    distributed.preflight_ray(SweepConfig(out="x", workers=3))
    with pytest.raises(ValueError, match=r"^workers=4 is not allowed; expected at most 3: a local Ray runs one"):
        distributed.preflight_ray(SweepConfig(out="x", workers=4))
    distributed.preflight_ray(SweepConfig(out="x", workers=1000, ray_address="auto"))  # the cluster's CPUs decide
    with _loopback_server(SETTINGS_FRAME) as port:  # a port answering gRPC's preface, as a Ray head does
        distributed.preflight_ray(SweepConfig(out="x", ray_address=f"127.0.0.1:{port}"))
        closed = f"127.0.0.1:{port}"
    with _loopback_server(b"") as port, pytest.raises(ValueError, match=r"accepts connections but did not answer"):
        distributed.preflight_ray(SweepConfig(out="x", ray_address=f"127.0.0.1:{port}"))  # another program's port
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^ray_address='{closed}' could not be reached within 5 s"):
        distributed.preflight_ray(SweepConfig(out="x", ray_address=closed))
    assert time.perf_counter() - t0 <= distributed.CONNECT_TIMEOUT + 1
    assert not ray.is_initialized()


@pytest.mark.slow  # a local Ray of 2 workers: 1-4 min on 2 cores; .ci/run runs it
def test_two_workers_resume_survive_a_killed_worker_and_match(sequential, tmp_path, monkeypatch):
    """A store half done by a single-process sweep (one length), then 2 Ray workers finish it; worker 0
    is killed with -9 after the first point they write, Ray restarts it and its group runs again."""
    out = str(tmp_path / "ray")
    run_sweep(SweepConfig(out=out, progress=False, threads=1, **{**POINTS, "lengths": (192,)}))
    killed, real_drain = [], distributed.drain

    def drain(ray_, workers, jobs, store, cfg):
        pid = ray_.get(workers[0].pid.remote())
        add = store.add

        def add_then_kill(*args):
            add(*args)
            if not killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        store.add = add_then_kill
        written = real_drain(ray_, workers, jobs, store, cfg)
        killed.append(ray_.get(workers[0].pid.remote()))  # the restarted worker's process
        return written

    monkeypatch.setattr(distributed, "drain", drain)
    run_sweep(SweepConfig(out=out, progress=False, workers=2, threads=1, **POINTS))
    assert len(killed) == 2 and killed[0] != killed[1]
    assert rows(tmp_path / "ray" / "sweep.db") == sequential
    assert not ray.is_initialized()  # the local Ray it started is shut down


def _kill_after_first_point(proc, db, deadline):
    while time.time() < deadline:
        if db.is_file():
            con = sqlite3.connect(db, timeout=30, isolation_level=None)
            try:  # count under an exclusive lock: the driver cannot commit between count and kill
                con.execute("BEGIN EXCLUSIVE")
                if con.execute("SELECT COUNT(*) FROM points").fetchone()[0] >= 1:
                    os.kill(proc.pid, signal.SIGKILL)
                    return proc.wait()
            except sqlite3.OperationalError:  # schema not written yet
                pass
            finally:
                con.close()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    return proc.wait()


@pytest.mark.slow
def test_kill_9_of_the_driver_then_rerun_gives_the_same_rows(sequential, tmp_path):
    out = tmp_path / "sw"
    flags = "--workers 2 --threads 1 --quiet --lengths 192,320 --rope none,yarn --multipliers 0.9,1,1.2 --docs 2"
    cmd = [sys.executable, "-m", "attntemp", "sweep", *flags.split(), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _kill_after_first_point(proc, out / "sweep.db", time.time() + 300)
    time.sleep(3)
    try:  # what Ray's driver left (its agents outlive it): that session's process group, by its id
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    killed_at = len(rows(out / "sweep.db"))
    assert 1 <= killed_at < 12
    assert subprocess.run(cmd, capture_output=True, timeout=600).returncode == 0
    assert rows(out / "sweep.db") == sequential
