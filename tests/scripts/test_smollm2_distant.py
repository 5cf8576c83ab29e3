"""scripts/smollm2_distant.py on the tiny model: its table fills from per-result files, a second
run (or a second process on other specs) resumes from them, and the key-token search resumes too."""

import json

import pytest
from script_loader import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("smollm2_distant")


def run(script, tmp_path, *extra):
    argv = [
        "--model",
        "tiny",
        "--text",
        "stdlib",
        "--lengths",
        "512",
        "--docs",
        "2",
        "--needles",
        "2",
        "--tuned-spec",
        "",
        "--tune-length",
        "512",
        "--tune-docs",
        "2",
        "--threads",
        "1",
        "--dtype",
        "float32",
        "--out",
        str(tmp_path / "out"),
        "--table",
        str(tmp_path / "table.md"),
        "--figure",
        str(tmp_path / "f.png"),
        *extra,
    ]
    script.main(argv)
    return (tmp_path / "table.md").read_text()


def test_two_runs_split_the_specs_and_the_table_holds_both(script, tmp_path, capsys):
    table = run(script, tmp_path, "--only", "no RoPE change, m = 1")  # one row of four
    assert table.count("not run yet") == 3 * 4  # the other three rows: all four cells
    tuned = run(script, tmp_path, "--tune-key-tokens", "--only", "on key tokens")
    search = json.loads((tmp_path / "out" / "tuned_key_tokens_512_search.json").read_text())
    assert len(search) >= 5 and "(tuned at 512 on key tokens)" in tuned
    assert tuned.count("not run yet") == 3 * 4  # the tuned row (a fifth) is done, the other three are not
    assert "512 key_tokens no RoPE change, m = 1:" in capsys.readouterr().out
    run(script, tmp_path, "--only", "no RoPE change, m = 1", "--tune-key-tokens")  # all stored: nothing is scored
    assert not [x for x in capsys.readouterr().out.splitlines() if x.startswith("512 ")]
    full = run(script, tmp_path)
    rows = [r for r in full.splitlines() if r.startswith("| 512 |")]
    assert len(rows) == 5 and "not run yet" not in full
    assert all("; vs m = 1: " in r for r in rows[1:])
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_either_of_two_specs_and_one_task(script, tmp_path):
    table = run(script, tmp_path, "--only", "softer|YaRN's m", "--tasks", "needles")
    rows = {r.split(" | ")[1]: r for r in table.splitlines() if r.startswith("| 512 |")}
    assert [n for n, r in rows.items() if r.count("not run yet") == 2] == [
        "no RoPE change, m = 0.9 (softer)",
        "YaRN s = 2, YaRN's m = 1.143",
    ]
    with pytest.raises(SystemExit, match="--tasks=perplexity is not allowed"):
        run(script, tmp_path, "--tasks", "perplexity")


def test_other_settings_in_the_same_folder_are_refused(script, tmp_path):
    run(script, tmp_path, "--only", "nothing matches this")
    with pytest.raises(SystemExit, match="other settings"):
        run(script, tmp_path, "--only", "nothing", "--key-ngram", "5")


def test_a_folder_from_before_the_dtype_was_recorded_resumes_in_float32(script, tmp_path):
    run(script, tmp_path, "--only", "nothing matches this")
    path = tmp_path / "out" / "settings.json"
    settings = json.loads(path.read_text())
    assert settings.pop("dtype") == "float32"
    path.write_text(json.dumps(settings))  # as the committed results' settings.json: no dtype
    argv = [
        "--model",
        "tiny",
        "--text",
        "stdlib",
        "--lengths",
        "512",
        "--docs",
        "2",
        "--needles",
        "2",
        "--tuned-spec",
        "",
        "--threads",
        "1",
        "--only",
        "nothing",
        "--out",
        str(tmp_path / "out"),
        "--table",
        str(tmp_path / "table.md"),
        "--figure",
        "",
    ]
    script.main(argv)  # no --dtype: the folder's float32, whatever this CPU's faster dtype
    with pytest.raises(SystemExit, match=r"other settings.*dtype"):
        script.main([*argv, "--dtype", "bfloat16"])


def test_per_window_results_resume_a_killed_result_and_equal_the_whole_one(script, tmp_path, capsys):
    whole = tmp_path / "whole"
    whole.mkdir()
    run(script, whole, "--only", "no RoPE change, m = 1", "--tasks", "key_tokens,needles")
    capsys.readouterr()
    table = run(script, tmp_path, "--only", "no RoPE change", "--tasks", "key_tokens,needles", "--per-window")
    folder = tmp_path / "out" / "512"
    parts = sorted(p.relative_to(folder).as_posix() for p in folder.glob("*/window_*.json"))
    assert len(parts) == 2 * 2 * 2  # two specs, two tasks, two windows
    assert "512 key_tokens no RoPE change, m = 1: window 2 of 2" in capsys.readouterr().out
    base = script.result_path(tmp_path / "out", 512, script.BASE, "key_tokens")
    made = json.loads(base.read_text())
    ref = json.loads(script.result_path(whole / "out", 512, script.BASE, "key_tokens").read_text())
    assert made["key_ppl"] == pytest.approx(ref["key_ppl"], rel=1e-5)  # the merge is the whole result
    assert made["window_key_nll"] == pytest.approx(ref["window_key_nll"], rel=1e-5)
    soft = [r for r in table.splitlines() if r.startswith("| 512 | no RoPE change, m = 0.9")]
    assert soft and "; vs m = 1: " in soft[0]  # merged results pair with each other
    base.unlink()  # killed after window 1 of the result: window 2's file is not there yet
    (base.with_suffix("") / "window_1.json").unlink()
    run(script, tmp_path, "--only", "no RoPE change, m = 1", "--tasks", "key_tokens", "--per-window")
    out = [x for x in capsys.readouterr().out.splitlines() if x.startswith("512 ")]
    assert out[0].endswith(tuple(f"window 2 of 2, {s} s" for s in range(1000))) and len(out) == 2
    assert json.loads(base.read_text())["key_ppl"] == pytest.approx(made["key_ppl"], rel=1e-6)
    with pytest.raises(SystemExit, match=r"other settings.*per_window"):
        run(script, whole, "--only", "nothing", "--per-window")  # a folder of whole results
