"""The shared prefill (``multikey_keys``): the multikey haystack's one prefill also scores its own
text's key tokens. Its NLL must equal key_tokens' path on the same ids and positions, its rule must
be key_tokens' n-gram rule with the facts taken out (their repeated template would make most of the
later facts key), and its retrieval must be multikey's, answer for answer."""

from dataclasses import replace

import pytest
import torch

from attntemp.evaluate import multikey
from attntemp.evaluate.key_tokens import key_positions
from attntemp.evaluate.lm import multiplier_nll, prefill, prefill_nll
from attntemp.evaluate.task_base import EvalContext, get_task
from attntemp.evaluate.tasks import tuning_context  # noqa: F401 (registers the tasks)
from attntemp.hf.patch import batch_multipliers, patch
from attntemp.ops.rope.scalings import rope_at_scale
from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def ctx(stdlib_docs):
    return EvalContext(256, stdlib_docs, n_docs=4, needles_per_forward=3)


@pytest.fixture(scope="module")
def both(tiny, ctx):
    """multikey and multikey_keys on the same haystacks, at m = 1 and 0.9, YaRN s = 2 patched on."""
    model, tok = tiny
    with patch(model, TemperatureSpec(rope=rope_at_scale("yarn", 2.0, 256))):
        plain = get_task("multikey").evaluate(model, tok, 512, [1.0, 0.9], ctx)
        shared = get_task("multikey_keys").evaluate(model, tok, 512, [1.0, 0.9], ctx)
    return plain, shared


def in_facts(h: multikey.Haystack) -> torch.Tensor:
    """``[P-1]`` the prediction columns whose target is a fact token."""
    cols = torch.zeros(len(h.ids) - 1, dtype=torch.bool)  # [P-1]
    for a, b in h.facts:
        cols[a - 1 : b - 1] = True
    return cols


def test_the_facts_spans_are_where_the_facts_are(tiny, ctx):
    _, tok = tiny
    for h in multikey.haystacks(tok, 512, ctx):
        assert len(h.facts) == 3
        for (a, b), key in zip(h.facts, h.keys, strict=True):
            assert str(key) in tok.decode(h.ids[a:b]) and "magic number" in tok.decode(h.ids[a:b])


def test_the_shared_nll_equals_key_tokens_path_on_the_same_ids(tiny, ctx, both):
    """Per haystack and multiplier: the summed NLL at the rule's positions from the prefill equals
    key_tokens' (``multiplier_nll`` with ``keep``, the LM head at the key positions) on the same ids."""
    model, tok = tiny
    _, shared = both
    docs = multikey.haystacks(tok, 512, ctx)
    with patch(model, TemperatureSpec(rope=rope_at_scale("yarn", 2.0, 256))):
        for j, h in enumerate(docs):
            mask = multikey.haystack_keys(h, ctx)  # [P-1]
            nll = multiplier_nll(model, torch.tensor([h.ids]), [1.0, 0.9], 1, keep=mask)  # [2, 1, P-1]
            ref = nll[:, 0, mask].double().sum(1)  # [2]
            got = torch.tensor([r["window_key_nll"][j] for r in shared], dtype=torch.float64)  # [2]
            assert got == pytest.approx(ref.tolist(), rel=1e-5, abs=1e-5)
            assert shared[0]["window_key_tokens"][j] == int(mask.sum())
    assert sum(shared[0]["window_key_tokens"]) > 0  # the comparison above compared something


def test_the_prefill_with_nll_is_the_prefill(tiny, ctx):
    """The cache :func:`prefill_nll` hands on is :func:`prefill`'s; unkept predictions are NaN."""
    model, tok = tiny
    h = multikey.haystacks(tok, 512, ctx)[0]
    ids = torch.tensor([h.ids])  # [1, P]
    keep = multikey.haystack_keys(h, ctx)  # [P-1]
    with patch(model, TemperatureSpec()), batch_multipliers(model, torch.tensor([1.0])):
        (cache, n), nll = prefill_nll(model, ids, keep)
        ref, m = prefill(model, ids)
    assert n == m == len(h.ids) and cache.get_seq_length() == ref.get_seq_length()
    for a, b in zip(cache.layers, ref.layers, strict=True):
        assert torch.allclose(a.keys, b.keys) and torch.allclose(a.values, b.values)
    assert nll[0, ~keep].isnan().all() and not nll[0, keep].isnan().any()


def test_no_fact_position_is_a_key_token(tiny, ctx, both):
    """The facts repeat one template more than K apart, so key_tokens' rule on the raw ids marks
    tokens of the later facts as key; the shared rule marks none there, nor within n after one, and
    the task counts the shared rule's tokens (it would count the raw ones if facts were counted)."""
    _, tok = tiny
    _, shared = both
    raw_in_facts = 0
    for j, h in enumerate(multikey.haystacks(tok, 512, ctx)):
        raw = key_positions(torch.tensor(h.ids), ctx.key_ngram, ctx.key_span)[1:]  # [P-1]
        own = multikey.haystack_keys(h, ctx)  # [P-1]
        near = in_facts(h).clone()
        for _, b in h.facts:  # a target whose n-gram runs through a fact
            near[b - 1 : b - 1 + ctx.key_ngram] = True
        raw_in_facts += int((raw & in_facts(h)).sum())
        assert not (own & near).any()
        assert shared[0]["window_key_tokens"][j] == int(own.sum()) < int(raw.sum())
    assert raw_in_facts > 0  # the raw rule does count fact tokens: the test above can fail


def test_retrieval_is_multikeys_and_pairs_need_the_same_key_tokens(tiny, ctx, both):
    plain, shared = both
    task = get_task("multikey_keys")
    for p, s in zip(plain, shared, strict=True):
        assert (p["key_hits"], p["key_logps"], p["documents_digest"]) == (
            s["key_hits"],
            s["key_logps"],
            s["documents_digest"],
        )
    assert task.objective == "key_ppl" and not task.higher_is_better("key_ppl") and task.higher_is_better("acc")
    assert task.paired(shared[1], shared[0], "key_ppl") is not None
    with pytest.raises(ValueError, match="different key tokens"):
        task.paired(shared[0], {**shared[1], "key_digest": "other"}, "key_ppl")
    merged = task.merge([shared[0], shared[0]])
    assert merged["documents"] == 8 and merged["key_tokens_total"] == 2 * shared[0]["key_tokens_total"]
    assert merged["key_ppl"] == pytest.approx(shared[0]["key_ppl"])


def test_an_evaluator_rule_is_refused(tiny, ctx):
    model, tok = tiny
    with patch(model, TemperatureSpec()), pytest.raises(ValueError, match="key_evaluator='tiny' is not allowed"):
        get_task("multikey_keys").evaluate(model, tok, 512, [1.0], replace(ctx, key_evaluator="tiny"))
