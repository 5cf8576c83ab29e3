"""advise's Python API refuses as its CLI does: both spellings of one argument, and a file in
``out`` that advise would read (an ``attention_<L>.json`` it did not write) before the model loads,
leaving nothing new in the folder."""

import pytest

from attntemp.advise import run
from attntemp.advise.config import AdviseConfig


def test_both_spellings_of_check_lengths_are_refused():
    with pytest.raises(ValueError, match=r"check_length=768 is not allowed with check_lengths=\(0,\)"):
        AdviseConfig(length=512, check_length=768, check_lengths=(0,))


def test_run_advise_refuses_a_foreign_attention_file_before_the_model_loads(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "attention_512.json").write_text("not json")
    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("the model loaded before the refusal"))
    with pytest.raises(ValueError, match=r"holds attention_512\.json, which is not advise's attention statistics"):
        run.run_advise(AdviseConfig(length=512, out=str(out), check_lengths=(), heldout_text="none"))
    assert sorted(p.name for p in out.iterdir()) == ["attention_512.json"]
