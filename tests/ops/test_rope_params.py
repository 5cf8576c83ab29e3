"""The typed RoPE extension (:class:`attntemp.ops.rope.params.Rope`): each kind's keys named and
checked, its frequencies and cos/sin factor the registry's functions', the mapping it reads as,
and TemperatureSpec holding it."""

import copy
import inspect
import math
import pickle

import pytest
import torch

from attntemp.ops import rope as rope_math
from attntemp.ops.rope.params import COMMON, KINDS, L0_KEY, Rope
from attntemp.ops.spec import TemperatureSpec

LONG = {"rope_type": "longrope", "factor": 2.0, L0_KEY: 256, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
ROPES = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "ntk": {"rope_type": "ntk", "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, L0_KEY: 256},
    "yarn": {"rope_type": "yarn", "factor": 4.0, L0_KEY: 256, "beta_fast": 32.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, L0_KEY: 256, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "longrope": LONG,
}


def test_every_parameter_of_every_rope_function_is_a_named_key_of_its_kind():
    """The registry names the keys (no inspect.signature at run time); this checks it against the
    functions: each parameter but the ones the caller supplies (dim, base, the sequence length,
    dynamic's L0 under transformers' name) is a required or optional key of its kind."""
    supplied = {"dim", "base", "seq_len"}
    for name, kind in KINDS.items():
        params = set(inspect.signature(rope_math.ROPE_FUNCTIONS[name]).parameters) - supplied
        if name == "dynamic":
            params = params - {"max_position_embeddings"} | {L0_KEY}
        assert params | set(COMMON) <= kind.keys | {"rope_type"}, name
        assert set(kind.required) <= params, name


@pytest.mark.parametrize(
    ("rope", "message"),
    [
        ({"rope_type": "yarm", "factor": 2.0}, "rope.rope_type='yarm' is not allowed"),
        ({"rope_type": "yarn"}, "rope has no 'factor'"),
        ({"rope_type": "yarn", "factor": 0.5}, "rope.factor=0.5 is not allowed"),
        ({"rope_type": "linear", "factor": 2.0, "beta_fast": 32}, "unknown key(s) ['beta_fast'] for 'linear'"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}, "rope has no 'high_freq_factor'"),
        ({**LONG, "long_factor": [2.0] * 7}, "rope.short_factor has 8 values and rope.long_factor 7"),
        ({**LONG, "short_factor": "ones"}, "rope.short_factor='ones' is not allowed"),
        ({"rope_type": "yarn", "factor": 2.0, L0_KEY: -4}, "original_max_position_embeddings=-4 is not allowed"),
        ({"rope_type": "yarn", "factor": 2.0, "truncate": "yes"}, "rope.truncate='yes' is not allowed"),
        ({"rope_type": "dynamic", "factor": 2.0, "seq_len": 9}, "unknown key(s) ['seq_len']"),
        ("yarn", "rope='yarn' is not allowed"),
    ],
)
def test_a_bad_rope_is_refused_naming_the_key(rope, message):
    with pytest.raises(ValueError) as err:
        Rope(rope)
    assert message in str(err.value)


@pytest.mark.parametrize("name", list(ROPES))
@pytest.mark.parametrize("seq_len", [None, 100, 256, 257, 1000])
def test_inv_freq_is_the_registry_functions_at_that_sequence_length(name, seq_len):
    rope = Rope(ROPES[name])
    dim = 16 if name == "longrope" else 64
    kw = {k: v for k, v in ROPES[name].items() if k != "rope_type"}
    if name == "dynamic":
        kw = {"factor": 2.0, "max_position_embeddings": 256, "seq_len": seq_len}
    elif name == "longrope":
        kw["seq_len"] = seq_len
    expected = rope_math.ROPE_FUNCTIONS[name](dim, 10000.0, **kw)[0]
    assert torch.equal(rope.inv_freq(dim, 10000.0, trained=999, seq_len=seq_len), expected)


def test_longrope_switches_past_l0_and_dynamic_grows_past_it():
    long = Rope(LONG)
    short = long.inv_freq(16, 1e4, 256, 256)
    assert torch.equal(short, rope_math.default(16, 1e4)[0])  # short_factor 1: plain RoPE up to L0
    assert torch.allclose(long.inv_freq(16, 1e4, 256, 257), short / 2)
    dyn = Rope(ROPES["dynamic"])
    assert torch.equal(dyn.inv_freq(64, 1e4, 256, 200), rope_math.default(64, 1e4)[0])
    assert bool((dyn.inv_freq(64, 1e4, 256, 512) < rope_math.default(64, 1e4)[0]).any())


def test_the_cos_sin_factor_is_each_kinds_own_or_the_stated_one():
    assert Rope(ROPES["yarn"]).cos_sin_factor(256) == pytest.approx(0.1 * math.log(4.0) + 1)
    assert Rope({**ROPES["yarn"], "attention_factor": 1.0}).cos_sin_factor(256) == 1.0
    assert Rope(LONG).cos_sin_factor(256) == pytest.approx(math.sqrt(1 + math.log(2) / math.log(256)))
    assert Rope({**LONG, "attention_factor": 1.2}).cos_sin_factor(256) == 1.2
    assert Rope(ROPES["linear"]).cos_sin_factor(256) == 1.0 and Rope().cos_sin_factor(256) == 1.0


def test_typed_reads_and_the_mapping_it_reads_as():
    rope = Rope(ROPES["yarn"])
    assert (rope.kind, rope.factor, rope.l0, rope.params) == ("yarn", 4.0, 256, {"beta_fast": 32.0})
    assert dict(rope) == ROPES["yarn"] and rope == ROPES["yarn"] and rope["factor"] == 4.0
    assert rope.to_dict() == ROPES["yarn"] and Rope(LONG).to_dict()["long_factor"] == [2.0] * 8
    assert {**rope, "factor": 2.0}["factor"] == 2.0 and Rope(rope) == rope
    none = Rope()
    assert not none and none.kind == "none" and none.factor == 1.0 and none.l0 is None and none == ()
    assert torch.equal(none.inv_freq(64, 1e4, 256), rope_math.default(64, 1e4)[0])


def test_it_is_immutable_hashable_and_survives_pickle_and_deepcopy():
    rope = Rope(LONG)
    with pytest.raises(AttributeError):
        rope.factor = 3.0  # type: ignore[misc]
    assert hash(rope) == hash(Rope(dict(LONG))) and len({rope, Rope(LONG)}) == 1
    assert pickle.loads(pickle.dumps(rope)) == rope and copy.deepcopy(rope) == rope


def test_a_spec_holds_a_rope_and_writes_it_back_as_a_dict():
    spec = TemperatureSpec(multiplier=0.9, rope=ROPES["llama3"])
    assert isinstance(spec.rope, Rope) and spec.rope.kind == "llama3"
    d = spec.to_dict()
    assert d["rope"] == ROPES["llama3"] and TemperatureSpec.from_dict(d) == spec
    assert spec.rope == tuple(sorted(ROPES["llama3"].items()))  # the pairs it held before 0.2.0
    assert TemperatureSpec().to_dict()["rope"] is None and pickle.loads(pickle.dumps(spec)) == spec
