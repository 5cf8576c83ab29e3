"""The retrieval case of ``advise_cost.py``: trials by generation per second of forward time, today's
way (one prefill of the whole prompt per trial, as a passkey prompt is asked) against the new one
(one prefill per haystack of ``k`` keys, each question asked from a copy of its KV cache:
:mod:`attntemp.evaluate.multikey`), side by side on the same haystack, the same questions and the
same model, interleaved. Also whether the two give the same answers (the shortcut's check)."""

from __future__ import annotations

import time
from dataclasses import replace

import torch
from _harness import median_interval

from attntemp.evaluate import multikey
from attntemp.evaluate.task_base import EvalContext
from attntemp.hf.introspect import trained_length
from attntemp.hf.patch import batch_multipliers, patch
from attntemp.ops.spec import TemperatureSpec

GOAL_RETRIEVAL = 8.0  # issue 60: trials per second at least 8x today's, on SmolLM2 at 8192 or more


def retrieval_case(model, tok, docs, length: int, keys: int, repeats: int) -> dict:
    """One haystack of ``keys`` keys at ``length``, timed both ways ``repeats`` times (interleaved)."""
    ctx = replace(EvalContext(trained_length(model), docs, n_docs=1), needles_per_forward=keys)
    (h,) = multikey.haystacks(tok, length, ctx)
    ways = {"one_prefill_per_trial": multikey.score_one_by_one, "one_prefill_per_haystack": multikey.score_haystack}
    times: dict[str, list[float]] = {k: [] for k in ways}
    answers: dict[str, list[tuple[float, float]]] = {}
    with patch(model, TemperatureSpec()), batch_multipliers(model, torch.tensor([1.0])):
        for _ in range(repeats):
            for k, fn in ways.items():
                t0 = time.perf_counter()
                answers[k] = fn(model, tok, h)
                times[k].append(time.perf_counter() - t0)
    old, new = answers["one_prefill_per_trial"], answers["one_prefill_per_haystack"]
    speedup = [o / n for o, n in zip(times["one_prefill_per_trial"], times["one_prefill_per_haystack"], strict=True)]
    ratio = median_interval(speedup)
    return {
        "case": "retrieval", "length": length, "keys_per_haystack": keys, "prefix_tokens": len(h.ids),
        "seconds_per_haystack": {k: median_interval(v) for k, v in times.items()},
        "trials_per_second": {k: keys / median_interval(v)["median"] for k, v in times.items()},
        "new_over_old_trials_per_second": ratio,
        "found": {"one_prefill_per_trial": sum(f for f, _ in old), "one_prefill_per_haystack": sum(f for f, _ in new)},
        "same_answers": sum(a[0] == b[0] for a, b in zip(old, new, strict=True)),
        "max_abs_logp_diff": max(abs(a[1] - b[1]) for a, b in zip(old, new, strict=True)),
        "goal": {"trials_per_second_ge_8x": ratio["median"] >= GOAL_RETRIEVAL},
    }  # fmt: skip
