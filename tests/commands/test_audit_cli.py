"""``attntemp audit`` on the command line: --json, and exit 1 when an engine differs."""

from __future__ import annotations

import json

from attntemp.assets import tiny_path
from attntemp.cli import main

CONFIG = str(tiny_path().parent / "configs" / "qwen3_yarn.json")


def test_audit_json_agrees_and_exits_0(capsys):
    code = main(["audit", "--config", CONFIG, "--engines", "transformers", "--positions", "0,32768", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["engines"]["transformers"]["verdict"] == "agrees"
    assert set(out["reference"]) >= {"logit_multiplier", "positions", "inv_freq", "formula"}
    assert abs(out["reference"]["logit_multiplier"] - (0.1 * 1.3862943611198906 + 1) ** 2) < 1e-9  # ln 4


def test_audit_exits_1_when_transformers_drops_the_factor(capsys, monkeypatch):
    from transformers import modeling_rope_utils as mru

    original = mru.ROPE_INIT_FUNCTIONS["yarn"]
    monkeypatch.setitem(mru.ROPE_INIT_FUNCTIONS, "yarn", lambda config, *a, **k: (original(config, *a, **k)[0], 1.0))
    code = main(["audit", "--config", CONFIG, "--engines", "transformers", "--positions", "0"])
    text = capsys.readouterr().out
    assert (
        code == 1
        and "transformers (transformers 5." in text
        and ": differs: full_attention: logit multiplier x0.77" in text
    )


def test_a_shipped_config_is_named_by_its_name(capsys):
    import json

    from attntemp.assets import shipped_configs
    from attntemp.cli import main

    assert "gpt_oss" in shipped_configs() and len(shipped_configs()) == 17
    assert main(["audit", "--config", "qwen3_yarn", "--engines", "transformers", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert abs(out["reference"]["logit_multiplier"] - (0.1 * __import__("math").log(4) + 1) ** 2) < 1e-9
    assert main(["audit", "--config", "qwen3_yar", "--engines", "transformers"]) == 2
    assert "Did you mean 'qwen3_yarn'?" in capsys.readouterr().err


def test_every_shipped_config_audits_in_transformers_and_a_model_it_lacks_stops_in_one_line(capsys, tmp_path):
    """Issue 62 item 2: DeepSeek-V4 (layer types only its own) and Mistral 4 (its causal LM outside the
    causal LM auto mapping) stopped at exit 2; both agree now. A model_type transformers has no causal
    LM of stops in one line naming --config (every row's figures: tests/ship/test_audit.py)."""
    for name in ("deepseek_v4", "mistral4"):
        assert main(["audit", "--config", name, "--engines", "transformers", "--positions", "0,8192"]) == 0
        assert "agrees" in capsys.readouterr().out
    config = {**json.loads(open(CONFIG).read()), "model_type": "qwen3z"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    assert main(["audit", "--config", str(tmp_path / "c.json"), "--engines", "transformers"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attntemp audit: error: --config=") and "\n" not in err
    assert "config.model_type='qwen3z' is not a causal LM architecture transformers 5." in err
