"""Issue 54, item 1: Ctrl-C is one line and exit code 130, never a traceback, for every command.

The long-running commands are run for real in a subprocess on the shipped tiny model and sent
SIGINT once they have started work: after it, stderr holds exactly ``attntemp CMD: interrupted``
(with ``; rerun the same command to resume`` where a rerun resumes from ``--out``), and the same
command run again finishes (advise and demo keep every score stored before the signal; bake left
no staging folder and nothing at ``--out``).
The rerun runs in this process (one start-up less: each case takes under 20 s on 2 cores).
"""

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attntemp import cli
from attntemp.cli import main

RESUME = "; rerun the same command to resume"
SMALL = ["--length", "384", "--race-windows", "2", "--min-windows", "2", "--docs", "2", "--trials", "2", "--no-tune",
         "--check-lengths", "0", "--heldout-text", "none", "--threads", "1"]  # fmt: skip


def _sigint_default() -> None:
    """In the child: SIGINT as a terminal delivers it, even when the test runs with SIGINT ignored
    (a background job), so Python installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(
    cmd: list[str], ready: Callable[[list[str]], bool], timeout: float = 120
) -> tuple[int, list[str], list[str]]:
    """Run ``cmd``, send it SIGINT as soon as ``ready(stderr lines so far)`` holds (polled every
    10 ms); returns the exit code and its stderr lines before and after the signal."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr or ()], daemon=True)
    reader.start()
    before: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while not ready(before):
            try:
                before.append(lines.get(timeout=0.01))
                continue
            except queue.Empty:
                pass
            assert proc.poll() is None, f"{cmd[3]} ended ({proc.returncode}) before it was interrupted: {before}"
            assert time.monotonic() < deadline, f"{cmd[3]} never got ready: {before}"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    after = []
    while not lines.empty():
        after.append(lines.get())
    return code, before, after


def attntemp(*args: str) -> list[str]:
    return [sys.executable, "-m", "attntemp", *args]


def _rows(db: Path) -> set[tuple[str, float]]:
    """Every stored score, with when it was made (a score made again would have a new time)."""
    try:
        with sqlite3.connect(db) as con:
            return set(con.execute("SELECT key, created FROM scores"))
    except sqlite3.Error:  # not there yet, or being written
        return set()


def _started(db: Path, stage: str) -> Callable[[list[str]], bool]:
    """Ready once a progress line starting with ``stage`` is out and a score is stored."""
    return lambda lines: any(line.startswith(stage) for line in lines) and bool(_rows(db))


def _interrupted_once(code: int, before: list[str], after: list[str], line: str) -> None:
    assert code == 130, (before, after)
    assert after == [line + "\n"], after
    assert not any("Traceback" in x or "KeyboardInterrupt" in x for x in before + after)


def _no_staging(*folders: Path) -> None:
    """Nothing half-written left: no staging folder or temporary file beside or in ``folders``."""
    left = [p.name for f in folders if f.is_dir() for p in f.iterdir() if ".tmp" in p.name or ".old-" in p.name]
    assert not left, left


def test_advise_ctrl_c_is_one_line_and_the_rerun_resumes(tmp_path):
    out = tmp_path / "advise"
    cmd = attntemp("advise", *SMALL, "--block", "2", "--out", str(out))
    code, before, after = interrupt(cmd, _started(out / "scores.db", "advise: racing"))
    _interrupted_once(code, before, after, "attntemp advise: interrupted" + RESUME)
    _no_staging(tmp_path, out)
    assert not (out / "evidence.json").exists() and not (out / "report.html").exists()
    kept = _rows(out / "scores.db")
    assert main(cmd[3:]) == 0  # the same command again (in this process: no second start-up)
    assert kept and kept <= _rows(out / "scores.db")  # every score from before the signal read back, not made again
    assert (out / "report.html").is_file()


def test_demo_ctrl_c_is_one_line_and_the_rerun_resumes(tmp_path):
    out = tmp_path / "demo"
    cmd = attntemp("demo", *SMALL, "--out", str(out))
    code, before, after = interrupt(cmd, _started(out / "scores.db", "advise: confirming"))  # past the race
    _interrupted_once(code, before, after, "attntemp demo: interrupted" + RESUME)
    _no_staging(tmp_path, out)
    assert before[0].startswith("demo: ") and not (out / "report.html").exists()
    kept = _rows(out / "scores.db")
    assert main(cmd[3:]) == 0  # the same command again (in this process: no second start-up)
    assert kept and kept <= _rows(out / "scores.db")
    assert (out / "report.html").is_file()


def test_bake_ctrl_c_is_one_line_and_leaves_nothing(tmp_path):
    from attntemp.ops.spec import TemperatureSpec

    spec = tmp_path / "spec.json"
    TemperatureSpec(multiplier=1.2).save(spec)
    out = tmp_path / "baked"
    cmd = attntemp("bake", "--spec", str(spec), "--out", str(out), "--threads", "1")

    def writing(_: list[str]) -> bool:  # bake prints nothing until it is done: its staging folder says it has begun
        return any(p.name.startswith(".baked.tmp-") for p in tmp_path.iterdir())

    code, before, after = interrupt(cmd, writing)
    _interrupted_once(code, before, after, "attntemp bake: interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]  # no staging folder, nothing at --out
    assert main(cmd[3:]) == 0  # the same command again (in this process: no second start-up)
    assert (out / "model.safetensors").is_file()


def test_sweep_ctrl_c_ends_its_bar_says_one_line_and_the_rerun_resumes(tmp_path, monkeypatch):
    import attntemp.evaluate.sweep.run as sweep

    out = tmp_path / "sweep"
    cmd = attntemp("sweep", "--out", str(out), "--lengths", "256,512,1024", "--multipliers", "0.5:1.5:0.05", "--rope",
                   "none,yarn", "--docs", "2", "--sequential", "--threads", "1")  # fmt: skip

    def points() -> int:
        try:
            with sqlite3.connect(out / "sweep.db") as con:
                return con.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        except sqlite3.Error:
            return 0

    code, before, after = interrupt(cmd, lambda _: points() >= 4)
    assert code == 130 and after[-1] == "attntemp sweep: interrupted" + RESUME + "\n", after
    bar = "".join(before + after[:-1])  # its progress bar, ended on a line of its own, and nothing else
    assert bar.endswith("\n") and all(not s.strip() or s.startswith("sweep:") for s in bar.strip().split("\r"))
    assert "Traceback" not in bar
    kept, total = points(), 3 * 21 * 2
    assert 4 <= kept < total
    scored = []
    real = sweep.evaluate_group
    monkeypatch.setattr(sweep, "evaluate_group", lambda *a: scored.extend(a[-1]) or real(*a))
    assert main([*cmd[3:], "--quiet"]) == 0
    assert len(scored) == total - kept and points() == total  # only the points the first run had not stored


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["eval", "--spec", "s.json", "--tasks", "t"], "attntemp eval: interrupted"),
        (["sweep", "--out", "S"], "attntemp sweep: interrupted" + RESUME),
        (["tune", "--out", "T"], "attntemp tune: interrupted"),  # no gradient checkpoint: a rerun starts over
        (["measure", "--out", "M", "--length", "64"], "attntemp measure: interrupted"),
    ],
)
def test_every_command_says_interrupted_in_one_line(argv, line, monkeypatch, tmp_path, capsys):
    """In process, the command's work replaced by a Ctrl-C: one line, exit code 130."""
    monkeypatch.chdir(tmp_path)
    from attntemp.commands import PLAIN_COMMANDS

    module, _, runner = PLAIN_COMMANDS[argv[0]].runner.partition(":")  # looked up when the command runs

    def ctrl_c(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(f"attntemp.{module}.{runner}", ctrl_c)
    assert main(argv) == 130
    assert capsys.readouterr().err.splitlines() == [line]


def test_tune_says_resume_only_where_its_checkpoint_is(tmp_path):
    import argparse

    out = tmp_path / "T"
    args = argparse.Namespace(out=str(out))  # flags not given are not in the namespace
    assert cli.interrupted("tune", args) == "attntemp tune: interrupted"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"")
    assert cli.interrupted("tune", args) == "attntemp tune: interrupted" + RESUME
    assert cli.interrupted("tune", argparse.Namespace(out=str(out), overwrite=True)) == "attntemp tune: interrupted"
    assert cli.interrupted(None) == "attntemp: interrupted"


def test_ctrl_c_while_the_command_module_imports(monkeypatch, capsys):
    """Before the command's parser exists (torch importing): still one line, no traceback."""

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", ctrl_c)
    assert main(["advise", "--length", "512", "--out", os.devnull]) == 130
    assert capsys.readouterr().err.splitlines() == ["attntemp advise: interrupted" + RESUME]
