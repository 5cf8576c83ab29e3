"""The hostile cases of issue 62 that are not one command line each (the table is
``test_hostile.py``): two runs racing for one folder, what a finished run leaves, and the like."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attntemp.cli import main
from attntemp.utils.outputs import LOCK_NAME, RECORD

SRC = str(Path(__file__).resolve().parents[2] / "src")


def attntemp(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``attntemp argv`` in another process (offline, this checkout's source)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "attntemp", *argv], capture_output=True, text=True, env=env, cwd=cwd)


def test_a_second_measure_on_the_folder_is_refused_while_the_first_works(tmp_path, monkeypatch, capsys):
    """Issue 62 item 1: `measure --length 512`, then the same with `--length 384` on the same --out
    while the first works. Was: both exit 0 and say they wrote the files, one run's files lost; now
    the second is refused at once, naming the first's pid, and the first's files are all there."""
    import attntemp.analysis.run as run

    out = tmp_path / "D"
    second: list[subprocess.CompletedProcess] = []
    preflight = run.preflight_measure

    def while_the_first_works(cfg):  # the first holds --out from its start: its checks, load and writes
        second.append(attntemp("measure", "--length", "96", "--docs", "1", "--out", str(out), cwd=tmp_path))
        return preflight(cfg)

    monkeypatch.setattr(run, "preflight_measure", while_the_first_works)
    assert main(["measure", "--length", "64", "--docs", "1", "--out", str(out)]) == 0
    err = second[0].stderr.strip().splitlines()
    assert second[0].returncode == 2 and len(err) == 1, second[0].stderr
    assert err[0].startswith(f"attntemp measure: error: --out='{out}' is in use by another measure (pid {os.getpid()})")
    assert json.loads((out / "stats.json").read_text())["length"] == 64
    assert LOCK_NAME not in os.listdir(out)  # item 8: the lock goes with the run
    capsys.readouterr()
    assert main(["measure", "--length", "96", "--docs", "1", "--out", str(out)]) == 2  # a third: refused up front
    assert "already holds results (entropy_by_position.png" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["measure", "calibrate"])
def test_a_finished_run_leaves_only_its_own_files(tmp_path, command, capsys):
    """Issue 62 item 8: no .attntemp.lock in a user's folder after a run (nor after a refusal)."""
    import numpy as np

    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    if command == "measure":
        argv = ["measure", "--length", "64", "--docs", "1", "--out", str(out)]
    else:
        logits = tmp_path / "l.npz"
        np.savez(logits, logits=np.random.default_rng(0).normal(size=(40, 3)), labels=np.zeros(40, dtype=int))
        argv = ["calibrate", "--logits", str(logits), "--out", str(out)]
    assert main(argv) == 0
    assert LOCK_NAME not in os.listdir(out) and RECORD in os.listdir(out)
    before = sorted(os.listdir(out))
    assert main(argv) == 2  # refused: its results are there
    assert sorted(os.listdir(out)) == before


def test_audit_positions_past_the_models_context_are_said(tmp_path, capsys):
    """Issue 62 item 8: `audit --positions 100000000` on a model of 1M tokens ran with no word that
    the position is past its context; now a note names the positions and max_position_embeddings."""
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
              "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    argv = ["audit", "--config", str(tmp_path / "c.json"), "--engines", "transformers", "--positions"]
    assert main([*argv, "0,4095,100000000"]) == 0
    note = "note: --positions 100000000 is past the model's context, max_position_embeddings=4096"
    assert note in capsys.readouterr().out
    assert main([*argv, "0,4095"]) == 0
    assert "past the model's context" not in capsys.readouterr().out


class _UnreachableRay:
    """A stand-in for ``ray`` whose ``init`` does what Ray's does on a cluster it cannot join: its
    C++ core writes its log lines to file descriptor 2, then it raises."""

    def is_initialized(self) -> bool:
        return False

    def init(self, address=None, **kwargs):
        for i in range(20):
            os.write(2, f"[W 1 1] gcs_client.cc:210: Failed to get cluster ID from GCS server ({i})\n".encode())
        raise ConnectionError(f"Failed to connect to GCS at {address}; see the logs")


def test_a_ray_that_cannot_be_joined_is_one_line_naming_the_flag(capfd):
    """Issue 62 item 7: 20 lines of Ray's own gcs_client.cc errors, then "Failed to connect" naming
    no flag; now Ray's lines stay off the terminal and the error names --ray-address (the address
    itself is never contacted here: the stand-in fails as Ray does)."""
    from attntemp.evaluate import distributed
    from attntemp.evaluate.sweep import SweepConfig

    cfg = SweepConfig(out="x", ray_address="127.0.0.1:6379")
    with pytest.raises(ValueError) as exc:
        distributed.connect(_UnreachableRay(), cfg)
    assert str(exc.value).startswith("ray_address='127.0.0.1:6379': Ray could not start or join the cluster (Failed")
    said = capfd.readouterr()
    assert "gcs_client" not in said.err + said.out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["bake", "--spec", "{t}/s.json", "--out", "{t}/b"], "--out='{t}/b' is not allowed: the baked checkpoint"),
        (["demo", "--out", "{t}/d"], "--out='{t}/d' is not allowed: baked/, the baked checkpoint"),
        (
            ["verify", "--engine", "llama.cpp", "--spec", "{t}/s.json", "--work-dir", "{t}/v", "--engine-dir", "{t}"],
            "--work-dir='{t}/v' is not allowed: what verify writes there (2 float32 copies",
        ),
    ],
    ids=["bake", "demo", "verify"],
)
def test_a_disk_too_small_for_what_is_known_is_refused_before_the_work(argv, named, tmp_path, capsys, monkeypatch):
    """Issue 62 item 6: `demo --out <1 MiB tmpfs>/o` ran 164 s and failed at the bake, though the tiny
    checkpoint alone (3.4 MB) could not fit; now the size known up front is checked before the work
    (the disk here: 1 MiB free, as the tmpfs had)."""
    import shutil

    import attntemp.hf.preflight as preflight

    (tmp_path / "s.json").write_text('{"multiplier": 1.1}')
    real = shutil.disk_usage
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: real(p)._replace(free=2**20))
    before = sorted(os.listdir(tmp_path))
    assert main([a.replace("{t}", str(tmp_path)) for a in argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and named.replace("{t}", str(tmp_path)) in err[0], err
    assert "MiB, and" in err[0] and "has 1.0 MiB free" in err[0]
    assert sorted(os.listdir(tmp_path)) == before  # nothing made, nothing left
