"""The shared-prefill case of ``advise_cost.py``: one advise race row of each way, side by side on the
same model, interleaved. Today's race scores a candidate at N twice: a ``key_tokens`` row (one window
of N tokens, the LM head at its key tokens and tail) and a ``multikey`` row (one haystack of ``k``
keys prefilled once, each question answered by ``generate`` from a copy of its cache); with
``--shared-prefill`` it scores one ``multikey_keys`` row, whose prefill also scores the haystack's
own key tokens (:class:`attntemp.evaluate.multikey.MultiKeyKeys`). Each row is timed as the race runs it (the
task's ``evaluate`` on a block of one window, windows and haystacks built inside), so the ratio is
the forward seconds a race saves per candidate and window; the answers must be multikey's."""

from __future__ import annotations

import time

from _harness import median_interval

from attntemp.evaluate.task_base import EvalContext
from attntemp.evaluate.tasks import get_task
from attntemp.hf.introspect import trained_length
from attntemp.hf.patch import patch
from attntemp.ops.spec import TemperatureSpec

ROWS = {"key_tokens": "key_tokens", "multikey": "multikey", "shared": "multikey_keys"}  # path: task


def shared_case(model, tok, docs, length: int, keys: int, repeats: int) -> dict:
    """One block of one window (and one haystack of ``keys`` keys) at ``length``, each row
    ``repeats`` times, interleaved; the shared row against the two it replaces, paired per repeat."""
    ctx = EvalContext(trained_length(model), docs, n_docs=1, needles_per_forward=keys, window_range=(0, 1))
    times: dict[str, list[float]] = {k: [] for k in ROWS}
    out: dict[str, dict] = {}
    with patch(model, TemperatureSpec()):
        for _ in range(repeats + 1):  # the first round warms up, untimed
            for path, task in ROWS.items():
                t0 = time.perf_counter()
                out[path] = get_task(task).evaluate(model, tok, length, [1.0], ctx)[0]
                times[path].append(time.perf_counter() - t0)
    per = [s / (k + m) for k, m, s in zip(*(times[p][1:] for p in ROWS), strict=True)]
    return {
        "case": "shared_prefill", "length": length, "keys_per_haystack": keys,
        "seconds_per_row": {p: median_interval(t[1:]) for p, t in times.items()},
        "shared_over_two_rows": median_interval(per),
        "key_tokens_per_row": {"key_tokens": out["key_tokens"]["key_tokens_total"],
                               "shared": out["shared"]["key_tokens_total"]},
        "same_answers": out["shared"]["key_hits"] == out["multikey"]["key_hits"],
        "found": sum(map(sum, out["shared"]["key_hits"])),
    }  # fmt: skip
