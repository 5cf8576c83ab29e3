"""`attntemp sweep --tasks key_tokens,needles`, `report` and `tune --objective key_tokens` (search
and gradient) end to end on the shipped tiny model, small sizes: figures printed with intervals."""

import json
import re

from attntemp.cli import main

INTERVAL = r"\d[\d.]* \[\d[\d.]*, \d[\d.]*\]"  # "6.061 [5.87, 6.25]"
DISTANT = ["--key-ngram", "4", "--needles-per-forward", "2", "--docs", "3"]


def test_sweep_key_tokens_and_needles_then_report(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    argv = ["sweep", "--lengths", "512", "--rope", "none", "--multipliers", "1,1.3", "--tasks", "key_tokens,needles"]
    assert main([*argv, *DISTANT, "--quiet", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    row = next(line for line in shown.splitlines() if line.startswith("| key_tokens | key_ppl | 512 | none |"))
    assert re.search(INTERVAL, row), row
    assert "- key_tokens key tokens: n-gram rule: x_t is key when x_(t-4)..x_(t-1)" in shown
    assert re.search(r"\| needles \| acc \| 512 \| none \| .*\[", shown)
    assert main([*argv, *DISTANT, "--quiet", "--out", str(out)]) == 0  # resumed: nothing left to run
    assert "4 points" in capsys.readouterr().out
    assert main(["report", str(out), "--quiet"]) == 0
    assert "more than 128 tokens back" in (out / "report.md").read_text()


def test_tune_objective_key_tokens(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = [
        "tune",
        "--length",
        "512",
        "--tasks",
        "key_tokens",
        "--check-lengths",
        "",
        "--heldout-text",
        "none",
        *DISTANT,
    ]
    base.append("--quiet")
    assert main([*base, "--objective", "key_tokens", "--grid", "3", "--iters", "1", "--out", "s"]) == 0
    shown = capsys.readouterr().out
    assert re.search(rf"\| tuned \| {INTERVAL}", shown) and "key_tokens key_ppl" in shown
    assert "- key_tokens key tokens: n-gram rule" in shown
    evidence = json.loads((tmp_path / "s" / "evidence.json").read_text())
    assert evidence["info"]["search"]["metric"] == "key_ppl"
    assert main([*base, "--objective", "key_tokens", "--method", "gradient", "--steps", "2", "--out", "g"]) == 0
    info = json.loads((tmp_path / "g" / "evidence.json").read_text())["info"]
    assert len(info["objective_ppl_before"]) == 1 and info["objective_ppl_after"][0] > 0
    assert main([*base, "--objective", "needles", "--method", "gradient", "--steps", "1", "--out", "n"]) == 0


def test_the_default_needle_count_fits_the_lengths_and_says_so(tmp_path, capsys):
    """Issue 32: 8 needles take 1168 of the tiny model's byte tokens; at 1024 the default hides as
    many as fit (said on stderr and in the points), while 8 given outright is refused (the table)."""
    out = tmp_path / "n"
    argv = ["sweep", "--lengths", "1024", "--tasks", "needles", "--multipliers", "1", "--docs", "1", "--quiet"]
    assert main([*argv, "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    said = re.search(r"needles: (\d) needle\(s\) per forward, the most that fit in 1024 tokens", captured.err)
    assert said and 1 <= int(said.group(1)) < 8, captured.err
    points = json.loads(captured.out)["points"]
    assert [p["metrics"]["needles_per_forward"] for p in points] == [int(said.group(1))] * 2  # rope none, yarn
    assert main([*argv, "--out", str(out), "--needles-per-forward", said.group(1)]) == 0  # the value used: resumes
