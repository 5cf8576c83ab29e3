"""`attntemp demo` end to end on the shipped tiny model (small sizes), and the default command."""

from attntemp import cli
from attntemp.cli import main


def test_demo_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--scales", "2", "--docs", "1", "--trials", "2"]) == 0
    printed = capsys.readouterr().out
    assert "## 1. Attention entropy past the trained length" in printed and "report: " in printed
    page = (out / "report.html").read_text()
    for png in ("entropy_by_position.png", "ppl_vs_multiplier.png", "entropy_shift.png"):
        assert (out / png).stat().st_size > 2000 and png in page
    assert (out / "baked" / "model.safetensors").is_file()
    report = (out / "report.md").read_text()
    assert "Reloaded without attntemp" in report and "## 4. Retrieval at 2x = 512 tokens" in report
    assert "passkey accuracy" in report and not (out / ".sweep.lock").exists()


def test_no_arguments_runs_the_demo(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr("attntemp.commands.demo.run_demo", lambda cfg: seen.append(cfg.out) or 1 / 0)
    assert cli.DEFAULT_COMMAND == "demo"
    try:
        main([])
    except ZeroDivisionError:
        pass
    assert seen == ["attntemp-demo"]


def test_model_defaults_then_flags(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the default --out is relative: never the checkout's own attntemp-demo/
    seen = []
    monkeypatch.setattr("attntemp.commands.demo.run_demo", lambda cfg: seen.append(cfg) or 1 / 0)
    for argv in (["demo", "--model", "smollm2"], ["demo", "--model", "smollm2", "--trials", "7", "--scales", "3"],
                 ["demo"]):
        try:
            main(argv)
        except ZeroDivisionError:
            pass
    small, flagged, tiny = seen
    assert (small.scales, small.n_docs, small.trials) == ((1.5, 2.0), 1, 3)
    assert (flagged.scales, flagged.trials, flagged.n_docs) == ((3.0,), 7, 1)
    assert (tiny.scales, tiny.n_docs, tiny.trials) == ((4, 8), 16, 50) and len(tiny.multipliers) == 9


def test_each_model_has_its_own_default_folder_and_a_refusal_leaves_none(tmp_path, monkeypatch, capsys):
    from attntemp.report.demo import demo_config

    monkeypatch.chdir(tmp_path)
    assert demo_config("tiny").out == "attntemp-demo"
    assert demo_config("smollm2").out == "attntemp-demo-smollm2"
    assert demo_config(str(tmp_path / "my-model") + "/").out == "attntemp-demo-my-model"
    assert demo_config("smollm2", out="elsewhere").out == "elsewhere"
    assert main(["demo", "--out", "refused", "--retrieval-scale", "0.5"]) == 2
    assert "--retrieval-scale=0.5" in capsys.readouterr().err and not (tmp_path / "refused").exists()


def test_a_refusal_after_the_folder_is_made_leaves_none(tmp_path, monkeypatch, capsys):
    """A step that refuses (a later length or memory check) removes the --out folder the run made."""

    def refuse(*args, **kwargs):
        raise ValueError("n_docs=16 is not allowed here (a step's own check)")

    monkeypatch.setattr("attntemp.report.demo.step_entropy", refuse)
    assert main(["demo", "--out", str(tmp_path / "late" / "demo")]) == 2
    assert "--docs=16" in capsys.readouterr().err and not (tmp_path / "late").exists()


CHEAP = ["--scales", "2", "--multipliers", "1", "--gradient-steps", "0", "--monitor-trials", "0", "--docs", "1",
         "--trials", "1", "--quiet", "--threads", "1"]  # fmt: skip


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
    assert main(["demo", "--out", str(out), *CHEAP, "--overwrite"]) == 2
    assert "holds baked/mine.txt, not written by this command; --overwrite replaces only" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "the user's report"
    assert (out / "baked" / "mine.txt").read_text() == "the user's"
    (out / "baked" / "mine.txt").unlink()
    (out / "tune1").mkdir()
    (out / "tune1" / "spec.json").write_text("{}")  # an earlier demo's (with gradient steps): not written again
    assert main(["demo", "--out", str(out), *CHEAP, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "the user's notes"  # not demo's: kept
    assert (out / "report.md").read_text().startswith("# attntemp demo: tiny")
    assert not (out / "tune1").exists() and (out / "baked" / "model.safetensors").is_file()
