"""advise's confirmation table when some checks (or all) could not be scored."""

from attntemp.advise.report import confirm_table

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
    from attntemp.advise.report import recommendation_lines

    how = {"how": "bake", "command": "attntemp bake --spec carried.json --out BAKED", "why": "w", "spec": {"m": 2}}
    ev = {"question": {"engine": "llama.cpp", "objective": "key_tokens", "length": 512},
          "recommendation": {"name": "x", "status": "recommended", "why": "y", "evidence": "e",
                             "engines": {"llama.cpp": how}}}  # fmt: skip
    text = "\n".join(recommendation_lines(ev))
    assert "carried.json (what llama.cpp carries of it)" in text and '{"m": 2}' in text
