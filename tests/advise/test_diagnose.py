"""advise's per-head diagnosis cache in --out: keyed by what made it, never read as another run's."""

from __future__ import annotations

import json

import pytest

from attntemp.advise.diagnose import window_attention_stats
from attntemp.evaluate import corpus
from attntemp.evaluate.task_base import EvalContext


@pytest.fixture(scope="module")
def contexts(stdlib_docs):
    other = corpus.load_text("package:markdown")
    return EvalContext(trained_length=256, docs=stdlib_docs), EvalContext(trained_length=256, docs=other)


def test_the_same_run_reads_its_cache_and_another_text_measures_again(tiny, contexts, tmp_path, one_torch_thread):
    model, tok = tiny
    first, other = contexts
    a = window_attention_stats(model, tok, first, 128, tmp_path, "weights-a")
    path = tmp_path / "attention_128.json"
    stamp = path.stat().st_mtime_ns
    again = window_attention_stats(model, tok, first, 128, tmp_path, "weights-a")
    assert path.stat().st_mtime_ns == stamp and (again.stats["norm_entropy"] == a.stats["norm_entropy"]).all()
    b = window_attention_stats(model, tok, other, 128, tmp_path, "weights-a")  # issue 54: was read as the first's
    assert not (b.stats["norm_entropy"] == a.stats["norm_entropy"]).all()
    assert json.loads(path.read_text())["meta"]["key"] == b.meta["key"] != a.meta["key"]
    c = window_attention_stats(model, tok, other, 128, tmp_path, "weights-b")  # other weights: measured again
    assert c.meta["key"] != b.meta["key"]


@pytest.mark.parametrize("text", ["{bad", '{"other": 1}', "[1, 2]"])
def test_a_file_that_is_not_attention_statistics_is_named_in_one_line(tiny, contexts, tmp_path, text):
    (tmp_path / "attention_128.json").write_text(text)
    with pytest.raises(ValueError, match=r"holds attention_128.json, which is not advise's attention statistics"):
        window_attention_stats(*tiny, contexts[0], 128, tmp_path, "weights-a")
    assert (tmp_path / "attention_128.json").read_text() == text  # left as it was
