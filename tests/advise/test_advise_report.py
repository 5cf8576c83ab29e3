"""advise's confirmation table when some checks (or all) could not be scored."""

from attntemp.advise.advice_page import confirm_table

CELL = {"value": "2.1 [2, 2.2]", "vs_no_change": None}
PAIRED = {"value": "2.0 [1.9, 2.1]", "vs_no_change": {"value": 0.9, "low": 0.8, "high": 0.95, "verdict": "better"}}


def test_a_failed_first_check_keeps_the_spec_rows_and_shows_its_error():
    ev = {"confirmation": {"a": {"error": "no key tokens"}, "b": {"no change": CELL, "x": PAIRED}}}
    table = confirm_table(ev)[0].splitlines()
    assert [row.split(" | ")[0] for row in table[2:]] == ["| no change", "| x"]
    assert "no key tokens" in table[3] and "0.9000 [0.8000, 0.9500] better" in table[3]


def test_every_check_failed_says_each():
    ev = {"confirmation": {"a": {"error": "not yet scored"}, "b": {"error": "not yet either"}}}
    assert confirm_table(ev) == ["(nothing confirmed)", "", "- a: not yet scored", "- b: not yet either"]


def test_a_carried_form_is_printed_beside_the_bake_command():
    from attntemp.advise.advice_page import engine_lines

    how = {"how": "bake", "command": "attntemp bake --spec carried.json --out BAKED", "why": "w", "spec": {"m": 2}}
    ev = {"question": {"engine": "llama.cpp", "objective": "key_tokens", "length": 512},
          "recommendation": {"name": "x", "status": "recommended", "why": "y", "evidence": "e",
                             "engines": {"llama.cpp": how}}}  # fmt: skip
    text = "\n".join(engine_lines(ev))
    assert "carried.json (what llama.cpp carries of it)" in text and '{"m": 2}' in text


def test_the_demo_never_bakes_what_its_retrieval_table_refutes():
    """refuted() reads the confirmation's passkeys: fewer than YaRN's default or than no change,
    distinguishably, refutes; not distinguishable does not."""
    from attntemp.advise.demo import refuted

    def ev(vs_default, vs_base="better"):
        cell = {"value": "0.3", "vs_no_change": {"value": 0.3, "low": 0.1, "high": 0.5, "verdict": vs_base},
                "vs_default": {"value": -0.2, "low": -0.3, "high": -0.05, "verdict": vs_default}}  # fmt: skip
        return {"recommendation": {"name": "pick"}, "confirmation": {"passkeys found at 512": {"pick": cell}}}

    assert "fewer keys than YaRN's default" in refuted(ev("worse"))
    assert refuted(ev("not distinguishable")) is None
    assert "fewer keys than no change" in refuted(ev("not distinguishable", "worse"))
