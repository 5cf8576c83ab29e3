"""`attntemp generate` on the shipped tiny model: text streamed, monitor.jsonl and plot written, a
flag can stop it; bad input exits 2 with one stderr line naming the flag, before any model loads."""

import json

import pytest

from attntemp.analysis.config import FLAGS
from attntemp.cli import main
from attntemp.ops.spec import TemperatureSpec

PROMPT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n"


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One query row per step: one intra-op thread is the fast setting."""


@pytest.fixture
def prompt(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text(PROMPT)
    return path


def test_generate_streams_text_without_the_monitor(prompt, tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["generate", "--prompt-file", str(prompt), "--max-new-tokens", "12", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = (out / "generated.txt").read_text()
    assert text and captured.out.rstrip("\n") == text.rstrip("\n")  # stdout: the streamed text alone, no JSON
    said = captured.err.strip().splitlines()[-1]  # bytes: one token each
    assert said.startswith(f"generated 12 tokens after a prompt of {len(PROMPT)} in ") and str(out) in said
    assert not (out / "monitor.jsonl").exists()


def test_transformers_warnings_show_only_with_verbose(tmp_path):
    """A prompt past the tiny model's 256 positions: transformers' "friendly reminder" is noise
    (in another process: transformers' log handler holds the stderr of its first import)."""
    import subprocess
    import sys

    long = tmp_path / "long.txt"
    long.write_text(PROMPT * 8)  # 392 bytes, one token each
    argv = [sys.executable, "-m", "attntemp", "generate", "--prompt-file", str(long), "--max-new-tokens", "2"]
    for verbose in (True, False):
        extra = ["--verbose"] if verbose else []
        done = subprocess.run([*argv, "--out", str(tmp_path / str(verbose)), *extra], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert ("friendly reminder" in done.stderr) == verbose and ("Loading weights" in done.stderr) == verbose


def test_generate_json_is_one_document_with_the_text(prompt, tmp_path, capsys):
    argv = ["generate", "--prompt-file", str(prompt), "--max-new-tokens", "6", "--monitor", "--reference-docs", "2"]
    assert main([*argv, "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # nothing else on stdout: no streamed text
    assert doc["new_tokens"] == 6 and doc["text"] == (tmp_path / "j" / "generated.txt").read_text()


def test_generate_with_the_monitor_writes_jsonl_plot_and_reference(prompt, tmp_path, capsys):
    out = tmp_path / "m"
    argv = ["generate", "--prompt-file", str(prompt), "--max-new-tokens", "16", "--monitor", "--every", "2"]
    assert main([*argv, "--reference-docs", "4", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    step_lines = [x for x in captured.err.splitlines() if x.startswith("step")]
    assert len(step_lines) == 8 and "H/ln n" in step_lines[0] and "worst L" in step_lines[0]
    records = [json.loads(x) for x in (out / "monitor.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(0, 16, 2))
    assert records[0]["position"] == len(PROMPT) - 1 and len(records[0]["layers"]["entropy"]) == 4
    assert set(records[0]["flags"]) <= set(FLAGS) and len(records[0]["heads"]["norm_entropy"][0]) == 8
    assert (out / "monitor.png").stat().st_size > 5000 and (out / "reference.json").is_file()
    summary = json.loads(captured.out)
    assert summary["steps"] == 8 and set(summary["margins"]) == set(FLAGS)
    # a saved reference is reused; under m = 0.1 attention spreads: diffusion stops generation
    spec = TemperatureSpec(multiplier=0.1).save(tmp_path / "soft.json")
    again = ["--reference", str(out / "reference.json"), "--spec", str(spec), "--stop-on", "diffusion"]
    assert main([*argv[:4], "40", "--monitor", *again, "--progress-bar", "--out", str(tmp_path / "s")]) == 0
    said = capsys.readouterr().err.strip().splitlines()[-1]  # the human summary, on stderr beside the steps
    assert "stopped by the monitor" in said and "diffusion" in said
    new = int(said.split("generated ")[1].split(" tokens")[0])
    assert new < 40
    # issue 32, case 6: --overwrite without --monitor removes the monitor's earlier outputs, nothing else
    (out / "notes.txt").write_text("the user's")
    assert main([*argv[:5], "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".attntemp")) == ["generated.txt", "notes.txt"]


def test_a_prompt_from_a_pipe_is_read(tmp_path, capsys):
    """``--prompt-file <(...)``: a FIFO is a file to read once, not "no such file" (issue 32)."""
    import os
    import threading

    fifo = tmp_path / "prompt.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(PROMPT))
    writer.start()
    assert main(["generate", "--prompt-file", str(fifo), "--max-new-tokens", "2", "--out", str(tmp_path / "g")]) == 0
    writer.join()
    assert (tmp_path / "g" / "generated.txt").is_file()


def _case(case, prompt, tmp_path) -> list[str]:
    """The argv of a bad-input case: extra flags, or a named situation."""
    out = tmp_path / "o"
    base = ["generate", "--prompt-file", str(prompt), "--max-new-tokens", "4", "--out", str(out)]
    if isinstance(case, list):
        return [*base, *case]
    if case == "bad_spec":  # the tiny model has 4 layers of 8 heads
        (tmp_path / "bad.json").write_text(json.dumps({"heads": [[1.0] * 3]}))
        return [*base, "--spec", str(tmp_path / "bad.json")]
    if case == "bad_reference":
        (tmp_path / "ref.json").write_text("[1, 2]")
        return [*base, "--monitor", "--reference", str(tmp_path / "ref.json")]
    if case == "missing_prompt":
        return ["generate", "--prompt-file", str(tmp_path / "absent.txt"), *base[3:]]
    if case == "empty_prompt":
        prompt.write_text("  \n")
    elif case == "results_there":
        out.mkdir()
        (out / "generated.txt").write_text("x")
    elif case == "no_max_new_tokens":
        return [*base[:3], *base[5:]]
    return base


@pytest.mark.parametrize(
    "case, flag",
    [
        (["--max-new-tokens", "0"], "--max-new-tokens=0"),
        (["--max-new-tokens", "ten"], "--max-new-tokens 'ten'"),
        (["--every", "0"], "--every=0"),
        (["--window", "-2"], "--window=-2"),
        (["--reference-docs", "0"], "--reference-docs=0"),
        (["--quantile", "1.5"], "--quantile=1.5"),
        (["--stop-on", "difusion"], "Did you mean 'diffusion'"),
        (["--spec", "nope.json"], "--spec='nope.json'"),
        (["--reference", "nope.json"], "--reference='nope.json'"),
        (["--model", "tiny", "--device", "tpu"], "--device"),
        ("bad_spec", "--spec="),
        ("bad_reference", "--reference="),
        ("missing_prompt", "--prompt-file="),
        ("empty_prompt", "--prompt-file="),
        ("results_there", "--overwrite"),
        ("no_max_new_tokens", "--max-new-tokens"),
    ],
)
def test_bad_input_is_one_line_exit_2(case, flag, prompt, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loads = []
    monkeypatch.setattr("attntemp.analysis.generate.load_model", lambda *a, **k: loads.append(a))
    try:
        code = main(_case(case, prompt, tmp_path))
    except SystemExit as exc:  # argparse's own errors (a missing flag) exit from parse_args
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("attntemp generate: error:") and flag in err, err
    assert loads == []  # refused before any model loads
