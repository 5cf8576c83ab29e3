"""scripts/gemma3_distant.py on the tiny model (trained to 256; its layers all global): the plan
counts the forwards, the key-token search runs on the global layers, the table fills and resumes."""

import pytest
from script_loader import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("gemma3_distant")


def run(script, tmp_path, *extra):
    argv = ["--model", "tiny", "--text", "stdlib", "--lengths", "512", "--docs", "2", "--needles", "2",
            "--tune-length", "384", "--tune-docs", "2", "--grid", "3", "--iters", "1", "--threads", "1",
            "--out", str(tmp_path / "out"), "--table", str(tmp_path / "table.md"), "--figure", str(tmp_path / "f.png"),
            *extra]  # fmt: skip
    script.main(argv)
    return (tmp_path / "table.md").read_text() if (tmp_path / "table.md").is_file() else ""


@pytest.mark.slow  # 2.5 min on 2 busy cores: a search and 10 forwards of the tiny model
def test_plan_then_a_resumable_table_on_the_global_layers(script, tmp_path, capsys):
    run(script, tmp_path, "--plan", "--lengths", "256,512")  # at the trained length no gated row: no change there
    assert capsys.readouterr().out.startswith("14 results to make, 28 forwards")
    run(script, tmp_path, "--plan")
    # the search: (3 grid + 2 widening + 1 golden step + 2) points, 2 documents each
    assert capsys.readouterr().out.startswith("10 results to make, 20 forwards, and up to 16 forwards")
    table = run(script, tmp_path, "--tasks", "key_tokens", "--only", "no RoPE change")
    rows = {r.split(" | ")[1]: r for r in table.splitlines() if r.startswith("| 512 |")}
    assert list(rows)[:3] == ["no RoPE change, m = 1", "no RoPE change, m = 0.9 on global layers (softer)",
                              "no RoPE change, m = 0.9 past 256 on global layers (softer, gated)"]  # fmt: skip
    assert not (tmp_path / "out" / "tuned_key_tokens_384_spec.json").exists()  # its row not run: no search
    table = run(script, tmp_path, "--tasks", "key_tokens", "--only", "tuned at")
    assert (tmp_path / "out" / "tuned_key_tokens_384_spec.json").is_file()
    rows = {r.split(" | ")[1]: r for r in table.splitlines() if r.startswith("| 512 |")}
    tuned = next(r for n, r in rows.items() if n.endswith("(tuned at 384 on key tokens)"))
    assert tuned.count("not run yet") == 2 and "; vs m = 1: " in tuned
    gated = rows["no RoPE change, m = 0.9 past 256 on global layers (softer, gated)"]
    assert gated.count("not run yet") == 2 and "; vs m = 1: " in gated  # key tokens made, needles not
    capsys.readouterr()
    run(script, tmp_path, "--plan")
    assert capsys.readouterr().out.startswith("6 results to make, 12 forwards, and up to 0 forwards")


def test_the_plan_counts_what_only_keeps_and_two_runs_write_one_table(script, tmp_path, capsys, monkeypatch):
    run(script, tmp_path, "--plan", "--only", "no RoPE change, m = 1")  # no tuned row kept: no search counted
    assert capsys.readouterr().out.startswith("2 results to make, 4 forwards, and up to 0 forwards")
    first = run(script, tmp_path, "--tasks", "key_tokens", "--only", "no RoPE change, m = 1")
    row = next(r for r in first.splitlines() if r.startswith("| 512 | no RoPE change, m = 1 |"))
    assert row.count("not run yet") == 2  # key tokens made, needles not
    monkeypatch.setattr(script, "TABLE_LENGTHS", (512, 768))  # a second run, on another length, publishes
    again = run(script, tmp_path, "--lengths", "768", "--only", "no such spec")  # nothing to score
    assert row in again and "| 768 |" in again  # the 512 row kept beside the new length's
