"""The global search: its multipliers go in batch-sized chunks, and a cache given to it resumes it."""

from dataclasses import replace

import pytest

from attntemp.evaluate import corpus, score
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.tune import search

OPTS = search.SearchOptions(length=384, objective="key_tokens", grid=3, iters=2)


@pytest.fixture
def counted(monkeypatch):
    """get_task, with each evaluate call's multipliers recorded."""
    calls: list[list[float]] = []

    class Counted:
        def __init__(self, task):
            self.task = task

        def __getattr__(self, name):
            return getattr(self.task, name)

        def evaluate(self, model, tok, length, ms, ctx):
            calls.append(list(ms))
            return self.task.evaluate(model, tok, length, ms, ctx)

    monkeypatch.setattr(score, "get_task", lambda name: Counted(get_task(name)))
    return calls


def test_a_cache_resumes_the_search_without_scoring_again(tiny, counted):
    model, tok = tiny
    ctx = EvalContext(256, corpus.pool(corpus.load_text("stdlib"), "tuning"), n_docs=2, batch_size=4)
    cache: dict[float, float] = {}
    first = search.tune_global(model, tok, ctx, OPTS, cache=cache)
    assert all(len(ms) <= 2 for ms in counted)  # 4 rows a batch, 2 windows a multiplier
    assert sum(len(ms) for ms in counted) == len(cache) == len(first["curve"]) >= 5
    assert first["value"] == pytest.approx(min(v for _, v in first["curve"]))  # key-token ppl: lower is better
    lo, hi = first["grid"]  # the bracket, widened where its best point was at an edge
    assert lo <= OPTS.bracket[0] < OPTS.bracket[1] <= hi and lo <= first["multiplier"] <= hi
    counted.clear()
    again = search.tune_global(model, tok, ctx, OPTS, cache=dict(cache))
    assert counted == [] and again["multiplier"] == first["multiplier"]


def test_a_score_store_resumes_the_search_without_scoring_again(tiny, counted, tmp_path):
    model, tok = tiny
    ctx = EvalContext(256, corpus.pool(corpus.load_text("stdlib"), "tuning"), n_docs=2, batch_size=4)
    store = score.ScoreStore(tmp_path / "scores.db")
    opts, kept = replace(OPTS, iters=1), score.Kept(store, "tiny")
    first = search.tune_global(model, tok, ctx, opts, kept=kept)
    assert store.count() == sum(len(ms) for ms in counted) >= 4
    counted.clear()
    again = search.tune_global(model, tok, ctx, opts, kept=kept)
    assert counted == [] and again["multiplier"] == first["multiplier"]
