"""advise's confirmation table when some checks (or all) could not be scored."""

import json
from pathlib import Path

import pytest

from attntemp.advise.advice_page import advice_markdown, confirm_table
from attntemp.advise.records.comparisons import Confirmation
from attntemp.advise.records.evidence import Evidence
from attntemp.evaluate import tasks  # noqa: F401 (registers the tasks the report names)

TINY = Path(__file__).parents[2] / "docs" / "results" / "tiny_advise_512"
SMOLLM2_MULTIKEY = TINY.parent / "smollm2_advise_16384_multikey"
CELL = {"value": "2.1 [2, 2.2]", "vs_no_change": None}
BETTER = {"value": 0.9, "low": 0.8, "high": 0.95, "level": 0.95, "method": "m", "verdict": "better"}
PAIRED = {"value": "2.0 [1.9, 2.1]", "vs_no_change": BETTER}


def test_a_committed_evidence_reads_back_whole_and_renders_its_committed_report():
    """``evidence.json`` is JSON at the edge only: read into the records and written again it is the
    same document, key for key; the report made from the records is the committed ``report.md``."""
    doc = json.loads((TINY / "evidence.json").read_text())
    ev = Evidence.from_dict(doc)
    assert ev.to_dict() == doc
    assert json.loads(json.dumps(ev.to_dict(), default=float)) == doc
    assert advice_markdown(ev) == (TINY / "report.md").read_text()


@pytest.mark.parametrize("folder", [TINY, SMOLLM2_MULTIKEY], ids=["passkeys", "multikey"])
def test_the_race_names_its_retrieval_axis_as_it_was_run(folder):
    """Keys in haystacks read as keys (the multikey run's report once said "passkeys found ... (48
    prompts)" for 6 haystacks of 8 keys); every committed run's report is what its evidence renders."""
    ev = Evidence.from_dict(json.loads((folder / "evidence.json").read_text()))
    md = advice_markdown(ev)
    assert md == (folder / "report.md").read_text()
    multikey = ev.question.retrieval is not None and ev.question.retrieval.task == "multikey"
    said = (
        "keys found by greedy generation at 16384 (6 haystacks of 8 keys)" if multikey else "passkeys found by greedy"
    )
    assert said in md
    assert ("| keys found (race) |" in md) == multikey
    label = "keys found" if multikey else "passkeys found"
    assert f"| {label} vs no change | {label} vs YaRN's default |" in md  # the per-engine table too


def test_the_figures_draw_from_the_records(tmp_path):
    from attntemp.advise.advice_page import diagnosis_figure, tradeoff_figure

    ev = Evidence.from_dict(json.loads((TINY / "evidence.json").read_text()))
    for draw, name in ((tradeoff_figure, "tradeoff.png"), (diagnosis_figure, "diagnosis.png")):
        assert draw(ev, tmp_path / name).stat().st_size > 2000


def test_a_failed_first_check_keeps_the_spec_rows_and_shows_its_error():
    conf = Confirmation.from_dict({"a": {"error": "no key tokens"}, "b": {"no change": CELL, "x": PAIRED}})
    table = confirm_table(conf)[0].splitlines()
    assert [row.split(" | ")[0] for row in table[2:]] == ["| no change", "| x"]
    assert "no key tokens" in table[3] and "0.9000 [0.8000, 0.9500] better" in table[3]


def test_every_check_failed_says_each():
    conf = Confirmation.from_dict({"a": {"error": "not yet scored"}, "b": {"error": "not yet either"}})
    assert confirm_table(conf) == ["(nothing confirmed)", "", "- a: not yet scored", "- b: not yet either"]


def test_a_carried_form_is_printed_beside_the_bake_command():
    from dataclasses import replace

    from attntemp.advise.advice_page import engine_lines
    from attntemp.advise.records.answers import Route

    ev = Evidence.from_dict(json.loads((TINY / "evidence.json").read_text()))
    how = Route("bake", command="attntemp bake --spec carried.json --out BAKED", spec={"m": 2}, why="w")
    rec = replace(ev.recommendation, engines={"llama.cpp": how})
    ev = replace(ev, question=replace(ev.question, engine="llama.cpp"), recommendation=rec, by_engine={})
    text = "\n".join(engine_lines(ev))
    assert "carried.json (what llama.cpp carries of it)" in text and '{"m": 2}' in text


def test_the_demo_never_bakes_what_its_retrieval_table_refutes():
    """refuted() reads the confirmation's passkeys: fewer than YaRN's default or than no change,
    distinguishably, refutes; not distinguishable does not."""
    from dataclasses import replace

    from attntemp.advise.demo import refuted

    base = Evidence.from_dict(json.loads((TINY / "evidence.json").read_text()))

    def ev(vs_default, vs_base="better"):
        paired = {"level": 0.95, "method": "m"}
        cell = {"value": "0.3", "vs_no_change": {"value": 0.3, "low": 0.1, "high": 0.5, "verdict": vs_base, **paired},
                "vs_default": {"against": "D", "value": -0.2, "low": -0.3, "high": -0.05, "verdict": vs_default,
                               **paired}}  # fmt: skip
        conf = Confirmation.from_dict({"passkeys found at 512": {"pick": cell}})
        return replace(base, recommendation=replace(base.recommendation, name="pick"), confirmation=conf)

    assert "fewer keys than YaRN's default" in refuted(ev("worse"))
    assert refuted(ev("not distinguishable")) is None
    assert "fewer keys than no change" in refuted(ev("not distinguishable", "worse"))
