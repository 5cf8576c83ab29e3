"""What the confirmation pairs against YaRN at m = 1: every candidate on YaRN's RoPE, whatever its
name (SmolLM2 at 12288 left "YaRN s = 1.5 + log-n" out of "what a temperature adds" by its label)."""

import pytest

from attntemp.advise.candidates import candidates, yarn_label
from attntemp.advise.confirm import checks_for, on_yarn, to_confirm
from attntemp.advise.race import Entry, RaceResult
from attntemp.evaluate import tasks  # noqa: F401 (registers the tasks checks_for names)


def race_of(length: int, trained: int, left: set[str]) -> RaceResult:
    entries = [Entry(c, reason="left" if c.name in left else None) for c in candidates(length / trained, trained)]
    return RaceResult(entries, "tied", 0, 6, entries[0].name)


@pytest.mark.parametrize(("length", "trained"), [(12288, 8192), (16384, 8192), (512, 256)])
def test_every_yarn_with_a_temperature_is_paired_against_yarn_at_m_1(length, trained):
    race = race_of(length, trained, set())
    m1 = f"{yarn_label(length / trained)}, m = 1"
    by_key = {e.key: e.name for e in race.entries}
    keys = on_yarn(race, "yarn")
    assert keys[0] == "yarn" and "yarn+logn" in keys and "yarn+m" in keys
    names = [by_key[k] for k in keys]
    assert names[0] == m1 and f"{yarn_label(length / trained)} + log-n" in names
    assert any("YaRN's m" in n for n in names)
    assert all(n.startswith(yarn_label(length / trained)) for n in names)  # a smaller YaRN's RoPE differs
    by_name = {e.name: e for e in race.entries}
    assert {by_name[n].candidate.spec.rope for n in names} == {by_name[m1].candidate.spec.rope}


def test_without_the_reference_nothing_is_paired():
    race = race_of(12288, 8192, set())
    assert on_yarn(race, "no-such-key") == []
    assert on_yarn(race_of(256, 256, set())) == []  # at L0 no YaRN is raced


def test_the_references_are_confirmed_even_after_they_left_the_race():
    race = race_of(12288, 8192, {"YaRN s = 1.5, m = 1", "YaRN s = 1.5 + log-n"})
    picked = [e.name for e in to_confirm(race, on_yarn(race, "yarn"))]
    assert picked[0] == "no change" and {"YaRN s = 1.5, m = 1", "YaRN s = 1.5 + log-n"} <= set(picked)


def _survivors(*names):
    from attntemp.advise.candidates import BASELINE, Candidate
    from attntemp.advise.race import Entry, RaceResult
    from attntemp.ops.spec import TemperatureSpec

    how = {"transformers": {"how": "settings"}}
    entries = [Entry(Candidate(BASELINE, TemperatureSpec(), "baseline", True, key="baseline"), reason="left")]
    entries += [
        Entry(Candidate(n, TemperatureSpec(multiplier=1 + i / 10), "x", True, engines=how)) for i, n in enumerate(names)
    ]
    return RaceResult(entries, "tied", 0, 8, names[0])


def _cell(verdict):
    return {"value": 0.1, "low": 0.0, "high": 0.2, "level": 0.95, "method": "made up", "verdict": verdict}


def _confirmed(rows):
    """The confirmation of ``{check label: {spec: {other spec: comparison}}}`` (its ``vs`` cells alone)."""
    from attntemp.advise.records.comparisons import Confirmation

    cells = {
        label: {n: {"value": "-", "vs_no_change": None, "vs": vs} for n, vs in row.items()}
        for label, row in rows.items()
    }
    return Confirmation.from_dict(cells)


def test_decide_passes_over_a_survivor_another_survivor_beats_on_retrieval():
    from attntemp.advise.confirm import checks_for, decide

    checks = checks_for("key_tokens", 512, (), (), False, False, retrieval="passkey")
    race = _survivors("A", "B")
    rows = {
        checks[0].label: {"A": {"B": _cell("not distinguishable")}, "B": {"A": _cell("not distinguishable")}},
        checks[1].label: {"A": {"B": _cell("worse")}, "B": {"A": _cell("better")}},
    }
    chosen, why = decide(race, _confirmed(rows), checks[:2], "transformers")
    assert chosen.name == "B" and "no other survivor beats" in why
    rows[checks[1].label]["B"]["A"] = _cell("not distinguishable")  # nobody beats A: the simplest stays
    assert decide(race, _confirmed(rows), checks[:2], "transformers")[0].name == "A"


def test_decide_keeps_the_race_pick_and_says_so_when_every_survivor_is_beaten_somewhere():
    from attntemp.advise.confirm import checks_for, decide

    checks = checks_for("key_tokens", 512, (), (), False, False, retrieval="passkey")
    confirmed = _confirmed({
        checks[0].label: {"A": {"B": _cell("better")}, "B": {"A": _cell("worse")}},
        checks[1].label: {"A": {"B": _cell("worse")}, "B": {"A": _cell("better")}},
    })  # fmt: skip
    chosen, why = decide(_survivors("A", "B"), confirmed, checks[:2], "transformers")
    assert chosen.name == "A" and "every survivor is beaten by another on some axis" in why


def test_each_held_out_length_is_its_own_check():
    """--check-lengths 768,1024: one confirmation of the objective at each, beside the one at N."""
    checks = checks_for("key_tokens", 512, (768, 1024), (64,), False, False)
    held = [(c.length, c.label) for c in checks if "held out" in c.label]
    assert held == [
        (768, "distant-token perplexity at 768 (held out)"),
        (1024, "distant-token perplexity at 1024 (held out)"),
    ]
    assert [c.length for c in checks_for("key_tokens", 512, (), (64,), False, False)] == [512, 64]


def test_a_check_not_yet_stored_is_a_short_cell_not_the_store_path():
    """advise --status during the confirmation: the unscored check reads as how many specs are
    missing (the whole message, with the store's path, was cut at 60 characters in every cell)."""
    from attntemp.advise.advice_page import confirm_table
    from attntemp.advise.confirm import Check, confirm
    from attntemp.evaluate.score import NotStored
    from attntemp.ops.spec import TemperatureSpec

    def scorer(specs, task, length, text):
        raise NotStored(
            "1 of 2 specs not yet scored on multikey at 512 in '/a/long/path/scores.db'", "1 of 2 specs not yet scored"
        )

    specs = {"no change": TemperatureSpec(), "softer": TemperatureSpec(multiplier=0.9)}
    conf = confirm(specs, [Check("keys found", "multikey", "exact_match", 512, "evaluation")], scorer)
    (row,) = conf.rows.values()
    assert row.error == "1 of 2 specs not yet scored"
    assert "scores.db" not in "\n".join(confirm_table(conf))
