"""The race on a scorer with known effects: a clear winner is found with fewer rows than scoring
everything, a candidate that costs too much below L0 leaves, a small budget ends undecided, and
candidates no window tells apart end tied."""

import numpy as np
import pytest

from attntemp.advise.candidates import BASELINE, Candidate
from attntemp.advise.race import RaceSettings, race
from attntemp.evaluate import tasks  # noqa: F401 (registers the tasks the race asks for by name)
from attntemp.evaluate.score import Result
from attntemp.ops.spec import TemperatureSpec

TOKENS = 100


def _metrics(nll: np.ndarray) -> dict:
    """A perplexity result of windows with these mean NLLs (per token) over every position."""
    sums = (nll * TOKENS).tolist()
    return {
        "ppl": float(np.exp(nll.mean())), "tail_ppl": float(np.exp(nll.mean())), "window_nll": sums,
        "window_tail_nll": sums, "tokens": TOKENS, "tail_tokens": TOKENS, "bucket_nll": [[s] for s in sums],
        "bucket_tokens": [TOKENS], "bucket_ppl": [1.0], "bucket_edges": [0, TOKENS], "tail_start": 0,
        "windows_digest": "w",
    }  # fmt: skip


def fake_scorer(long_effect: dict, short_effect: dict, calls: list):
    """Window i's mean NLL: 2 + noise(i) + the spec's effect (at N, or below L0)."""
    noise = np.random.default_rng(0).normal(0, 0.3, 64)

    def scorer(specs, task, length, block):
        calls.append((len(specs), block))
        out = []
        for s in specs:
            effect = (long_effect if length == 1024 else short_effect).get(s.multiplier, 0.0)
            own = np.random.default_rng(int(s.multiplier * 1000)).normal(0, 0.005, 64)  # the spec's own noise
            nll = 2.0 + noise[block[0] : block[1]] + effect + own[block[0] : block[1]]
            out.append(Result(s, task, length, _metrics(nll), "k", 0.0, False, block[1] - block[0]))
        return out

    return scorer


def cands(*ms: float) -> list[Candidate]:
    return [
        Candidate(BASELINE if m == 1.0 else f"m = {m}", TemperatureSpec(multiplier=m), "x", m == 1.0,
                  key="baseline" if m == 1.0 else f"m{m}")
        for m in ms
    ]  # fmt: skip


SETTINGS = RaceSettings("perplexity", 1024, (128,), windows=32, block=2, min_windows=4)


def test_a_clear_winner_is_found_with_far_fewer_rows_than_scoring_everything():
    calls: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.05, 0.9: 0.1}, {}, calls)
    res = race(cands(1.0, 0.9, 1.1, 1.2), scorer, SETTINGS)
    assert res.status == "decided" and [e.name for e in res.survivors] == ["m = 1.1"]
    exhaustive = 4 * 32 * 2  # every candidate, every window, at N and at the short length
    assert res.rows <= exhaustive / 3
    left = {e.name: e.reason for e in res.entries}
    assert "worse than 'm = 1.1'" in left["m = 0.9"] and "worse than 'm = 1.1'" in left[BASELINE]


def test_progress_counts_the_candidates_left_after_each_rounds_cuts():
    seen: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.05, 0.9: 0.1}, {}, [])
    res = race(cands(1.0, 0.9, 1.1, 1.2), scorer, SETTINGS, lambda w, r, left: seen.append((w, left)))
    assert seen[0] == (2, 4)  # before min_windows nobody leaves
    for windows, left in seen:  # each count: those whose reason was not yet given after that round
        assert left == sum(e.left_after is None or e.left_after > windows for e in res.entries)
    assert seen[-1][1] == 1


def test_a_candidate_that_costs_too_much_below_the_trained_length_leaves():
    calls: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.19}, {1.1: 0.05}, calls)  # 1.1 is best at N but costs 5% at 128
    res = race(cands(1.0, 1.1, 1.2), scorer, SETTINGS)
    by = {e.name: e for e in res.entries}
    assert "costs" in by["m = 1.1"].reason and "at 128 tokens" in by["m = 1.1"].reason
    assert by["m = 1.2"].reason is None


def test_a_budget_too_small_to_separate_the_leaders_ends_undecided():
    calls: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.199}, {}, calls)
    res = race(cands(1.0, 1.1, 1.2), scorer, RaceSettings("perplexity", 1024, (128,), 32, 2, 4, budget=40))
    assert res.status == "undecided" and {e.name for e in res.survivors} >= {"m = 1.1", "m = 1.2"}
    assert res.rows <= 40


def test_candidates_no_window_tells_apart_end_tied():
    calls: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.2}, {}, calls)
    res = race(cands(1.0, 1.1, 1.2), scorer, RaceSettings("perplexity", 1024, (), 8, 2, 4))
    assert res.status == "tied" and res.windows == 8
    assert {e.name for e in res.survivors} == {"m = 1.1", "m = 1.2"}


def test_nobody_leaves_before_min_windows():
    calls: list = []
    scorer = fake_scorer({1.1: -2.0}, {}, calls)
    res = race(cands(1.0, 1.1), scorer, RaceSettings("perplexity", 1024, (), 32, 1, 5))
    assert res.windows == 5 and res.status == "decided"


@pytest.mark.parametrize("block", [1, 3])
def test_a_candidate_left_is_never_scored_again(block):
    calls: list = []
    scorer = fake_scorer({1.1: -0.3, 1.2: -0.2995, 0.9: 0.5}, {}, calls)
    res = race(cands(1.0, 0.9, 1.1, 1.2), scorer, RaceSettings("perplexity", 1024, (), 30, block, 4))
    sizes = [n for n, _ in calls]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 4 and sizes[-1] < 4
    for e in res.entries:  # each scored on exactly the windows it raced on
        scored = sum(r.rows for r in e.parts[("perplexity", 1024)])
        assert scored == (e.left_after or res.windows)


def test_one_look_at_every_window_cuts_every_candidate_that_costs_too_much():
    """Exhaustive evaluation is the race with one look: every costly candidate leaves at it."""
    calls: list = []
    scorer = fake_scorer({1.1: -0.2, 1.2: -0.19, 1.3: -0.1}, {1.1: 0.05, 1.2: 0.05}, calls)
    res = race(cands(1.0, 1.1, 1.2, 1.3), scorer, RaceSettings("perplexity", 1024, (128,), 32, 32, 32))
    by = {e.name: e.reason or "" for e in res.entries}
    assert "costs" in by["m = 1.1"] and "costs" in by["m = 1.2"] and [e.name for e in res.survivors] == ["m = 1.3"]


def test_a_scorer_without_the_next_round_stops_the_race_in_progress_with_whole_rounds_only():
    """advise --status: the store holds 3 rounds and part of the 4th; the race stops after the 3rd."""
    from attntemp.evaluate.score import NotStored

    inner = fake_scorer({1.1: -0.2, 1.2: -0.2}, {1.1: 0.00995}, [])  # 1.1 and 1.2 tied; 1.1 costs about 1%

    def stored(specs, task, length, block):
        if block[0] >= 6 and length == 128:  # round 4 at N is stored, its short length is not
            raise NotStored("not yet")
        return inner(specs, task, length, block)

    res = race(cands(1.0, 1.1, 1.2), stored, RaceSettings("perplexity", 1024, (128,), 16, 2, 4))
    assert res.status == "in progress" and res.windows == 6 and len(res.survivors) == 2
    assert all(len(e.parts[("perplexity", 1024)]) == 3 for e in res.survivors)  # round 4 at N: not taken
    assert max(len(parts) for e in res.entries for parts in e.parts.values()) == 3


def retrieval_scorer(long_effect: dict, hit_rate: dict, prompts_per_window: int):
    """Perplexity as above without a spec's own noise (equal effects tie exactly), and passkey
    results: trial i of spec m is a hit when u_i < hit_rate[m] (u shared by every spec: the same
    prompts, so the pairs are correlated)."""
    noise = np.random.default_rng(0).normal(0, 0.3, 64)
    u = np.random.default_rng(1).uniform(size=64 * prompts_per_window)

    def scorer(specs, task, length, block):
        if task != "passkey":
            nll = [2.0 + noise[block[0] : block[1]] + long_effect.get(s.multiplier, 0.0) for s in specs]
            return [
                Result(s, task, length, _metrics(n), "k", 0.0, False, block[1] - block[0])
                for s, n in zip(specs, nll, strict=True)
            ]
        a, b = block[0] * prompts_per_window, block[1] * prompts_per_window
        out = []
        for s in specs:
            hits = (u[a:b] < hit_rate.get(s.multiplier, 0.0)).astype(int).tolist()
            metrics = {"acc": float(np.mean(hits)), "logp": 0.0, "hits": hits, "logps": [0.0] * len(hits)}
            out.append(Result(s, task, length, metrics, "k", 0.0, False, b - a))
        return out

    return scorer


def test_a_candidate_that_finds_fewer_passkeys_by_generation_leaves_though_it_leads_on_the_objective():
    """m = 1.1 leads on distant context (the first of equals) but never retrieves; m = 1.2 ties it
    there and retrieves: the retrieval axis removes 1.1."""
    settings = RaceSettings("perplexity", 1024, (), windows=16, block=2, min_windows=4, retrieval=4)
    scorer = retrieval_scorer({1.1: -0.2, 1.2: -0.2}, {1.1: 0.0, 1.2: 0.7, 1.0: 0.0}, 4)
    res = race(cands(1.0, 1.1, 1.2), scorer, settings)
    by = {e.name: e for e in res.entries}
    assert "fewer passkeys by generation than 'm = 1.2'" in by["m = 1.1"].reason
    assert [e.name for e in res.survivors] == ["m = 1.2"]
    assert by["m = 1.1"].comparisons.retrieval_vs_leader.paired.high < 0  # the paired difference, wholly below


def test_without_the_retrieval_axis_the_objective_leader_stays():
    settings = RaceSettings("perplexity", 1024, (), windows=16, block=2, min_windows=4, retrieval=0)
    scorer = retrieval_scorer({1.1: -0.2, 1.2: -0.2}, {1.1: 0.0, 1.2: 0.7}, 4)
    res = race(cands(1.0, 1.1, 1.2), scorer, settings)
    assert "m = 1.1" in [e.name for e in res.survivors]  # the axis above is what removed it


def test_min_retrieval_waives_the_comparison_for_a_floor():
    """With a floor of 0.3, a candidate that finds 50% stays beside one that finds 90%; one that
    finds none leaves, below the floor."""
    settings = RaceSettings("perplexity", 1024, (), windows=16, block=2, min_windows=4, retrieval=4, min_retrieval=0.3)
    scorer = retrieval_scorer({1.1: -0.2, 1.2: -0.2, 1.3: -0.2}, {1.1: 0.9, 1.2: 0.5, 1.3: 0.0}, 4)
    res = race(cands(1.0, 1.1, 1.2, 1.3), scorer, settings)
    by = {e.name: e for e in res.entries}
    assert by["m = 1.2"].reason is None and by["m = 1.1"].reason is None
    assert "below --min-retrieval 0.3" in by["m = 1.3"].reason


def test_a_leader_whose_cost_is_undecided_cuts_no_one_and_what_it_beat_stays_when_it_leaves_on_cost():
    """m = 1.2 leads at N by far but costs about 1.2% below L0: its short-length interval straddles
    the 1% limit early, so it cuts no one then; once its cost is over the limit for certain it leaves,
    and m = 1.1 (which it beat at N, within the cost) is what stays, as scoring every window keeps it."""
    calls: list = []
    long_effect = {1.1: -0.5, 1.2: -0.8}  # both far better than no change at N; 1.2 the best
    short_effect = {1.1: 0.0, 1.2: 0.012}  # 1.2 costs about 1.2% below L0
    r = race(cands(1.0, 1.1, 1.2), fake_scorer(long_effect, short_effect, calls), SETTINGS)
    by = {e.name: e for e in r.entries}
    assert by["m = 1.2"].reason is not None and "costs" in by["m = 1.2"].reason
    assert by["m = 1.1"].reason is None and [e.name for e in r.survivors] == ["m = 1.1"]
