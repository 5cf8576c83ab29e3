"""Temperature schedules give the multiplier m = 1/T; the YaRN table is printed and checked."""

import math

import pytest
import torch

from attntemp.ops import schedules as S
from attntemp.ops.spec import TemperatureSpec

POS = torch.arange(0, 20000, 997)
NK = POS + 1

# t = 0.1 ln s + 1 for s = 2..128 (rounded to 4 places), and sqrt(t)
YARN_T = {2: 1.0693, 4: 1.1386, 8: 1.2079, 16: 1.2773, 32: 1.3466, 64: 1.4159, 128: 1.4852}
YARN_SQRT_T = {2: 1.0341, 128: 1.2187}


def test_yarn_table(capsys):
    for s, t in YARN_T.items():
        print(f"s={s:4d} t={S.yarn_mscale(s):.4f} sqrt(t)={math.sqrt(S.yarn_mscale(s)):.4f}")
        assert round(S.yarn_mscale(s), 4) == t
        assert S.yarn_multiplier(s) == pytest.approx(S.yarn_mscale(s) ** 2)
    for s, r in YARN_SQRT_T.items():
        assert round(S.yarn_sqrt_multiplier(s), 4) == r
    out = capsys.readouterr().out
    assert "t=1.1386" in out and "sqrt(t)=1.2187" in out


def test_yarn_schedule_is_squared_factor_not_sqrt():
    m = S.Yarn(4)(0, 9, POS, NK)
    assert float(m.flatten()[0]) == pytest.approx(1.1386294**2, rel=1e-6)  # 1.2965
    assert float(S.YarnSqrt(4)(0, 9, POS, NK).flatten()[0]) == pytest.approx(1.0670658, rel=1e-6)
    assert S.Yarn(1)(0, 1, POS, NK).item() == 1.0


def test_constant_per_layer_per_head_shapes():
    # per-layer and per-head multipliers have one representation: TemperatureSpec's layers / heads
    assert S.Constant(1.3)(0, 4, POS, NK).shape == (1, 1)
    assert TemperatureSpec(layers=(1.0, 2.0)).static_multipliers(1, 4).tolist() == [2.0] * 4
    ph = TemperatureSpec.per_head(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    assert ph.static_multipliers(1, 3).flatten().tolist() == [4.0, 5.0, 6.0]
    with pytest.raises(ValueError, match="3 values; the model has 4 heads"):
        ph.check_model(2, 4)


def test_logn_matches_qwen():
    m = S.LogN(1024)(0, 1, torch.tensor([0, 1022, 1023, 1024, 4095]), None).flatten()
    # 1-indexed positions 1, 1023, 1024 -> 1 ; 1025 -> log_1024(1025) ; 4096 -> log_1024(4096) = 1.2
    assert m[:3].tolist() == [1.0, 1.0, 1.0]
    assert float(m[3]) == pytest.approx(math.log(1025) / math.log(1024))
    assert float(m[4]) == pytest.approx(1.2)


def test_llama4_formula():
    pos = torch.tensor([0, 8190, 8191, 16383, 100000])
    m = S.Llama4()(0, 1, pos, None).flatten()
    expect = [1 + 0.1 * math.log1p(math.floor((p + 1) / 8192)) for p in pos.tolist()]
    assert m.tolist() == pytest.approx(expect)
    assert m[1] == 1.0 and m[2] > 1.0


def test_ssmax_formula():
    n = torch.tensor([1, 2, 100, 10000])
    m = S.SSMax(0.4)(0, 1, None, n).flatten()
    assert m[1:].tolist() == pytest.approx([0.4 * math.log(v) for v in (2, 100, 10000)], rel=1e-6)
    assert m[0] > 0


def test_position_dependence_flags():
    assert not S.Yarn(4).position_dependent and not TemperatureSpec.per_head([[1.0]]).position_dependent
    assert S.LogN(10).position_dependent and S.Llama4().position_dependent
    assert S.SSMax().position_dependent


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: S.Constant(0), "multiplier=0"),
        (lambda: S.Constant(float("nan")), "multiplier=nan"),
        (lambda: TemperatureSpec(layers=(1.0, -2.0)), r"layers\[1\]=-2.0"),
        (lambda: S.Yarn(0.5), "s=0.5"),
        (lambda: S.LogN(1), "trained_len=1"),
        (lambda: S.Llama4(floor_scale=0), "floor_scale=0"),
        (lambda: S.SSMax(-1), "s=-1"),
    ],
)
def test_bad_values(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_log_length_is_a_power_law_past_the_trained_length():
    n = torch.tensor([1, 256, 512, 1024])
    m = S.LogLength(256, a=0.1, b=0.5)(0, 1, None, n).flatten()
    expect = [math.exp(0.1 + 0.5 * math.log(max(1.0, v / 256))) for v in n.tolist()]
    assert m.tolist() == pytest.approx(expect, rel=1e-6) and m[0] == m[1]  # constant e^a up to L0
    per_head = S.LogLength(256, a=0.0, b=[[0.0, 1.0], [2.0, -1.0]])
    assert per_head(1, 2, None, n).shape == (2, 4)
    assert per_head(1, 2, None, n)[:, 3].tolist() == pytest.approx([16.0, 0.25])  # (1024/256)^b, b = 2, -1
    assert per_head(0, 2, None, n)[:, :2].tolist() == [[1.0, 1.0], [1.0, 1.0]]  # a = 0: nothing below L0


def test_log_length_in_a_spec_round_trips_and_checks_the_model():
    b = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    spec = TemperatureSpec(schedule="log_length", schedule_params={"trained_len": 64, "a": [0.0, 0.1], "b": b})
    assert spec.position_dependent and TemperatureSpec.from_json(spec.to_json()) == spec
    assert spec.to_dict()["schedule_params"]["b"] == b
    spec.check_model(2, 3)
    with pytest.raises(ValueError, match=r"b has shape \[2, 3\]; the model has 2 layers of 4 heads"):
        spec.check_model(2, 4)
    with pytest.raises(ValueError, match=r"a='x' is not allowed"):
        TemperatureSpec(schedule="log_length", schedule_params={"trained_len": 64, "a": "x"})


def test_sqrt_logn_is_one_up_to_the_trained_length_then_sqrt_of_log_ratio():
    n = torch.tensor([1, 1024, 1025, 4096])
    m = S.SqrtLogN(1024)(0, 1, n - 1, n).flatten()  # 0-indexed positions, 1-indexed p = n
    assert m[:2].tolist() == [1.0, 1.0]
    assert m[2:].tolist() == pytest.approx([math.sqrt(math.log(1025) / math.log(1024)), math.sqrt(1.2)], rel=1e-6)
    assert S.SqrtLogN(8).position_dependent


def test_gated_constant_is_one_up_to_the_trained_length_then_the_constant():
    n = torch.tensor([1, 8191, 8192, 8193, 24576])
    m = S.GatedConstant(8192, 0.8)(0, 3, n - 1, n)
    assert m.shape == (1, 5) and m.dtype == torch.float32
    assert m.flatten().tolist() == pytest.approx([1.0, 1.0, 1.0, 0.8, 0.8])
    spec = TemperatureSpec(schedule="gated_constant", schedule_params={"trained_len": 8192, "multiplier": 1.25})
    assert spec.position_dependent and not spec.is_identity and TemperatureSpec.from_json(spec.to_json()) == spec
    assert spec.multipliers(0, 2, n - 1, n)[:, 2:].tolist() == [[1.0, 1.25, 1.25]] * 2  # [H, Lq], exact
    with pytest.raises(ValueError, match="multiplier=0"):
        TemperatureSpec(schedule="gated_constant", schedule_params={"trained_len": 8192, "multiplier": 0})


def test_the_concepts_page_lists_every_schedule_as_the_registry_builds_it():
    """docs/concepts.md's schedule table is the registry: each name, its class and its defaults."""
    import inspect
    import re
    from pathlib import Path

    from attntemp.ops.schedules import SCHEDULES

    page = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+\([^`]*\))` \|$", page, re.M))
    want = {}
    for name, cls in SCHEDULES.items():
        args = ", ".join(f"{p.name}={p.default!r}" for p in inspect.signature(cls).parameters.values())
        want[name] = f"{cls.__name__}({args})"
    assert rows == want
