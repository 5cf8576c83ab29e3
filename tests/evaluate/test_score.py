"""The one way to score a spec: the same numbers as the task under the patch, a key for any spec,
a store that is read instead of scoring again, and blocks of windows that merge into the whole."""

import math

import pytest
import torch

from attntemp.evaluate import corpus, score
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec


def _flat(x):
    return [v for row in x for v in _flat(row)] if isinstance(x, list) else [x]


YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256}


@pytest.fixture(scope="module")
def ctx():
    docs = corpus.pool(corpus.load_text("stdlib"), "tuning")
    return EvalContext(256, docs, n_docs=4, batch_size=8, needles_per_forward=2, key_ngram=4, key_distance=64)


def test_score_is_the_task_under_the_patch(tiny, ctx):
    model, tok = tiny
    spec = TemperatureSpec(multiplier=1.2, rope=YARN)
    got = score.score(model, tok, spec, "perplexity", 512, ctx)
    with patch(model, TemperatureSpec(rope=YARN)):
        want = get_task("perplexity").evaluate(model, tok, 512, [1.2], ctx)[0]
    assert got.metrics["window_nll"] == pytest.approx(want["window_nll"], rel=1e-5)
    assert got.rows == 4 and not got.cached


def test_batched_multipliers_match_one_at_a_time(tiny, ctx):
    model, tok = tiny
    specs = [TemperatureSpec(multiplier=m, rope=YARN) for m in (0.9, 1.0, 1.3)]
    together = score.score_many(model, tok, specs, "perplexity", 512, ctx)
    alone = [score.score(model, tok, s, "perplexity", 512, ctx) for s in specs]
    for a, b in zip(together, alone, strict=True):
        assert a.metrics["tail_ppl"] == pytest.approx(b.metrics["tail_ppl"], rel=1e-4)
    assert together[0].metrics["tail_ppl"] != pytest.approx(together[2].metrics["tail_ppl"], rel=1e-3)


def test_every_spec_has_its_own_key(ctx):
    heads = [[1.0] * 8 for _ in range(4)]
    other = [row[:] for row in heads]
    other[3][7] = 1.01
    specs = [
        TemperatureSpec(heads=heads),
        TemperatureSpec(heads=other),
        TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256}),
        TemperatureSpec(rope=YARN),
    ]
    keys = {score.score_key(s, "perplexity", 512, ctx, "w") for s in specs}
    assert len(keys) == 4
    base = score.score_key(specs[0], "perplexity", 512, ctx, "w")
    assert score.score_key(specs[0], "perplexity", 512, ctx, "other weights") != base
    assert score.score_key(specs[0], "perplexity", 384, ctx, "w") != base
    assert score.score_key(specs[0], "key_tokens", 512, ctx, "w") != base
    from dataclasses import replace

    assert score.score_key(specs[0], "perplexity", 512, replace(ctx, window_range=(0, 2)), "w") != base
    assert score.score_key(specs[0], "perplexity", 512, replace(ctx, seed=1), "w") != base


def test_the_store_is_read_instead_of_scoring_again(tiny, ctx, tmp_path, monkeypatch):
    model, tok = tiny
    store = score.ScoreStore(tmp_path / "s.db")
    spec = TemperatureSpec(multiplier=1.1)
    first = score.score(model, tok, spec, "perplexity", 384, ctx, store, "tiny")
    monkeypatch.setattr(score, "patch", lambda *a: pytest.fail("scored again"))
    again = score.score(model, tok, spec, "perplexity", 384, ctx, score.ScoreStore(tmp_path / "s.db"), "tiny")
    assert again.cached and again.rows == first.rows == 4 and again.metrics == first.metrics


def test_a_read_only_store_reads_what_it_holds_and_refuses_to_score(tiny, ctx, tmp_path, monkeypatch):
    model, tok = tiny
    with pytest.raises(ValueError, match=r"not a usable score store: no such file"):
        score.ScoreStore(tmp_path / "none.db", read_only=True)
    assert not (tmp_path / "none.db").exists()
    spec = TemperatureSpec(multiplier=1.1)
    first = score.score(model, tok, spec, "perplexity", 384, ctx, score.ScoreStore(tmp_path / "s.db"), "tiny")
    monkeypatch.setattr(score, "patch", lambda *a: pytest.fail("scored"))
    ro = score.ScoreStore(tmp_path / "s.db", read_only=True)
    assert score.score(model, tok, spec, "perplexity", 384, ctx, ro, "tiny").metrics == first.metrics
    with pytest.raises(score.NotStored, match=r"1 of 2 specs not yet scored on perplexity at 384"):
        score.score_many(model, tok, [spec, TemperatureSpec(multiplier=1.2)], "perplexity", 384, ctx, ro, "tiny")


@pytest.mark.parametrize("task", ["perplexity", "key_tokens", "needles"])
def test_blocks_of_windows_merge_into_the_whole(tiny, ctx, task):
    from dataclasses import replace

    model, tok = tiny
    spec = TemperatureSpec(multiplier=1.1, rope=YARN)
    whole = score.score(model, tok, spec, task, 512, ctx).metrics
    parts = [score.score(model, tok, spec, task, 512, replace(ctx, window_range=r)) for r in ((0, 1), (1, 3), (3, 4))]
    merged = score.merged(task, parts)
    the_task = get_task(task)
    for key in the_task.per_window:
        assert _flat(merged[key]) == pytest.approx(_flat(whole[key]), rel=1e-4, abs=1e-6)
    for m in the_task.metrics:
        if not math.isnan(whole[m.name]):
            assert merged[m.name] == pytest.approx(whole[m.name], rel=1e-4)
    base = score.merged(
        task,
        [
            score.score(model, tok, TemperatureSpec(rope=YARN), task, 512, replace(ctx, window_range=r))
            for r in ((0, 1), (1, 3), (3, 4))
        ],
    )
    assert the_task.paired(merged, base, the_task.objective) is not None  # merged blocks pair with each other


def test_a_block_past_the_drawn_windows_is_refused(tiny, ctx):
    from dataclasses import replace

    model, tok = tiny
    with pytest.raises(ValueError, match="window_range"):
        score.score(model, tok, TemperatureSpec(), "perplexity", 384, replace(ctx, window_range=(3, 6)))
    with pytest.raises(ValueError, match="window_range"):
        replace(ctx, window_range=(2, 2))


def test_the_weights_identity_names_the_dtype_they_run_in_unless_float32(monkeypatch):
    monkeypatch.setattr(score.preflight, "weights_digest", lambda name: "abc")
    fp32, bf16 = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert score.model_identity(fp32, "m") == "files:abc"  # the keys of every store made in float32 so far
    assert score.model_identity(bf16, "m") == "files:abc:bfloat16"  # a bfloat16 run never reads them
    assert score.model_identity(fp32).startswith("params:")  # no local files: the parameters' bytes


def test_progress_says_each_batch_of_forwards_and_nothing_for_stored_scores(tiny, ctx, tmp_path):
    """ctx holds 8 rows a forward and a spec needs 4 windows: 3 specs to score are 2 batches."""
    model, tok = tiny
    store = score.ScoreStore(tmp_path / "s.db")
    specs = [TemperatureSpec(multiplier=m) for m in (0.9, 1.0, 1.1)]
    lines: list[str] = []
    with score.reporting(lines.append):
        score.score_many(model, tok, specs, "perplexity", 384, ctx, store, "tiny")
    assert [line.split(" (")[0] for line in lines] == [
        "perplexity at 384: 2 of 3 specs scored",
        "perplexity at 384: 3 of 3 specs scored",
    ]
    assert all(line.endswith(" s a spec)") for line in lines)
    lines.clear()
    more = [*specs, TemperatureSpec(multiplier=1.2)]
    with pytest.raises(KeyError), score.reporting(lines.append):
        score.score_many(model, tok, more, "perplexity", 384, ctx, store, "tiny")
        raise KeyError("the block ends on an error")
    assert [line.split(" (")[0] for line in lines] == ["perplexity at 384: 1 of 1 specs scored"]
    lines.clear()
    score.score_many(model, tok, [TemperatureSpec(multiplier=1.3)], "perplexity", 384, ctx, store, "tiny")
    assert lines == []  # outside the block (left on an error): no lines


@pytest.mark.parametrize(
    "schema, said",
    [
        ("CREATE TABLE other (x);", "it holds table(s) ['other'] and no scores table"),
        (
            "CREATE TABLE scores (key TEXT, task TEXT);",
            "its scores table has no column(s) ['length', 'spec', 'metrics'",
        ),
    ],
)
def test_a_store_of_another_program_is_refused_untouched(tmp_path, schema, said):
    import sqlite3

    path = tmp_path / "scores.db"
    db = sqlite3.connect(path)
    db.executescript(schema)
    db.close()
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(ValueError, match="is not a usable score store") as exc:
            score.ScoreStore(path, read_only=read_only)
        assert said in str(exc.value) and str(path) in str(exc.value)
    assert path.read_bytes() == before  # no scores table added to the user's file
    score.ScoreStore(tmp_path / "new.db").close()
    score.check_store(tmp_path / "new.db")  # its own store passes
