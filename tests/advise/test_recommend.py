"""The recommendation as a user reads it, from the real confirmation (``confirm``) on made-up scores:
a confirmed spec distinguishably better than the pick on an axis is said ("where the axes
disagree"); an engine's pick its own confirmation refutes (fewer keys than YaRN's default, or over
the cost limit for certain) is never "recommended": the simplest unrefuted spec the engine carries
takes its place, else the answer is a trade-off with numbers."""

import json
import random

import pytest
from evidence_of import evidence_of

from attntemp.advise import advice_page
from attntemp.advise.candidates import BASELINE, Candidate
from attntemp.advise.confirm import checks_for, confirm, objections, recommendation
from attntemp.advise.race import Entry, RaceResult
from attntemp.advise.records.evidence import Evidence
from attntemp.evaluate import tasks  # noqa: F401 (registers the tasks the checks name)
from attntemp.ops.spec import TemperatureSpec

ENGINE = "transformers"
M = {BASELINE: 1.0, "A": 1.1, "B": 1.2, "D": 1.3}  # each spec told apart by its multiplier
KEYS = {BASELINE: "baseline", "A": "a", "B": "b", "D": "yarn+m"}  # D: YaRN's own default


def _results(hits: dict[str, int], cost: dict[str, float]):
    """A scorer of the confirmation: the needles objective (every spec 4 nats better than no
    change), passkeys (``hits[name]`` of 40 found, the same prompts first), all-token perplexity at
    64 (``cost[name]`` times no change's per window)."""
    rng = random.Random(0)
    base_nll = [100 + rng.random() for _ in range(8)]
    good = [-1.0 + 0.01 * rng.random() for _ in range(8)]  # every spec but no change alike on the objective

    def result(name: str, task: str) -> dict:
        if task == "needles":
            logps = [-5.0] * 8 if name == BASELINE else good
            doc = {"acc": 0.5, "doc_acc": [0.5] * 8, "documents_digest": "d"}
            return {"logp": sum(logps) / 8, "doc_logp": logps, **doc}
        if task == "passkey":
            h = [1] * hits[name] + [0] * (40 - hits[name])
            return {"acc": hits[name] / 40, "hits": h, "logp": -1.0, "logps": [-1.0] * 40}
        nll = [x * (1 + 0.001 * rng.random()) + 50 * (cost[name] - 1) * 2 for x in base_nll]
        return {"ppl": 1.0, "window_nll": nll, "tokens": 50, "windows_digest": "w"}

    def scorer(specs, task, length, text):
        names = {m: n for n, m in M.items()}
        return [result(names[s.multiplier], task) for s in specs]

    return scorer


def _race(survivors: set[str]) -> RaceResult:
    how = {ENGINE: {"how": "settings"}}
    entries = [
        Entry(Candidate(n, TemperatureSpec(multiplier=m), "x", True, engines=how, key=KEYS[n]),
              reason=None if n in survivors else "left")
        for n, m in M.items()
    ]  # fmt: skip
    return RaceResult(entries, "tied", 0, 8, "A")


def _advice(hits, cost, survivors):
    checks = checks_for("needles", 512, (), (64,), False, False, retrieval="passkey")
    specs = {n: TemperatureSpec(multiplier=m) for n, m in M.items()}
    confirmed = confirm(specs, checks, _results(hits, cost), default="D")
    return recommendation(_race(survivors), confirmed, checks, ENGINE, 0.01), confirmed, checks


def test_a_spec_better_than_the_pick_on_an_axis_is_said_in_the_headline_and_the_report():
    """B (left the race) finds 30 of 40 keys where the pick A finds 12: the headline lists it and the
    report's "Where the axes disagree" says it, with the paired difference against the pick."""
    rec, _, _ = _advice({BASELINE: 0, "A": 12, "B": 30, "D": 12}, {BASELINE: 1, "A": 1, "B": 1, "D": 1}, {"A"})
    assert rec.status == "recommended" and rec.name == "A" and rec.headline is not None
    better = rec.headline.better_elsewhere
    assert [(b.name, b.label) for b in better] == [("B", "passkeys found at 512")]
    assert better[0].vs.verdict == "better" and better[0].vs.value == pytest.approx(0.45)


def test_the_whole_report_renders_from_what_the_run_writes_and_says_where_the_axes_disagree():
    """The evidence made by the real confirmation and recommendation on made-up scores, rendered
    whole (every field the report reads is one the run writes: mypy holds the records, this the
    wiring), and read back from its JSON unchanged: the report says where the axes disagree."""
    survivors = {"A"}
    hits, cost = {BASELINE: 0, "A": 12, "B": 30, "D": 12}, dict.fromkeys(M, 1.0)
    rec, confirmed, _ = _advice(hits, cost, survivors)
    ev = evidence_of(_race(survivors), confirmed, {ENGINE: rec}, objective="needles")
    text = advice_page.advice_markdown(ev)
    assert text.startswith("# attntemp advise: tiny at 512 tokens") and "**Run: A**" in text
    assert "Where the axes disagree" in text and "- B, passkeys found at 512: +0.450" in text
    assert "B, passkeys found at 512: +0.450 [+0.279, +0.577], better against the pick (left)" in text
    assert Evidence.from_dict(json.loads(json.dumps(ev.to_dict()))) == ev


def test_a_pick_with_fewer_keys_than_yarns_default_gives_way_to_the_simplest_unrefuted_spec():
    rec, confirmed, checks = _advice(
        {BASELINE: 0, "A": 5, "B": 30, "D": 28}, {BASELINE: 1, "A": 1, "B": 1.05, "D": 1}, {"A", "B"}
    )
    assert objections(confirmed, checks, "A", 0.01)[0].startswith("it finds fewer keys than YaRN's default (D)")
    assert (
        objections(confirmed, checks, "B", 0.01)
        == [o for o in objections(confirmed, checks, "B", 0.01) if "over the 1% limit" in o]
        != []
    )
    assert rec.status == "recommended" and rec.name == "D"
    assert "is refuted by its own confirmation" in rec.why and "meets both" in rec.why


def test_when_nothing_the_engine_carries_meets_both_the_answer_is_a_trade_off_with_numbers():
    rec, _, _ = _advice({BASELINE: 0, "A": 5, "B": 30, "D": 28}, {BASELINE: 1, "A": 1, "B": 1.05, "D": 1.05}, {"A"})
    assert rec.status == "trade-off" and rec.name is None
    t = rec.trade_off
    assert t.best_retrieval.name == "B" and t.lowest_cost.name == "A"
    assert t.lowest_cost.vs_default.paired.verdict == "worse" and t.best_retrieval.cost.paired.low > 1.01
    assert t.sentence.startswith("Nothing transformers carries both finds as many keys")
    assert "best retrieval B" in t.sentence and "lowest cost A" in t.sentence


def test_a_pick_its_confirmation_does_not_refute_stays():
    rec, confirmed, checks = _advice({BASELINE: 0, "A": 27, "B": 28, "D": 28}, dict.fromkeys(M, 1.0), {"A", "B"})
    assert rec.status == "recommended" and rec.name == "A" and objections(confirmed, checks, "A", 0.01) == []


@pytest.mark.parametrize("engine", [None, "sglang", ""])
def test_pick_with_nothing_to_choose_from_names_the_engine(engine):
    """Issue 64: advise_racing handed pick the default engine (None); a bare max() failed."""
    from attntemp.advise.confirm import pick

    race = _race(set())
    race.status = "tied"
    with pytest.raises(ValueError, match=rf"engine={engine!r} computes none of the race's 4 candidates"):
        pick(race, engine)


def test_no_change_below_yarns_default_on_retrieval_is_a_trade_off_not_the_answer():
    """The race keeps only no change (every RoPE change costs more than 1% below L0), but YaRN's
    default finds more keys: "nothing beats the baseline" would hide that; the answer is the trade-off."""
    rec, _, _ = _advice({BASELINE: 0, "A": 5, "B": 30, "D": 28}, {BASELINE: 1, "A": 1.05, "B": 1.05, "D": 1.05},
                        {BASELINE})  # fmt: skip
    assert rec.status == "trade-off" and "'no change', the race's answer, is refuted" in rec.why
    assert rec.trade_off.best_retrieval.name == "B"


def test_no_change_stays_the_answer_where_no_spec_finds_more_keys_than_it():
    rec, _, _ = _advice({BASELINE: 10, "A": 10, "B": 10, "D": 10}, {BASELINE: 1, "A": 1.05, "B": 1.05, "D": 1.05},
                        {BASELINE})  # fmt: skip
    assert rec.status == "nothing beats the baseline" and rec.name == BASELINE
