"""`attntemp measure` on the shipped tiny model: JSON, plots, table; bad input exits 2."""

import json

from attntemp.analysis.measure import AttentionStats
from attntemp.cli import main


def test_measure_cli_writes_stats_and_plots(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["measure", "--length", "128", "--buckets", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| layer | entropy (nats) |" in printed
    stats = AttentionStats.load(out / "stats.json")
    assert stats.length == 128 and stats.bucket_edges == [0, 32, 64, 96, 128]
    for name in ("entropy_heatmap.png", "entropy_by_position.png", "sink_recency.png", "summary.md"):
        assert (out / name).stat().st_size > 200
    assert "mean entropy " in printed and not any(line.startswith("{") for line in printed.splitlines())  # no JSON
    assert main(["measure", "--length", "128", "--buckets", "4", "--out", str(out), "--overwrite", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_entropy"] > 0


def test_measure_cli_bad_input_is_one_line(tmp_path, capsys):
    assert main(["measure", "--length", "64", "--text", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attntemp measure: error: --text=")
    spec = tmp_path / "s.json"
    spec.write_text('{"multiplier": -1}')
    assert main(["measure", "--length", "64", "--spec", str(spec), "--out", str(tmp_path)]) == 2
    assert "multiplier=-1" in capsys.readouterr().err
