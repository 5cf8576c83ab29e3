"""`attntemp demo` end to end on the shipped tiny model (small sizes), and the default command."""

from attntemp import cli
from attntemp.cli import main

SMALL = ["--race-windows", "4", "--min-windows", "2", "--docs", "3", "--trials", "4", "--no-tune", "--check-lengths",
         "0", "--heldout-text", "none", "--threads", "1", "--quiet"]  # fmt: skip


def test_demo_is_advise_with_retrieval_and_bakes_only_what_held(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *SMALL]) == 0
    said = capsys.readouterr()
    printed = said.out
    assert "# attntemp advise: tiny at 512 tokens (trained to 256)" in printed and "report: " in printed
    stages = [line.split(" (")[0] for line in said.err.splitlines() if line.startswith("demo: ")]
    assert stages[:3] == ["demo: loading tiny", "demo: advising for 512 tokens", "demo: shipping the recommendation"]
    assert stages[-1].startswith("demo: done: ")  # issue 62 item 8: one line a stage, with --quiet too
    report = (out / "report.md").read_text()
    for section in ("## Where the model breaks", "## The race", "## Confirmed on windows", "## Recommendation",
                    "## Retrieval at 512 tokens", "## Shipped"):  # fmt: skip
        assert section in report, section
    page = (out / "report.html").read_text()
    for png in ("tradeoff.png", "diagnosis.png"):
        assert (out / png).stat().st_size > 2000 and png in page
    held = "**Recommended**" in report
    assert (out / "baked").is_dir() == held  # baked only when the recommendation held on the evaluation pool
    assert ("Reloaded without attntemp" in report) == held and ("Nothing baked" in report) != held


def test_no_arguments_runs_the_demo(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr("attntemp.advise.demo.run_demo", lambda cfg: seen.append(cfg.out) or 1 / 0)
    assert cli.DEFAULT_COMMAND == "demo"
    try:
        main([])
    except ZeroDivisionError:
        pass
    assert seen == ["attntemp-demo"]


def test_model_defaults_then_flags(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the default --out is relative: never the checkout's own attntemp-demo/
    seen = []
    monkeypatch.setattr("attntemp.advise.demo.run_demo", lambda cfg: seen.append(cfg) or 1 / 0)
    for argv in (["demo", "--model", "smollm2"], ["demo", "--model", "smollm2", "--trials", "7", "--length", "16384"],
                 ["demo"]):  # fmt: skip
        try:
            main(argv)
        except ZeroDivisionError:
            pass
    small, flagged, tiny = seen
    assert (small.length, small.n_docs, small.trials, small.key_ngram) == (12288, 2, 4, 4)
    assert (flagged.length, flagged.trials, flagged.n_docs) == (16384, 7, 2)
    assert (tiny.length, tiny.n_docs, tiny.race_windows) == (512, 8, 8)  # 2x the tiny model's trained 256


def test_each_model_has_its_own_default_folder_and_a_refusal_leaves_none(tmp_path, monkeypatch, capsys):
    from attntemp.advise.config import demo_config

    monkeypatch.chdir(tmp_path)
    assert demo_config("tiny").out == "attntemp-demo"
    assert demo_config("smollm2").out == "attntemp-demo-smollm2"
    assert demo_config("smollm2", out="elsewhere").out == "elsewhere"
    assert main(["demo", "--out", "refused", "--engine", "tgi"]) == 2
    assert "--engine='tgi'" in capsys.readouterr().err and not (tmp_path / "refused").exists()


def test_a_refusal_after_the_folder_is_made_leaves_none(tmp_path, monkeypatch, capsys):
    """A step that refuses (a later check) removes the --out folder the run made."""

    def refuse(*args, **kwargs):
        raise ValueError("n_docs=16 is not allowed here (a step's own check)")

    monkeypatch.setattr("attntemp.advise.demo.advise", refuse)
    assert main(["demo", "--out", str(tmp_path / "late" / "demo")]) == 2
    assert "--docs=16" in capsys.readouterr().err and not (tmp_path / "late").exists()


CHEAP = SMALL


def test_demo_keeps_a_users_files_and_overwrite_replaces_only_its_own(tmp_path, capsys):
    """Issue 32, case 1: a folder holding files of demo's names is refused without --overwrite; with
    it, a file of the user's inside demo's own folders (baked/) is refused too; the rest is kept."""
    out = tmp_path / "DM"
    (out / "baked").mkdir(parents=True)
    (out / "report.md").write_text("the user's report")
    (out / "baked" / "mine.txt").write_text("the user's")
    (out / "notes.txt").write_text("the user's notes")
    assert main(["demo", "--out", str(out), *CHEAP]) == 2
    assert "already holds results (baked/, report.md); pass --overwrite" in capsys.readouterr().err
    assert main(["demo", "--out", str(out), *CHEAP, "--overwrite"]) == 2  # issue 54: a user's file of demo's name
    assert "holds report.md under this command's own names, not written by it" in capsys.readouterr().err
    (out / "report.md").unlink()
    assert main(["demo", "--out", str(out), *CHEAP, "--overwrite"]) == 2
    assert "holds baked/mine.txt, not written by this command; --overwrite replaces only" in capsys.readouterr().err
    assert (out / "baked" / "mine.txt").read_text() == "the user's"
    (out / "baked" / "mine.txt").unlink()
    (out / "diagnosis.png").write_bytes(b"\x89PNG an earlier demo's figure, Software Matplotlib")  # demo's own
    assert main(["demo", "--out", str(out), *CHEAP, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "the user's notes"  # not demo's: kept
    assert (out / "report.md").read_text().startswith("# attntemp advise: tiny")
    assert (out / "diagnosis.png").read_bytes().startswith(b"\x89PNG")
