"""scripts/distant_figure.py: a panel with nothing to draw says "not run yet" instead of an empty
0-to-1 axis; a panel with results draws them against the reference."""

import matplotlib.pyplot as plt
import pytest
from script_loader import load_script


@pytest.fixture(scope="module")
def figure():
    return load_script("distant_figure")


def _key_tokens(scale: float) -> dict:
    """A key-token result over 4 windows (what the task stores per window), NLLs times ``scale``."""
    keys, tail = [10, 12, 9, 11], [100, 100, 100, 100]
    key_nll, tail_nll = [5.0, 6.5, 4.0, 5.5], [300.0, 310.0, 290.0, 305.0]
    return {"key_digest": "k", "windows_digest": "w", "window_key_tokens": keys, "window_tail": tail,
            "window_key_nll": [v * scale * (1 + 0.01 * i) for i, v in enumerate(key_nll)],
            "window_tail_nll": [v * scale for v in tail_nll]}  # fmt: skip


def test_an_empty_panel_says_not_run_yet_and_a_full_one_draws(figure):
    soft = "no RoPE change, m = 0.9 on global layers (softer)"
    found = {49152: {figure.BASE: {"key_tokens": _key_tokens(1.0)}, soft: {"key_tokens": _key_tokens(1.02)},
                     "YaRN s = 1.5, m = 1": {}}}  # fmt: skip
    kinds = [figure.kind_by_name(soft)]
    fig, (full, needles, yarn) = plt.subplots(1, 3)
    try:
        assert figure._panel(full, "key_tokens", "key_ppl", kinds, found, figure.kind_by_name) == 1
        assert [t.get_text() for t in full.texts] == [] and full.get_xticks().size > 0
        assert figure._panel(needles, "needles", "acc", kinds, found, figure.kind_by_name) == 0
        yarn_kinds = [figure.kind_by_name("YaRN s = 1.5, m = 1")]
        assert figure._panel(yarn, "key_tokens", "key_ppl", yarn_kinds, found, figure.kind_by_name) == 0
        for ax in (needles, yarn):
            assert [t.get_text() for t in ax.texts] == ["not run yet"] and ax.get_xticks().size == 0
    finally:
        plt.close(fig)
