"""scripts/head_direction.py on the tiny model (trained to 256) at 512: a gradient per window,
resumed from its files, the table and figure beside the diagnosis; a missing diagnosis refused."""

import json

import pytest
import torch
from script_loader import load_script

import attntemp
from attntemp.analysis.measure import measure
from attntemp.evaluate import corpus
from attntemp.ops.spec import TemperatureSpec


@pytest.fixture(scope="module")
def script():
    return load_script("head_direction")


def diagnosis(folder, tok, model):
    for n in (256, 512):
        ids = corpus.heldout_windows(tok, n, n=1, docs=corpus.load_text("stdlib"))  # [1, n]
        with torch.no_grad():
            measure(model, ids, TemperatureSpec(), progress=False).save(folder / f"attention_{n}.json")


def argv(tmp_path):
    return ["--model", "tiny", "--length", "512", "--docs", "2", "--text", "stdlib", "--threads", "1",
            "--diagnosis", str(tmp_path / "diag"), "--out", str(tmp_path / "out"),
            "--table", str(tmp_path / "t.md"), "--figure", str(tmp_path / "f.png")]  # fmt: skip


def test_gradients_per_window_resume_and_the_table_counts_every_head(script, tmp_path, capsys):
    model, tok = attntemp.load_model("tiny")
    (tmp_path / "diag").mkdir()
    diagnosis(tmp_path / "diag", tok, model)
    script.main(argv(tmp_path))
    made = capsys.readouterr().out
    assert made.count("key tokens, key NLL") == 4 and made.count("control ") == 2  # each window, and at L0
    rows = [json.loads((tmp_path / "out" / f"window_{i}.json").read_text()) for i in (0, 1)]
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert all(len(r["gradient"]) == layers and len(r["gradient"][0]) == heads and r["key_tokens"] > 0 for r in rows)
    table = (tmp_path / "t.md").read_text()
    all_heads = next(line for line in table.splitlines() if line.startswith("| all, at 512 |"))
    assert sum(int(x) for x in all_heads.strip("| ").split(" | ")[1:]) == layers * heads
    assert "Spearman over heads" in table and "| at 512 | " in table and (tmp_path / "f.png").stat().st_size > 10_000
    at_l0 = next(line for line in table.splitlines() if line.startswith("| all, at 256 (the same windows'"))
    assert sum(int(x) for x in at_l0.split(") | ")[1].strip(" |").split(" | ")) == layers * heads
    assert "| all, what the length adds: at 512 minus at 256, paired (2 windows) |" in table
    control = json.loads((tmp_path / "out" / "control_0.json").read_text())
    assert control["length"] == 256 and 0 < control["key_tokens"] <= rows[0]["key_tokens"]
    script.main(argv(tmp_path))  # resumed: nothing recomputed
    assert "key tokens, key NLL" not in capsys.readouterr().out
    first = tmp_path / "out" / "window_0.json"
    first.write_text(json.dumps({**rows[0], "windows_digest": "another"}))  # as if made on other text
    with pytest.raises(SystemExit, match=r"--out=.*window_0\.json made on another window"):
        script.main(argv(tmp_path))


def test_a_diagnosis_folder_without_the_attention_files_is_refused(script, tmp_path):
    (tmp_path / "diag").mkdir()
    with pytest.raises(SystemExit, match="--diagnosis="):
        script.main(argv(tmp_path))
