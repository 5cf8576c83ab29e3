"""scripts/head_learned.py on the tiny model (trained to 256) at 512: per-head multipliers trained
on key tokens, a run killed mid-way resumed from its checkpoint to the same spec as one that was
not, the table and figure set beside head_direction.py's gradients; no gradients refused."""

import json

import pytest
import torch
from script_loader import load_script

import attntemp


@pytest.fixture(scope="module")
def scripts():
    return load_script("head_direction"), load_script("head_learned")


def argv(tmp_path, out="out", steps=4):
    return ["--model", "tiny", "--length", "512", "--docs", "2", "--text", "stdlib", "--threads", "1",
            "--steps", str(steps), "--lr", "0.2", "--direction", str(tmp_path / "grads"), "--out", str(tmp_path / out),
            "--table", str(tmp_path / "t.md"), "--figure", str(tmp_path / "f.png")]  # fmt: skip


@pytest.fixture
def gradients(scripts, tmp_path):
    hd, _ = scripts
    model, tok = attntemp.load_model("tiny")
    args = hd.DirectionConfig(model="tiny", length=512, docs=2, text="stdlib", threads=1)
    ids, mask, rule = hd.windows(tok, 256, args)
    hd.run(model, ids, mask, rule, args, tmp_path / "grads", "window")
    return model


class Killed(Exception):
    pass


def test_a_killed_run_resumes_to_the_same_spec(scripts, gradients, tmp_path, capsys, monkeypatch):
    _, learned = scripts
    learned.main(argv(tmp_path, "whole"))
    whole = json.loads((tmp_path / "whole" / "learned_spec.json").read_text())
    train = learned.train_temperatures

    def killed_after_two(model, ids, opts, checkpoint, masks, callback):
        def cb(step, loss):
            callback(step, loss)
            if step == 2:
                raise Killed

        return train(model, ids, opts, checkpoint, masks, cb)

    monkeypatch.setattr(learned, "train_temperatures", killed_after_two)
    with pytest.raises(Killed):
        learned.main(argv(tmp_path))
    monkeypatch.setattr(learned, "train_temperatures", train)
    capsys.readouterr()
    learned.main(argv(tmp_path))
    out = capsys.readouterr().out
    assert "step 3 of 4" in out and "step 1 of 4" not in out  # resumed after step 2
    log = json.loads((tmp_path / "out" / "log.json").read_text())
    assert [r["step"] for r in log] == [1, 2, 3, 4] and [r["window"] for r in log] == [0, 1, 0, 1]
    spec = json.loads((tmp_path / "out" / "learned_spec.json").read_text())
    assert torch.allclose(torch.tensor(spec["heads"]), torch.tensor(whole["heads"]), rtol=1e-5)
    assert torch.tensor(spec["heads"]).log().abs().max() > 0.05  # it learned something at lr 0.2
    table = (tmp_path / "t.md").read_text()
    layers, heads = gradients.config.num_hidden_layers, gradients.config.num_attention_heads
    counts = [line.strip("| ").split(" | ")[1:] for line in table.splitlines() if line.startswith("| ")][2:]
    assert sum(int(x) for row in counts for x in row) <= layers * heads and "Spearman over heads" in table
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_without_the_gradients_it_is_refused(scripts, tmp_path):
    _, learned = scripts
    with pytest.raises(SystemExit, match=r"--direction=.* is not allowed"):
        learned.main(argv(tmp_path))
