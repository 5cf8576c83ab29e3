"""`attntemp sweep`, `tune` and `report` end to end on the shipped tiny model (small sizes)."""

import json

from attntemp.cli import main
from attntemp.ops.spec import TemperatureSpec


def test_sweep_tune_report(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "sweep",
                "--lengths",
                "384",
                "--rope",
                "none,yarn",
                "--multipliers",
                "0.9,1.1",
                "--tasks",
                "perplexity,passkey",
                "--docs",
                "1",
                "--trials",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "| perplexity | tail_ppl | 384 | yarn |" in capsys.readouterr().out
    assert (
        main(
            [
                "tune",
                "--length",
                "384",
                "--rope",
                "yarn",
                "--granularity",
                "head",
                "--objective",
                "entropy",
                "--tasks",
                "perplexity",
                "--docs",
                "1",
                "--out",
                str(out / "tune"),
            ]
        )
        == 0
    )
    spec = TemperatureSpec.load(out / "tune" / "spec.json")
    assert len(spec.heads) == 4 and dict(spec.rope)["rope_type"] == "yarn"
    assert "| tuned |" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "ppl_vs_multiplier.png" in page and "tune/entropy_shift.png" in page
    assert json.loads((out / "tune" / "evidence.json").read_text())["trained_length"] == 256


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["sweep", "--multipliers", "1:0:1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "multipliers='1:0:1'" in err[0]
    assert main(["tune", "--length", "300", "--granularity", "head", "--out", str(tmp_path)]) == 2
    assert "objective='entropy'" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing")]) == 2
