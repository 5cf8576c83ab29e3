"""Evaluation tasks: registry, metric directions, batched multipliers equal separate runs."""

import math

import pytest
import torch

import attntemp
from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.lm import perplexity
from attntemp.evaluate.tasks import TASKS, EvalContext, get_task, needle_prompt, tail_start


def test_registry_declares_directions():
    assert set(TASKS) == {"perplexity", "passkey", "needle"}
    assert not get_task("perplexity").higher_is_better("tail_ppl")
    assert get_task("passkey").higher_is_better("acc") and get_task("needle").higher_is_better("logp")
    with pytest.raises(ValueError, match="Did you mean 'passkey'"):
        get_task("paskey")


def test_perplexity_matches_plain_computation(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=2)
    with attntemp.patch(model, attntemp.TemperatureSpec()):
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
    with attntemp.patch(model, attntemp.TemperatureSpec()):
        batched = get_task(task).evaluate(model, tok, 384, ms, ctx)
        alone = [get_task(task).evaluate(model, tok, 384, [m], ctx)[0] for m in ms]
    for b, a in zip(batched, alone, strict=True):
        for key in ("ppl", "tail_ppl", "acc", "logp"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key
    assert batched[0] != batched[2]  # the multiplier does something


def test_passkey_and_needle_metrics_are_in_range(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=2, trials=2, depths=(0.0, 1.0))
    with attntemp.patch(model, attntemp.TemperatureSpec()):
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
