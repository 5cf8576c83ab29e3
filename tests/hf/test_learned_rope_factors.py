"""hf.rope_factors: learnable per-frequency RoPE factors inside a model, exact where nothing changes."""

import copy

import pytest
import torch

from attntemp.hf.learnable import learnable
from attntemp.hf.patch import patch
from attntemp.hf.rope_factors import FactorRotary, LearnableRopeFactors, factors_for, rope_factors
from attntemp.hf.rope_scaling import rope_state
from attntemp.ops.spec import TemperatureSpec

YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "attention_factor": 1.0}
IDS = torch.randint(0, 256, (1, 320), generator=torch.Generator().manual_seed(0))  # [1, 320]: past L0 = 256


def _tail_loss(model, ids):
    """Mean next-token NLL of the predictions at positions >= 256 (past L0)."""
    logits = model(ids).logits[:, 256:-1]  # [1, n, V]
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 257:])


def _moved(f: LearnableRopeFactors) -> LearnableRopeFactors:
    with torch.no_grad():
        f.log_factor.add_(torch.linspace(0.0, 0.7, f.log_factor.numel()))  # not YaRN's ramp any more
    return f


@torch.no_grad()
def test_inside_the_trained_length_nothing_changes_exactly(tiny):
    model, _ = tiny
    short = IDS[:, :256]  # [1, 256]: max position + 1 = L0
    plain = model(short).logits
    f = _moved(factors_for(model, YARN4, 1024))
    with learnable(model, granularity="head", rope_factors=f, learn_temperature=False) as temps:
        assert torch.equal(model(short).logits, plain)
        spec = temps.to_spec()
    assert dict(spec.rope)["rope_type"] == "longrope" and len(dict(spec.rope)["long_factor"]) == 8
    with patch(model, spec):  # the shipped spec, through transformers' own longrope
        assert torch.equal(model(short).logits, plain)
        assert not torch.equal(model(IDS).logits[:, :256], model(IDS[:, :256]).logits)  # past L0 it switches


@torch.no_grad()
def test_past_the_trained_length_learned_path_equals_the_shipped_longrope(tiny):
    model, _ = tiny
    f = _moved(factors_for(model, YARN4, 1024, longrope_scale=True))
    assert f.attention_factor == pytest.approx(
        (1 + torch.log(torch.tensor(4.0)).item() / torch.log(torch.tensor(256.0)).item()) ** 0.5
    )
    with learnable(model, granularity="global", rope_factors=f, learn_temperature=False) as temps:
        learned = model(IDS).logits
        spec = temps.to_spec()
    with patch(model, spec):
        shipped = model(IDS).logits
    assert torch.equal(learned, shipped)
    with patch(model, TemperatureSpec(rope=YARN4)):
        yarn = model(IDS).logits
    assert (yarn - shipped).abs().max() > 1e-2  # the factors moved: the comparison above can fail


@torch.no_grad()
def test_yarn_start_is_yarn(tiny):
    model, _ = tiny
    with rope_factors(model, factors_for(model, YARN4, 1024)):
        start = model(IDS).logits
    with patch(model, TemperatureSpec(rope=YARN4)):
        yarn = model(IDS).logits
    assert (start - yarn).abs().max() < 1e-4  # the same frequencies, computed as 1 / (f base^(2i/d))


def test_restored_exactly_also_on_error(tiny):
    model, _ = tiny
    before = rope_state(model)
    params = copy.deepcopy(model.config.rope_parameters)
    with pytest.raises(RuntimeError, match="inside"):
        with rope_factors(model, factors_for(model, None, 1024)):
            swapped = [getattr(parent, name) for parent, name, _ in before.rotaries]
            assert swapped and all(isinstance(m, FactorRotary) for m in swapped)  # the factors are in place
            assert [m.original for m in swapped] == [r[2] for r in before.rotaries]  # wrapping the model's own
            raise RuntimeError("inside")
    after = rope_state(model)
    assert [r[2] for r in after.rotaries] == [r[2] for r in before.rotaries]  # the same module objects
    assert model.config.rope_parameters == params


def test_gradients_flow_and_match_finite_differences(tiny):
    """Central differences with eps = 1e-3 (Llama's RMSNorm computes in fp32 even in a float64 model,
    so smaller steps drown in rounding); pairs 1 and 3, away from the clamp at f = 1 of pair 0."""
    model = copy.deepcopy(tiny[0]).double()
    f = factors_for(model, YARN4, 1024)
    assert f.log_factor.dtype == torch.float64
    ids = IDS[:, :300]
    with learnable(model, granularity="global", rope_factors=f, learn_temperature=False) as temps:
        loss = _tail_loss(model, ids)
        loss.backward()
        grad = f.log_factor.grad.clone()
        assert temps.log_m.grad is None  # the temperature is frozen
        eps, numeric = 1e-3, {}
        for i in (1, 3):
            with torch.no_grad():
                f.log_factor[i] += eps
                up = _tail_loss(model, ids)
                f.log_factor[i] -= 2 * eps
                down = _tail_loss(model, ids)
                f.log_factor[i] += eps
            numeric[i] = float((up - down) / (2 * eps))
    for i, value in numeric.items():
        assert abs(value) > 0.05
        assert float(grad[i]) == pytest.approx(value, rel=3e-3)


def test_factors_stay_at_least_1_and_bad_uses_are_refused(tiny):
    model, _ = tiny
    f = factors_for(model, None, 1024)
    with torch.no_grad():
        f.log_factor.sub_(1.0)
    assert torch.equal(f.factors(), torch.ones(8))  # the forward never sees a factor below 1
    f.project()
    assert bool((f.log_factor >= 0).all())
    with pytest.raises(ValueError, match="rope='dynamic' is not allowed"):
        factors_for(model, {"rope_type": "dynamic", "factor": 4.0}, 1024)
    with pytest.raises(ValueError, match="the factors are the extension"):
        with learnable(model, rope=YARN4, rope_factors=f):
            pass
    with pytest.raises(ValueError, match="schedule='log_length' is a learned temperature"):
        with learnable(model, schedule="log_length", rope_factors=f, learn_temperature=False):
            pass
