"""TemperatureSpec: validation, multipliers, JSON round trip."""

import json
import math

import pytest
import torch

from attntemp.ops.spec import TemperatureSpec


def test_json_round_trip(tmp_path):
    spec = TemperatureSpec(
        multiplier=1.1,
        layers=(1.0, 1.2),
        heads=((1, 2), (3, 4)),
        schedule="logn",
        schedule_params={"trained_len": 64},
        rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    )
    path = spec.save(tmp_path / "s.json")
    back = TemperatureSpec.load(path)
    assert back == spec and json.loads(path.read_text())["format"] == "attntemp.TemperatureSpec/1"
    assert TemperatureSpec.from_json(spec.to_json()).to_dict() == spec.to_dict()


def test_multipliers_compose():
    spec = TemperatureSpec(multiplier=2.0, layers=(1.0, 3.0), heads=((1, 1), (0.5, 0.25)))
    m = spec.multipliers(1, 2, torch.arange(5), torch.arange(5) + 1)
    assert m.shape == (2, 1) and m.flatten().tolist() == [3.0, 1.5]
    logn = TemperatureSpec(heads=((1, 2),), schedule="logn", schedule_params={"trained_len": 4})
    m = logn.multipliers(0, 2, torch.tensor([[0, 7]]), torch.tensor([[1, 8]]))
    assert m.shape == (1, 2, 2)
    assert m[0, :, 1].tolist() == pytest.approx([math.log(8) / math.log(4), 2 * math.log(8) / math.log(4)])


def test_identity_and_position_flags():
    assert TemperatureSpec().is_identity
    assert not TemperatureSpec(multiplier=1.01).is_identity
    assert not TemperatureSpec(schedule="yarn", schedule_params={"s": 4}).is_identity
    assert TemperatureSpec(schedule="yarn", schedule_params={"s": 1}).is_identity
    assert TemperatureSpec(schedule="ssmax").position_dependent


def test_yarn_builder_moves_the_factor_to_the_logits():
    spec = TemperatureSpec.yarn(4, 256)
    assert dict(spec.rope)["attention_factor"] == 1.0
    assert float(spec.static_multipliers(0, 1)) == pytest.approx(1.1386294**2, rel=1e-6)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(multiplier=0), "multiplier=0"),
        (dict(heads=((1.0, -1.0),)), r"heads\[0\]\[1\]=-1.0"),
        (dict(layers=(float("nan"),)), r"layers\[0\]=nan"),
        (dict(schedule="yarnn"), "Did you mean 'yarn'"),
        (dict(schedule="logn", schedule_params={"bogus": 1}), "schedule_params"),
        (dict(rope={"rope_type": "lineer"}), "Did you mean 'linear'"),
        # issue 54: m outside [1e-3, 1e3], a factor past the audit's cap, what transformers refuses at load
        (dict(multiplier=1e5), r"multiplier=100000.0 is not allowed; expected a number in \[0.001, 1000\]"),
        (dict(heads=((1.0, 1e-5),)), r"heads\[0\]\[1\]=1e-05 is not allowed"),
        (dict(rope={"rope_type": "yarn", "factor": 1e9}), r"rope.factor=1000000000.0 is not allowed; .* \[1, 10000\]"),
        (dict(rope={"rope_type": "llama3", "factor": 4.0}), "rope has no 'low_freq_factor' for 'llama3'"),
        (
            dict(rope={"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0], "long_factor": [1.0, 2.0]}),
            "rope.short_factor has 1 values and rope.long_factor 2",
        ),
        (
            dict(rope={"rope_type": "longrope", "factor": 4.0, "short_factor": [], "long_factor": []}),
            r"rope\.short_factor=\(\) is not allowed",
        ),
    ],
)
def test_bad_specs(kw, match):
    with pytest.raises(ValueError, match=match):
        TemperatureSpec(**kw)


def test_a_longropes_factor_lists_hold_one_value_per_frequency_pair_of_the_model():
    spec = TemperatureSpec(
        rope={"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0] * 3, "long_factor": [2.0] * 3}
    )
    spec.check_rotary(6)
    spec.check_rotary(None)  # the model's dimension not known: nothing to check
    TemperatureSpec(multiplier=1.2).check_rotary(64)
    with pytest.raises(ValueError, match=r"rope\.short_factor has 3 values; expected 32, one per frequency pair"):
        spec.check_rotary(64)


def test_check_model_and_bad_json(tmp_path):
    with pytest.raises(ValueError, match="heads has 1 rows; the model has 2 layers"):
        TemperatureSpec(heads=((1.0,),)).check_model(2, 1)
    with pytest.raises(ValueError, match=r"heads\[0\] has 1 values; the model has 3 heads"):
        TemperatureSpec(heads=((1.0,),)).check_model(1, 3)
    with pytest.raises(ValueError, match="not valid JSON"):
        TemperatureSpec.from_json("{")
    with pytest.raises(ValueError, match="unknown field"):
        TemperatureSpec.from_json('{"temperature": 2}')
    with pytest.raises(FileNotFoundError):
        TemperatureSpec.load(tmp_path / "missing.json")
