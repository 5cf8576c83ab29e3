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
    assert "Reloaded without attntemp" in (out / "report.md").read_text()


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
