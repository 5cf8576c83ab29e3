"""Evaluation tasks: registry, metric directions, batched multipliers equal separate runs."""

import math

import pytest
import torch

from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.lm import perplexity
from attntemp.evaluate.tasks import TASKS, EvalContext, get_task, needle_prompt, tail_start
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec


def test_registry_declares_directions():
    assert list(TASKS) == ["perplexity", "passkey", "needle", "key_tokens", "needles", "multikey", "multikey_keys"]
    assert get_task("multikey").higher_is_better("acc")
    assert not get_task("perplexity").higher_is_better("tail_ppl")
    assert get_task("passkey").higher_is_better("acc") and get_task("needle").higher_is_better("logp")
    with pytest.raises(ValueError, match="Did you mean 'passkey'"):
        get_task("paskey")


def test_perplexity_matches_plain_computation(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=2)
    with patch(model, TemperatureSpec()):
        r = get_task("perplexity").evaluate(model, tok, 512, [1.0], ctx)[0]
    ids = heldout_windows(tok, 512, n=2, docs=stdlib_docs)
    assert r["ppl"] == pytest.approx(perplexity(model, ids), rel=1e-5)
    assert r["tail_start"] == 256 == tail_start(512, 256) and tail_start(200, 256) == 150
    assert r["tail_ppl"] == pytest.approx(perplexity(model, ids, start=256), rel=1e-5)


@pytest.mark.parametrize("task", ["perplexity", "passkey"])
def test_batched_multipliers_equal_separate_runs(tiny, stdlib_docs, task):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=2, trials=3)
    ms = [0.7, 1.0, 1.4]
    with patch(model, TemperatureSpec()):
        batched = get_task(task).evaluate(model, tok, 384, ms, ctx)
        alone = [get_task(task).evaluate(model, tok, 384, [m], ctx)[0] for m in ms]
    for b, a in zip(batched, alone, strict=True):
        keys = [key for key in ("ppl", "tail_ppl", "acc", "logp") if key in a]
        assert len(keys) == 2, a  # perplexity's ppl and tail_ppl, or a retrieval task's acc and logp: compared
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key
    assert batched[0] != batched[2]  # the multiplier does something


def test_passkey_and_needle_metrics_are_in_range(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=2, trials=2, depths=(0.0, 1.0))
    with patch(model, TemperatureSpec()):
        pk = get_task("passkey").evaluate(model, tok, 256, [1.0], ctx)[0]
        nd = get_task("needle").evaluate(model, tok, 256, [1.0], ctx)[0]
    assert 0 <= pk["acc"] <= 1 and pk["logp"] < 0 and math.isfinite(pk["logp"])
    assert len(nd["acc_by_depth"]) == 2 and nd["logp"] < 0


def test_needle_prompt(tiny):
    _, tok = tiny
    hay = "line one\n" * 200
    text = needle_prompt(tok, hay, 4242, 300, 0.5)
    assert "The special magic number is 4242." in text and text.endswith("The special magic number is")
    assert len(tok(text, add_special_tokens=False)["input_ids"]) <= 300
    with pytest.raises(ValueError, match="too short"):
        needle_prompt(tok, hay, 1, 40, 0.5)
    assert torch.is_tensor(heldout_windows(tok, 64, n=1))


def test_per_window_values_rebuild_every_figure(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=3, trials=4)
    with patch(model, TemperatureSpec()):
        r = get_task("perplexity").evaluate(model, tok, 512, [1.0, 1.3], ctx)
        k = get_task("passkey").evaluate(model, tok, 384, [1.0, 1.3], ctx)
    for p in r:
        n = len(p["window_tail_nll"])
        assert n == 3 and p["tail_tokens"] == 511 - 256 and p["tokens"] == 511
        assert math.exp(sum(p["window_tail_nll"]) / (n * p["tail_tokens"])) == pytest.approx(p["tail_ppl"], rel=1e-9)
        assert math.exp(sum(p["window_nll"]) / (n * p["tokens"])) == pytest.approx(p["ppl"], rel=1e-9)
        assert [sum(b) for b in p["bucket_nll"]] == pytest.approx(p["window_nll"], rel=1e-9)
        assert sum(p["bucket_tokens"]) == p["tokens"]
    for p in k:
        assert len(p["hits"]) == 4 and sum(p["hits"]) / 4 == p["acc"]
        assert sum(p["logps"]) / 4 == pytest.approx(p["logp"], rel=1e-6)
    ppl = get_task("perplexity")
    same = ppl.paired(r[0], r[0], "tail_ppl")
    assert (same.value, same.low, same.high) == (1.0, 1.0, 1.0)
    assert ppl.paired(r[1], r[0], "tail_ppl").value == pytest.approx(r[1]["tail_ppl"] / r[0]["tail_ppl"], rel=1e-9)
    acc = get_task("passkey").interval(k[0], "acc")
    assert acc.method == "Wilson" and acc.low <= k[0]["acc"] <= acc.high


def test_a_single_window_has_no_interval(tiny, stdlib_docs):
    model, tok = tiny
    with patch(model, TemperatureSpec()):
        r = get_task("perplexity").evaluate(model, tok, 300, [1.0], EvalContext(256, stdlib_docs, n_docs=1))[0]
    task = get_task("perplexity")
    assert task.interval(r, "tail_ppl") is None and task.describe(r, "tail_ppl").endswith("(no interval)")
    assert task.compare(r, r, "tail_ppl").startswith("no interval")


def test_a_single_file_text_is_evaluated_whole_or_halved_for_tuning(tmp_path):
    """One file: a sweep evaluates it whole; a tune takes the first half of it and scores its
    evidence on the second, so the tuner never sees the evidence's text."""
    from attntemp.evaluate.tasks import EvalOptions, eval_context, tuning_context

    text = "".join(f"line {i} of some text\n" for i in range(100))
    (tmp_path / "mine.txt").write_text(text)
    ctx = eval_context(EvalOptions(text=str(tmp_path / "mine.txt")), 256)
    assert [d.name for d in ctx.docs] == ["mine.txt"] and not ctx.tuning_docs
    with pytest.raises(ValueError, match="cannot be split into a tuning and an evaluation pool"):
        tuning_context(ctx)
    ctx = eval_context(EvalOptions(text=str(tmp_path / "mine.txt")), 256, tuning=True)
    tuner = tuning_context(ctx)
    assert [d.name for d in ctx.docs] == ["mine.txt#2"] and [d.name for d in tuner.docs] == ["mine.txt#1"]
    assert tuner.docs[0].text + ctx.docs[0].text == text and tuner.docs[0].text.endswith("\n")


def test_the_light_task_names_are_the_registrys():
    """TASK_NAMES (what configs and --help read without importing a task) is TASKS' keys, in order."""
    from attntemp.evaluate import task_base, tasks

    assert task_base.TASK_NAMES == tuple(tasks.TASKS)
