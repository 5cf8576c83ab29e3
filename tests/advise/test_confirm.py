"""What the confirmation pairs against YaRN at m = 1: every candidate on YaRN's RoPE, whatever its
name (SmolLM2 at 12288 left "YaRN s = 1.5 + log-n" out of "what a temperature adds" by its label)."""

import pytest

from attntemp.advise.candidates import candidates, yarn_label
from attntemp.advise.confirm import on_yarn, to_confirm
from attntemp.advise.race import Entry, RaceResult


def race_of(length: int, trained: int, left: set[str]) -> RaceResult:
    entries = [Entry(c, reason="left" if c.name in left else None) for c in candidates(length, trained)]
    return RaceResult(entries, "tied", 0, 6, entries[0].name)


@pytest.mark.parametrize(("length", "trained"), [(12288, 8192), (16384, 8192), (512, 256)])
def test_every_yarn_with_a_temperature_is_paired_against_yarn_at_m_1(length, trained):
    race = race_of(length, trained, set())
    m1 = f"{yarn_label(length / trained)}, m = 1"
    names = on_yarn(race, m1)
    assert names[0] == m1 and f"{yarn_label(length / trained)} + log-n" in names
    assert any("YaRN's m" in n for n in names)
    assert all(n.startswith(yarn_label(length / trained)) for n in names)  # a smaller YaRN's RoPE differs
    by_name = {e.name: e for e in race.entries}
    assert {by_name[n].candidate.spec.rope for n in names} == {by_name[m1].candidate.spec.rope}


def test_without_the_reference_nothing_is_paired():
    race = race_of(12288, 8192, set())
    assert on_yarn(race, "YaRN s = 7, m = 1") == []


def test_the_references_are_confirmed_even_after_they_left_the_race():
    race = race_of(12288, 8192, {"YaRN s = 1.5, m = 1", "YaRN s = 1.5 + log-n"})
    picked = [e.name for e in to_confirm(race, on_yarn(race, "YaRN s = 1.5, m = 1"))]
    assert picked[0] == "no change" and {"YaRN s = 1.5, m = 1", "YaRN s = 1.5 + log-n"} <= set(picked)
