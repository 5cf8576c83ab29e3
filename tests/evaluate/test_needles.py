"""Many needles per forward: the document holds every fact and question where it says, its
answers' scores equal a plain per-token computation, intervals resample documents."""

import pytest
import torch

from attntemp.evaluate import needles
from attntemp.evaluate.lm import position_scores, token_nll
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.hf.patch import patch
from attntemp.ops import intervals
from attntemp.ops.spec import TemperatureSpec


def test_document_layout(tiny, stdlib_docs):
    _, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=3, needles_per_forward=4)
    docs = needles.documents(tok, 1024, ctx)
    assert len(docs) == 3 and all(len(d.ids) == 1024 for d in docs)
    for d in docs:
        text = tok.decode(d.ids)
        assert text.count("\nThe special magic number for ") == 4  # the facts
        assert text.count("What is the special magic number for") == 4  # the questions
        assert d.depths == [0.125, 0.375, 0.625, 0.875]
        for cols in d.answers:  # each answer: digits, predicted where the question ends
            answer = tok.decode([d.ids[c + 1] for c in cols])
            assert answer.isdigit() and tok.decode(d.ids[cols[0] - 3 : cols[0] + 1]).endswith("is ")
    assert len({tuple(d.ids) for d in docs}) == 3


def test_too_many_needles_for_the_length(tiny, stdlib_docs):
    _, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=1, needles_per_forward=8)
    with pytest.raises(ValueError, match="needles_per_forward=8 does not fit in length=512"):
        needles.documents(tok, 512, ctx)
    assert needles.min_tokens(tok, 8) > 512 >= needles.min_tokens(tok, 2)


def test_position_scores_equal_token_nll(tiny):
    model, _ = tiny
    ids = torch.randint(0, 256, (2, 64))
    pos = torch.tensor([[3, 10, 62], [0, 5, 40]])
    nll, hit = position_scores(model, ids, pos)
    full = token_nll(model, ids).detach()
    assert torch.allclose(nll.detach(), full.gather(1, pos), atol=1e-5)
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.equal(hit, logits.argmax(-1).gather(1, pos) == ids.gather(1, pos + 1))


def test_task_scores_and_document_intervals(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=4, needles_per_forward=3, batch_size=3)
    with patch(model, TemperatureSpec()):
        base, hot = get_task("needles").evaluate(model, tok, 768, [1.0, 1.3], ctx)
    docs = needles.documents(tok, 768, ctx)
    ids = torch.tensor([d.ids for d in docs])
    nll = token_nll(model, ids).detach().double()
    want = [[-float(nll[i, cols].mean()) for cols in d.answers] for i, d in enumerate(docs)]
    got = [x for row in base["needle_logps"] for x in row]
    assert got == pytest.approx([x for row in want for x in row], abs=1e-4)
    assert len(base["doc_acc"]) == 4 and base["needles_per_forward"] == 3
    task = get_task("needles")
    assert task.interval(base, "logp") == intervals.mean_interval(base["doc_logp"])  # over documents
    assert task.paired(hot, base, "logp").value == pytest.approx(hot["logp"] - base["logp"])
    with pytest.raises(ValueError, match="different documents"):
        task.paired(hot, {**base, "documents_digest": "x"}, "acc")
    with patch(model, TemperatureSpec()):
        again = get_task("needles").evaluate(model, tok, 768, [1.0], ctx)[0]
    assert again["documents_digest"] == base["documents_digest"] and again["logp"] == pytest.approx(base["logp"])
