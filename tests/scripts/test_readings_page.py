"""docs/readings.md is what scripts/readings_page.py generates from the readings, and --check says when not."""

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_the_generated_one():
    page = load_script("readings_page").page()
    assert (ROOT / "docs" / "readings.md").read_text(encoding="utf-8") == page, "run python scripts/readings_page.py"
    assert "| vllm 0.22-0.29 | as transformers | breaks |" in page  # dynamic: nothing under L0, NaN past it


def test_check_exits_1_on_a_stale_page_and_writes_nothing(tmp_path, capsys):
    script = load_script("readings_page")
    stale = tmp_path / "readings.md"
    stale.write_text("# an old page\n", encoding="utf-8")
    assert script.main(["--check", "--out", str(stale)]) == 1
    assert stale.read_text(encoding="utf-8") == "# an old page\n" and "stale" in capsys.readouterr().out
    assert script.main(["--out", str(stale)]) == 0
    assert script.main(["--check", "--out", str(stale)]) == 0
