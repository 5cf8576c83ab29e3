"""Key-token perplexity: the n-gram rule's exact positions on planted documents (against its loop
reference), the short-context scorer, LongPPL's evaluator rule and its cache, the task's intervals
and its refusal to pair different key tokens."""

import math
import pathlib
import random

import pytest
import torch

from attntemp.evaluate import key_tokens as kt
from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.lm import token_nll
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.hf.patch import patch
from attntemp.ops import intervals
from attntemp.ops.spec import TemperatureSpec


def planted(length: int, span: list[int], at: tuple[int, ...]) -> torch.Tensor:
    """Distinct filler ids (1000, 1001, ...) with ``span`` written at each position in ``at``."""
    ids = torch.arange(1000, 1000 + length)  # [L]: no n-gram of the filler repeats
    for p in at:
        ids[p : p + len(span)] = torch.tensor(span)
    return ids


def test_planted_key_tokens_exact_positions():
    span = list(range(10, 22))  # 12 tokens
    ids = planted(400, span, (20, 200))  # second copy 180 back: more than K = 100
    got = kt.key_positions(ids, 4, 100).nonzero().flatten().tolist()
    assert got == list(range(204, 212))  # its n-gram inside the span, its next token in the span too
    assert kt.key_positions(ids, 4, 180).nonzero().numel() == 0  # exactly K back is not more than K
    near = planted(400, span, (20, 200, 260))  # a third copy 60 after the second: its last occurrence is near
    assert near.shape == ids.shape
    assert kt.key_positions(near, 4, 100).nonzero().flatten().tolist() == list(range(204, 212))


def test_vectorised_rule_equals_loop_reference():
    rng = random.Random(0)
    for vocab, n, k in ((3, 2, 5), (4, 3, 20), (2, 6, 40), (50, 1, 3)):
        ids = [rng.randrange(vocab) for _ in range(500)]
        want = kt.key_positions_loop(ids, n, k)
        assert kt.key_positions(torch.tensor(ids), n, k).tolist() == want
        assert any(want) or vocab == 50  # the small vocabularies give key tokens to compare


def test_short_context_nll_sees_only_its_last_tokens(tiny):
    model, tok = tiny
    ids = heldout_windows(tok, 200, n=2)  # [2, 200]
    short = kt.short_context_nll(model, ids, 48, 16, batch_size=2)  # [2, 199]
    full = token_nll(model, ids).detach()
    assert short.shape == full.shape
    assert torch.allclose(short[:, :63], full[:, :63], atol=1e-4)  # the first window: every token before
    for t in (70, 130, 199):  # target t seen from the window starting at the last multiple of 16 <= t - 48
        a = (t - 48) // 16 * 16
        want = token_nll(model, ids[:, a : t + 1]).detach()[:, -1]
        assert torch.allclose(short[:, t - 1], want, atol=1e-4)


def test_task_key_ppl_and_intervals(tiny, stdlib_docs):
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=4, key_ngram=4)
    with patch(model, TemperatureSpec()):
        base, hot = get_task("key_tokens").evaluate(model, tok, 384, [1.0, 1.4], ctx)
    ids = heldout_windows(tok, 384, n=4, docs=stdlib_docs)
    mask = torch.stack([kt.key_positions(r, 4, 128)[1:] for r in ids])
    nll = token_nll(model, ids).detach().double()
    assert base["window_key_tokens"] == mask.sum(1).tolist() and base["key_tokens_total"] > 0
    assert base["key_ppl"] == pytest.approx(math.exp(float(nll[mask].mean())), rel=1e-5)
    assert "more than 128 tokens back" in base["rule"]
    task = get_task("key_tokens")
    ci = task.interval(base, "key_ppl")
    kept = [(a, t) for a, t in zip(base["window_key_nll"], base["window_key_tokens"], strict=True) if t]
    want = intervals.perplexity_interval([a for a, _ in kept], [t for _, t in kept])
    assert ci == want and ci.value == pytest.approx(base["key_ppl"])  # weighted by each window's count
    assert task.paired(base, base, "key_ppl").value == 1.0
    assert task.paired(hot, base, "key_tokens").value == 0.0  # one key set for every spec
    assert task.paired(hot, base, "key_ppl").value == pytest.approx(hot["key_ppl"] / base["key_ppl"])
    with pytest.raises(ValueError, match="key_digest differs"):
        task.paired(hot, {**base, "key_digest": "other"}, "key_ppl")


def test_evaluator_rule_cached_and_truncation_costs_key_tokens(tiny, stdlib_docs, tmp_path, monkeypatch):
    """LongPPL's rule with the tiny model as its own evaluator, K = 16: truncating each prediction
    to its last 16..19 tokens costs its key tokens more than e^alpha in perplexity (their defining
    gain) and all tokens far less; the second evaluation reads the cache, no evaluator loaded."""
    monkeypatch.setenv("ATTNTEMP_CACHE", str(tmp_path))
    model, tok = tiny
    ctx = EvalContext(256, stdlib_docs, n_docs=4, key_distance=16, key_evaluator="tiny")
    ids = heldout_windows(tok, 256, n=4, docs=stdlib_docs)
    mask, rule = kt.key_mask(ids, tok, ctx)
    assert "LongPPL" in rule and list(tmp_path.rglob("*.json"))
    monkeypatch.setattr(kt, "load_model", lambda *a, **k: pytest.fail("the cache was not read"))
    again, _ = kt.key_mask(ids, tok, ctx)
    assert torch.equal(mask, again) and int(mask.sum()) > 0
    full = token_nll(model, ids).detach().double()
    short = kt.short_context_nll(model, ids, 16, 4).double()
    key_ratio = math.exp(float((short - full)[mask].mean()))
    all_ratio = math.exp(float((short - full)[:, 16:].mean()))
    assert key_ratio > math.exp(2.0) and all_ratio < 1.5


@pytest.mark.slow
def test_smollm2_truncation_costs_key_tokens_more(one_torch_thread):
    """SmolLM2 at 4096 tokens on a Gutenberg book, n-gram rule (n = 4 BPE tokens, K = 1024): each prediction
    cut to its last 768..1023 tokens costs key tokens more than all tokens past K (paired ratios
    over 2 windows; the intervals must not overlap)."""
    from attntemp.hf.loading import load_model

    model, tok = load_model("smollm2")
    docs = gutenberg_book()
    ids = heldout_windows(tok, 4096, n=2, docs=docs)  # [2, 4096]
    mask = torch.stack([kt.key_positions(r, 4, 1024)[1:] for r in ids])  # [2, 4095]
    full = kt.token_nll_rows(model, ids, 1).double()
    short = kt.short_context_nll(model, ids, 768, 256, 1).double()
    counts = mask.sum(1)
    assert int(counts.min()) > 0
    key = intervals.paired_ratio_interval(
        (short * mask).sum(1).tolist(), (full * mask).sum(1).tolist(), counts.tolist()
    )
    tail = short[:, 1024:].sum(1).tolist(), full[:, 1024:].sum(1).tolist()
    every = intervals.paired_ratio_interval(*tail, [full.shape[1] - 1024] * 2)
    print(f"SmolLM2 4096, key {key.format()} ({int(counts.sum())} tokens), all {every.format()}")
    assert key.low > every.high


def gutenberg_book():
    """austen-emma from the shared Gutenberg folder, whole (a named text is all held out)."""
    from attntemp.evaluate import corpus

    folder = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "gutenberg"
    return corpus.load_text("gutenberg:austen-emma", gutenberg_dir=folder)
