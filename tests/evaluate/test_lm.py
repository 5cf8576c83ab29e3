"""Greedy decoding and prompt scoring: the LM head runs on the prompt's last position only, and
the one-forward scoring equals the two-forward one it replaced."""

import torch

from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.lm import answer_and_generate, answer_and_greedy, greedy, token_nll
from attntemp.hf.patch import batch_multipliers, patch
from attntemp.ops.spec import TemperatureSpec


def _head_inputs(model):
    """The LM head's input shapes, recorded by a forward hook, and the hook's handle."""
    seen: list[tuple[int, ...]] = []
    handle = model.get_output_embeddings().register_forward_hook(lambda mod, args, out: seen.append(args[0].shape))
    return seen, handle


def _plain_greedy(model, ids, new_tokens):
    """Greedy without a cache: the full sequence each step, the last position's argmax."""
    for _ in range(new_tokens):
        nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)  # [b, 1]
        ids = torch.cat([ids, nxt], 1)
    return ids[:, -new_tokens:]


def test_greedy_runs_the_head_on_the_last_prompt_position(tiny, stdlib_docs):
    model, tok = tiny
    ids = heldout_windows(tok, 300, n=2, docs=stdlib_docs)  # [2, 300]
    seen, handle = _head_inputs(model)
    try:
        out = greedy(model, ids, 4)
    finally:
        handle.remove()
    assert seen[0] == (2, 1, model.config.hidden_size)  # not [2, 300, d]: no [b, n, V] logits
    assert all(s[1] == 1 for s in seen) and len(seen) == 4
    assert torch.equal(out, _plain_greedy(model, ids, 4))


def test_answer_and_greedy_equals_separate_scoring(tiny, stdlib_docs):
    model, tok = tiny
    ids = heldout_windows(tok, 200, n=2, docs=stdlib_docs).repeat(2, 1)  # [4, 200]
    m = torch.tensor([1.0, 1.0, 0.7, 1.4])  # one multiplier per row, as the tasks batch them
    prompt, answer = ids[:, :194], ids[:, 194:]  # [4, 194], [4, 6]
    with patch(model, TemperatureSpec()), batch_multipliers(model, m):
        seen, handle = _head_inputs(model)
        try:
            lp, gen = answer_and_greedy(model, prompt, answer, 5)
        finally:
            handle.remove()
        want_lp = -token_nll(model, ids, start=193).mean(-1)  # [4]
        want_gen = _plain_greedy(model, prompt, 5)
    assert seen[0][1] == 1  # the prompt's forward: its last position only
    torch.testing.assert_close(lp, want_lp, atol=1e-4, rtol=1e-5)
    assert torch.equal(gen, want_gen)
    assert not torch.allclose(lp[2], lp[0])  # the multipliers reached the rows


def test_kept_predictions_equal_the_full_pass_and_the_head_sees_only_them(tiny, stdlib_docs):
    model, tok = tiny
    ids = heldout_windows(tok, 300, n=2, docs=stdlib_docs)  # [2, 300]
    keep = torch.zeros(299, dtype=torch.bool)  # [L-1]
    keep[[3, 40, 41, 150]] = True
    keep[250:] = True
    with torch.no_grad():
        full = token_nll(model, ids, start=2)  # [2, 297]
        seen, handle = _head_inputs(model)
        try:
            kept = token_nll(model, ids, start=2, chunk=16, keep=keep)  # [2, 297]
        finally:
            handle.remove()
    cols = keep[2:]  # [297]
    torch.testing.assert_close(kept[:, cols], full[:, cols], atol=1e-5, rtol=1e-5)
    assert kept[:, ~cols].isnan().all()  # a metric reading a prediction it did not keep gets NaN
    assert sum(s[1] for s in seen) == int(cols.sum())  # the head ran on the kept positions only
    assert max(s[1] for s in seen) == 16


def _generate_vs_reference(model, prompt, answer, m, spec):
    with patch(model, spec), batch_multipliers(model, m):
        lp, gen = answer_and_generate(model, prompt, answer, 5)
        want_lp, want_gen = answer_and_greedy(model, prompt, answer, 5)
    return lp, gen, want_lp, want_gen


def test_generate_path_equals_the_reference_greedy_path(tiny, stdlib_docs):
    """The user's way (one prefill, then transformers' generate) against attntemp's own greedy loop:
    per-row multipliers and a schedule by absolute position (past L0 = 256) reach every decode step."""
    model, tok = tiny
    ids = heldout_windows(tok, 330, n=2, docs=stdlib_docs).repeat(2, 1)  # [4, 330]
    m = torch.tensor([1.0, 1.0, 0.6, 1.5])  # one multiplier per row
    prompt, answer = ids[:, :324], ids[:, 324:]  # [4, 324], [4, 6]: decoding past the trained length
    gated = TemperatureSpec(schedule="logn", schedule_params={"trained_len": 256})
    for spec in (TemperatureSpec(), gated):
        lp, gen, want_lp, want_gen = _generate_vs_reference(model, prompt, answer, m, spec)
        torch.testing.assert_close(lp, want_lp, atol=1e-4, rtol=1e-5)
        assert torch.equal(gen, want_gen[:, : gen.shape[1]]) and gen.shape[1] >= 1
    assert not torch.allclose(lp[2], lp[0])  # the multipliers reached the rows


def test_generate_path_refuses_a_one_token_prompt(tiny):
    model, _ = tiny
    one = torch.tensor([[5]])
    try:
        answer_and_generate(model, one, one, 2)
    except ValueError as exc:
        assert "prompt has 1 tokens" in str(exc)
    else:
        raise AssertionError("a one-token prompt was accepted")
