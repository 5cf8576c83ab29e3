"""`attntemp tune --method gradient --rope-factors learn` on the shipped tiny model (small sizes)."""

import json

import torch

import attntemp
from attntemp.cli import main
from attntemp.ops.spec import TemperatureSpec


def test_tune_learns_rope_factors_and_writes_a_longrope_spec(tiny, tmp_path, capsys):
    out = tmp_path / "rf"
    flags = "--length 384 --rope yarn --method gradient --rope-factors learn --rope-temperature none --steps 3"
    args = ["tune", *flags.split(), *"--tasks perplexity --docs 1 --check-lengths 256 --threads 1".split()]
    args += ["--out", str(out)]
    assert main(args) == 0
    spec = TemperatureSpec.load(out / "spec.json")
    rope = dict(spec.rope)
    assert rope["rope_type"] == "longrope" and len(rope["long_factor"]) == 8  # head_dim 16 / 2
    assert rope["short_factor"] == (1.0,) * 8 and rope["attention_factor"] == 1.0
    assert rope["original_max_position_embeddings"] == 256 and rope["factor"] == 1.5
    assert min(rope["long_factor"]) >= 1.0 and spec.is_identity  # no temperature learned
    start = json.loads((out / "train_log.json").read_text())["state"]["rope_factors.log_factor"]
    assert len(start) == 8
    evidence = json.loads((out / "evidence.json").read_text())
    assert evidence["info"]["rope_factors"] == "learn" and "256" in evidence["checks"]
    model = tiny[0]
    ids = torch.randint(0, 256, (1, 256), generator=torch.Generator().manual_seed(2))  # [1, 256] = L0
    with torch.no_grad():
        plain = model(ids).logits
        with attntemp.patch(model, spec):
            assert torch.equal(model(ids).logits, plain)  # nothing changes within the trained length
    assert "| tuned |" in capsys.readouterr().out


def test_tune_learns_rope_factors_jointly_with_a_per_head_temperature(tmp_path):
    out = tmp_path / "joint"
    flags = "--length 384 --rope linear --method gradient --rope-factors learn --granularity head --steps 2"
    args = ["tune", *flags.split(), *"--tasks perplexity --docs 1 --threads 1".split()]
    args += ["--check-lengths", "", "--out", str(out)]
    assert main(args) == 0
    spec = TemperatureSpec.load(out / "spec.json")
    assert dict(spec.rope)["rope_type"] == "longrope" and len(spec.heads) == 4 and not spec.is_identity
