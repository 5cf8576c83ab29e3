"""Issue 62 item 2: every config attntemp ships audits in transformers (a proxy builds from each, and
``attntemp audit --config NAME --engines transformers`` never stops at exit 2 on one); DeepSeek-V4's
layer kinds each read their own RoPE; a model transformers has no causal LM of stops in one line
naming the config. The figures of every shipped row, by hand: tests/ship/test_audit.py; the command
line: tests/commands/test_audit_cli.py."""

from __future__ import annotations

import json
import math

import pytest

from attntemp.assets import tiny_path
from attntemp.hf import proxy
from attntemp.ops import geometry
from attntemp.ship.audit.run import AuditConfig, run_audit

CONFIGS = tiny_path().parent / "configs"  # src/attntemp/assets/configs
SHIPPED = sorted(p.stem for p in CONFIGS.glob("*.json"))
V4_RATIOS = [0, 0] + [4, 128] * 20 + [4]  # 43 layers: sliding only, then CSA and HCA by turns


def plain_inv(dim: int, base: float) -> list[float]:
    """RoPE (arXiv:2104.09864): base^(-2i/dim)."""
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def yarn_inv(dim: int, base: float, s: float, l0: int) -> list[float]:
    """YaRN (arXiv:2309.00071) NTK-by-parts, beta_fast 32 and beta_slow 1, bounds rounded outwards."""

    def dim_of(r: float) -> float:
        return dim * math.log(l0 / (2 * math.pi * r)) / (2 * math.log(base))

    low, high = max(math.floor(dim_of(32)), 0), min(math.ceil(dim_of(1)), dim - 1)
    ramps = (min(max((i - low) / (high - low), 0.0), 1.0) for i in range(dim // 2))
    return [inv / s * r + inv * (1 - r) for inv, r in zip(plain_inv(dim, base), ramps, strict=True)]


def close_all(xs: list[float], ys: list[float], rel: float = 1e-5) -> bool:
    return len(xs) == len(ys) and all(abs(a - b) <= rel * abs(b) for a, b in zip(xs, ys, strict=True))


def v4(tmp_path, **extra) -> str:
    config = {**json.loads((CONFIGS / "deepseek_v4.json").read_text()), **extra}
    (tmp_path / "v4.json").write_text(json.dumps(config))
    return str(tmp_path / "v4.json")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_builds_a_transformers_proxy(name):
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    model, keep = proxy.build_proxy(config)
    assert len(model.model.layers) == len(keep) >= 1


@pytest.mark.parametrize("extra", [{"compress_ratios": V4_RATIOS}, {"layer_types": [
    geometry.COMPRESS_RATIO_TYPES[r] for r in V4_RATIOS]}])  # fmt: skip
def test_deepseek_v4s_sliding_layers_keep_plain_rope_and_its_compressing_layers_the_yarn(tmp_path, extra):
    """DeepSeek-V4: plain RoPE at rope_theta on the sliding-only layers; YaRN at compress_rope_theta
    (default 160000) on the CSA and HCA ones, attention_factor 1 (m = 1 on all)."""
    result = run_audit(AuditConfig(config=v4(tmp_path, **extra), engines=("transformers",), positions=(0, 70000)))
    groups = {g["name"]: g for g in result.reference["groups"]}
    assert set(groups) == set(geometry.COMPRESS_RATIO_TYPES.values())
    assert close_all(groups["sliding_attention"]["inv_freq"], plain_inv(64, 10000.0))
    for kind in ("compressed_sparse_attention", "heavily_compressed_attention"):
        inv = groups[kind]["inv_freq"]
        assert close_all(inv if not isinstance(inv[0], list) else inv[0], yarn_inv(64, 160000.0, 16, 65536))
    assert all(g["logit_multiplier"] == pytest.approx(1.0) for g in groups.values())
    assert not result.differs and result.engines["transformers"]["verdict"] == "agrees"


def test_deepseek_v4s_compress_rope_theta_is_read_where_given(tmp_path):
    result = run_audit(AuditConfig(config=v4(tmp_path, compress_rope_theta=50000.0), engines=("transformers",)))
    inv = result.reference["inv_freq"]
    assert close_all(inv if not isinstance(inv[0], list) else inv[0], yarn_inv(64, 50000.0, 16, 65536))
    assert not result.differs


def test_deepseek_v4s_compress_ratios_outside_its_three_are_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"config.compress_ratios=.* is not allowed; expected a list of 0, 4, 128"):
        run_audit(AuditConfig(config=v4(tmp_path, compress_ratios=[2] * 43), engines=("transformers",)))


def test_a_model_type_transformers_has_no_causal_lm_of_stops_in_one_line_naming_the_config(tmp_path):
    config = {**json.loads((CONFIGS / "llama3_1.json").read_text()), "model_type": "llamaz"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"^config='.*c\.json': config\.model_type='llamaz' is not a causal LM"
    ) as info:
        run_audit(AuditConfig(config=str(tmp_path / "c.json"), engines=("transformers",)))
    assert "transformers 5." in str(info.value) and "did you mean 'llama'" in str(info.value)
    assert "\n" not in str(info.value)
