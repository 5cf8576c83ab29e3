"""scripts/smollm2_breakdown.py on the tiny model (trained to 256): it reuses smollm2_distant's
results under their names, searches the slope once (resumable), and fills its table in order."""

import json
import math

import pytest
import torch
from script_loader import load_script

from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def scripts():
    return load_script("smollm2_breakdown"), load_script("smollm2_distant")


COMMON = ["--model", "tiny", "--text", "stdlib", "--docs", "2", "--needles", "2", "--threads", "1",
          "--tune-length", "384", "--tune-docs", "2", "--grid", "3", "--iters", "1"]  # fmt: skip


def paths(tmp_path, name):
    out = ["--out", str(tmp_path / "out"), "--table", str(tmp_path / f"{name}.md")]
    return [*out, "--figure", str(tmp_path / f"{name}.png")]


def test_breakdown_reuses_distant_results_and_tunes_the_slope_once(scripts, tmp_path, capsys, monkeypatch):
    breakdown, distant = scripts
    distant.main([*COMMON, *paths(tmp_path, "d"), "--lengths", "512", "--tuned-spec", "", "--tune-key-tokens",
                  "--only", "no RoPE change, m = 1|on key tokens"])  # fmt: skip
    capsys.readouterr()
    argv = [*COMMON, *paths(tmp_path, "b"), "--lengths", "512", "--slope-bracket", "0.05,0.5", "--learned", ""]
    breakdown.main([*argv, "--plan"])
    plan = capsys.readouterr().out
    assert plan.startswith("18 results to make, 36 forwards")  # 9 kinds of 11 not made yet, 2 tasks each
    assert "512 base key_tokens" not in plan and "512 yarn tuned needles" not in plan
    breakdown.main([*argv, "--plan", "--only", "log-n"])
    assert capsys.readouterr().out.startswith("2 results to make, 4 forwards")  # the plan is what --only runs
    breakdown.main([*argv, "--only", "log-n"])  # the slope left out: no search runs for it
    made = capsys.readouterr().out
    assert not (tmp_path / "out" / "tuned_slope_key_tokens_384_search.json").exists()
    breakdown.main([*argv, "--only", "log-n|b = "])
    made += capsys.readouterr().out
    search = json.loads((tmp_path / "out" / "tuned_slope_key_tokens_384_search.json").read_text())
    step = math.log(0.5 / 0.05) / (3 - 1)  # --grid 3 in ln b; the search widens up to WIDEN steps past an edge
    lo, hi = 0.05 * math.exp(-breakdown.WIDEN * step), 0.5 * math.exp(breakdown.WIDEN * step)
    assert len(search) >= 4 and all(lo * (1 - 1e-5) <= float(b) <= hi * (1 + 1e-5) for b in search)
    grid = [0.05 * math.exp(i * step) for i in range(3)]  # the bracket's grid is scored first, every point of it
    assert all(any(abs(float(b) - g) <= 1e-6 for b in search) for g in grid)
    assert "512 key_tokens no RoPE change, log-n past 256 (sharper, gated):" in made
    table = (tmp_path / "b.md").read_text()
    rows = {r.split(" | ")[1]: r for r in table.splitlines() if r.startswith("| 512 |")}
    slope_row = next(r for n, r in rows.items() if n.startswith("no RoPE change, (n / 256)^b past it"))
    assert "not run yet" not in slope_row and "; vs m = 1: " in slope_row
    assert rows["no RoPE change, m = 0.8 past 256 (softer, gated)"].count("not run yet") == 4
    yarn_tuned = next(r for n, r in rows.items() if n.endswith("(tuned at 384 on key tokens)"))
    assert "not run yet" not in yarn_tuned  # made by smollm2_distant.py, read back under its name
    breakdown.main([*argv, "--plan"])
    assert capsys.readouterr().out.startswith("14 results to make")  # the slope is stored: no new search
    assert (tmp_path / "b.png").stat().st_size > 10_000
    monkeypatch.setattr(breakdown, "TABLE_LENGTHS", (512, 768))  # a second run, on another length, publishes
    other = [*COMMON, *paths(tmp_path, "b"), "--lengths", "768", "--slope-bracket", "0.05,0.5", "--learned", ""]
    breakdown.main([*other, "--only", "no such spec"])  # nothing to score: it only publishes
    again = (tmp_path / "b.md").read_text()
    assert slope_row in again and "| 768 |" in again  # the 512 rows kept beside the new length's


def test_a_bad_slope_bracket_is_refused_before_loading(scripts, tmp_path):
    with pytest.raises(SystemExit, match="--slope-bracket="):
        scripts[0].main([*COMMON, *paths(tmp_path, "b"), "--slope-bracket", "0.5,0.1"])


def test_the_learned_row_joins_once_its_spec_is_there(scripts, tmp_path, capsys):
    breakdown, _ = scripts
    spec = tmp_path / "learned_spec.json"
    (tmp_path / "out").mkdir()
    TemperatureSpec(multiplier=1.05).save(tmp_path / "out" / "tuned_key_tokens_384_spec.json")  # YaRN's row's m
    argv = [*COMMON, *paths(tmp_path, "b"), "--lengths", "512", "--learned", str(spec), "--only", "per head"]
    breakdown.main([*argv, "--plan"])
    assert capsys.readouterr().out.startswith("0 results to make")  # no spec yet: no row
    TemperatureSpec.per_head(torch.full((4, 8), 0.9)).save(spec)  # the tiny model: 4 layers, 8 heads
    breakdown.main([*argv, "--plan"])
    plan = capsys.readouterr().out
    assert plan.startswith("2 results to make, 4 forwards") and "512 learned key_tokens" in plan
