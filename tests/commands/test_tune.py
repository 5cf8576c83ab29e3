"""`attntemp tune --method gradient --rope-factors learn` on the shipped tiny model (small sizes)."""

import json

import torch

import attntemp
from attntemp.cli import main
from attntemp.ops.spec import TemperatureSpec


def test_tune_learns_rope_factors_and_writes_a_longrope_spec(tiny, tmp_path, capsys):
    out = tmp_path / "rf"
    flags = "--length 384 --rope yarn --method gradient --rope-factors learn --rope-temperature none --steps 3"
    args = ["tune", *flags.split(), *"--tasks perplexity --docs 1 --check-lengths 256 --threads 1".split()]
    args += ["--out", str(out)]
    assert main(args) == 0
    spec = TemperatureSpec.load(out / "spec.json")
    rope = dict(spec.rope)
    assert rope["rope_type"] == "longrope" and len(rope["long_factor"]) == 8  # head_dim 16 / 2
    assert rope["short_factor"] == (1.0,) * 8 and rope["attention_factor"] == 1.0
    assert rope["original_max_position_embeddings"] == 256 and rope["factor"] == 1.5
    assert min(rope["long_factor"]) >= 1.0 and spec.is_identity  # no temperature learned
    start = json.loads((out / "train_log.json").read_text())["state"]["rope_factors.log_factor"]
    assert len(start) == 8
    evidence = json.loads((out / "evidence.json").read_text())
    assert evidence["info"]["rope_factors"] == "learn" and "256" in evidence["checks"]
    model = tiny[0]
    ids = torch.randint(0, 256, (1, 256), generator=torch.Generator().manual_seed(2))  # [1, 256] = L0
    with torch.no_grad():
        plain = model(ids).logits
        with attntemp.patch(model, spec):
            assert torch.equal(model(ids).logits, plain)  # nothing changes within the trained length
    assert "| tuned |" in capsys.readouterr().out


def test_tune_learns_rope_factors_jointly_with_a_per_head_temperature(tmp_path):
    out = tmp_path / "joint"
    flags = "--length 384 --rope linear --method gradient --rope-factors learn --granularity head --steps 2"
    args = ["tune", *flags.split(), *"--tasks perplexity --docs 1 --threads 1".split()]
    args += ["--check-lengths", "", "--out", str(out)]
    assert main(args) == 0
    spec = TemperatureSpec.load(out / "spec.json")
    assert dict(spec.rope)["rope_type"] == "longrope" and len(spec.heads) == 4 and not spec.is_identity


def test_a_killed_gradient_tune_resumes_with_its_settings_and_only_them(tmp_path, capsys, monkeypatch):
    """Issue 32, case 4: killed after training (checkpoint.pt, learned_spec.json written, no
    evidence.md), the same command resumes from checkpoint.pt; other settings are refused before
    any work, naming the first that differs; a user's file in --out is never touched."""
    import attntemp.tune.runner as runner

    out = tmp_path / "T"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    argv = ["tune", "--method", "gradient", "--steps", "2", "--length", "300", "--docs", "2", "--tasks",
            "perplexity", "--check-lengths", "", "--heldout-text", "none", "--quiet", "--threads", "1", "--out",
            str(out)]  # fmt: skip

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a kill looks like from inside: not an error, the run stops

    monkeypatch.setattr(runner, "_scored", killed)
    assert main(argv) == 130  # Ctrl-C: one line, and it says a rerun resumes (checkpoint.pt is there)
    assert capsys.readouterr().err.splitlines() == ["attntemp tune: interrupted; rerun the same command to resume"]
    monkeypatch.undo()
    assert {"checkpoint.pt", "learned_spec.json", "mine.txt"} <= {p.name for p in out.iterdir()}
    assert not (out / "evidence.md").exists()
    assert main([*argv[:4], "3", *argv[5:]]) == 2  # --steps 3: not the killed run's settings
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"attntemp tune: error: --out={str(out)!r} holds a killed gradient tune's checkpoint.pt made with "
        "--steps=2; this run has --steps=3: rerun with its settings to resume it, or pass --overwrite to start over"
    ]
    assert main(argv) == 0
    log = json.loads((out / "train_log.json").read_text())
    assert log["resumed_from"] == 2 and (out / "evidence.md").is_file()  # every step came from the checkpoint
    assert main(argv) == 2  # finished now: a rerun needs --overwrite
    assert "already holds results" in capsys.readouterr().err
    assert (out / "mine.txt").read_text() == "the user's"
