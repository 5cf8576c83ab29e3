"""The multikey retrieval task: k keys per haystack prefilled once, each question asked from a copy
of its cache and answered by generate. It must equal asking each question after its own prefill
(the reference path), fit every branch within the length, leave the prefix cache as it was, and
pair two specs only on the same haystacks (intervals resample haystacks, not keys)."""

from dataclasses import replace

import pytest
import torch

from attntemp.evaluate import multikey
from attntemp.evaluate.lm import answer_and_generate, prefill
from attntemp.evaluate.task_base import EvalContext, get_task
from attntemp.evaluate.tasks import tuning_context  # noqa: F401 (registers the tasks)
from attntemp.hf.patch import batch_multipliers, patch
from attntemp.ops.rope.scalings import rope_at_scale
from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def ctx(stdlib_docs):
    return EvalContext(256, stdlib_docs, n_docs=3, needles_per_forward=3)


@pytest.mark.parametrize("rope", [None, "yarn"])
def test_the_shortcut_equals_one_prefill_per_question(tiny, ctx, rope):
    """Same answers, the same log-probabilities within float32 noise, with and without YaRN (a
    RoPE that does not depend on the forward's length)."""
    model, tok = tiny
    spec = TemperatureSpec(rope=rope_at_scale("yarn", 2.0, 256) if rope else None)
    h = multikey.haystacks(tok, 512, ctx)[0]
    with patch(model, spec), batch_multipliers(model, torch.tensor([1.0])):
        fast, slow = multikey.score_haystack(model, tok, h), multikey.score_one_by_one(model, tok, h)
    assert [f for f, _ in fast] == [f for f, _ in slow]
    assert [lp for _, lp in fast] == pytest.approx([lp for _, lp in slow], abs=1e-4)


def test_every_branch_fits_the_length_and_the_facts_sit_at_their_depths(tiny, ctx):
    _, tok = tiny
    for h in multikey.haystacks(tok, 512, ctx):
        longest = max(len(q) + len(a) for q, a in zip(h.questions, h.answers, strict=True))
        assert len(h.ids) + longest + multikey.SLACK <= 512
        assert h.depths == pytest.approx([1 / 6, 1 / 2, 5 / 6]) and len(set(h.keys)) == 3


def test_the_prefix_cache_is_left_as_it_was(tiny, ctx):
    """Two questions from one prefill: the second sees the haystack alone, not the first question."""
    model, tok = tiny
    h = multikey.haystacks(tok, 512, ctx)[0]
    with patch(model, TemperatureSpec()), batch_multipliers(model, torch.tensor([1.0])):
        cache, n = prefill(model, torch.tensor([h.ids]))
        before = cache.get_seq_length()
        q = torch.tensor([h.ids + h.questions[0]])
        a = torch.tensor([h.answers[0]])
        first = answer_and_generate(model, q, a, 3, (cache, n))
        again = answer_and_generate(model, q, a, 3, (cache, n))
    assert cache.get_seq_length() == before == n
    assert torch.equal(first[1], again[1]) and torch.allclose(first[0], again[0])


def test_keys_that_do_not_fit_are_refused_naming_the_flag(tiny, ctx):
    _, tok = tiny
    with pytest.raises(ValueError, match=r"retrieval_keys=8 does not fit in length=256"):
        multikey.haystacks(tok, 256, replace(ctx, needles_per_forward=8))


def test_intervals_resample_haystacks_and_pairs_need_the_same_ones(tiny, ctx):
    model, tok = tiny
    task = get_task("multikey")
    with patch(model, TemperatureSpec()):
        a, b = task.evaluate(model, tok, 512, [1.0, 0.9], ctx)
        other = task.evaluate(model, tok, 512, [1.0], replace(ctx, seed=5))[0]
    assert len(a["doc_acc"]) == a["documents"] == 3 and a["trials"] == 9
    assert a["acc"] == pytest.approx(sum(map(sum, a["key_hits"])) / 9)
    assert task.paired(a, b, "logp") is not None
    with pytest.raises(ValueError, match="different haystacks"):
        task.paired(a, other, "logp")
    merged = task.merge([a, a])
    assert merged["documents"] == 6 and merged["trials"] == 18
