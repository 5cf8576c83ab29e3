"""ops.rope.factors: per-pair divisors of PI, NTK and YaRN, the longrope formula, LongRoPE's operators."""

import numpy as np
import pytest
import torch

from attntemp.ops import rope
from attntemp.ops.rope import factors as F


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_init_factors_reproduce_each_extension_through_the_longrope_formula(kind):
    f = F.init_factors(kind, 16, 10000.0, 4.0, 256)  # [8]
    want, _ = rope.compute_inv_freq(
        kind,
        16,
        10000.0,
        factor=4.0,
        **({"original_max_position_embeddings": 256, "attention_factor": 1.0} if kind == "yarn" else {}),
    )
    got = F.longrope_inv_freq(16, 10000.0, f.float())  # [8]
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)
    assert bool((f >= 1).all()) and f.shape == (8,)


def test_init_factors_known_values():
    assert torch.equal(F.init_factors("none", 16, 10000.0, 4.0, 256), torch.ones(8, dtype=torch.float64))
    torch.testing.assert_close(
        F.init_factors("linear", 16, 10000.0, 4.0, 256), torch.full((8,), 4.0, dtype=torch.float64)
    )
    yarn = F.init_factors("yarn", 16, 10000.0, 4.0, 256)
    assert yarn[0] == pytest.approx(1.0) and yarn[-1] == pytest.approx(4.0)  # high frequencies kept, low ones / s
    with pytest.raises(ValueError, match="rope='dynamic' is not allowed"):
        F.init_factors("dynamic", 16, 10000.0, 4.0, 256)


def test_longrope_inv_freq_equals_the_registered_longrope_and_carries_gradients():
    factors = torch.tensor([1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 4.0, 5.0], requires_grad=True)
    want, _ = rope.longrope(16, 10000.0, [1.0] * 8, factors.tolist(), 256, factor=4.0, seq_len=1024)
    got = F.longrope_inv_freq(16, 10000.0, factors)
    assert torch.equal(got.detach(), want)  # the same fp32 operations as transformers
    got.sum().backward()
    assert factors.grad is not None and bool((factors.grad < 0).all())
    with pytest.raises(ValueError, match=r"expected \(8,\)"):
        F.longrope_inv_freq(16, 10000.0, torch.ones(7))


def test_longrope_parameters_state_everything_and_refuse_factors_below_1():
    p = F.longrope_parameters(torch.tensor([1.0, 2.0]), 4.0, 256, 1.0)
    assert p == {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 256,
        "short_factor": [1.0, 1.0],
        "long_factor": [1.0, 2.0],
        "attention_factor": 1.0,
    }
    with pytest.raises(ValueError, match=r"long_factor\[1\]=0.5"):
        F.longrope_parameters([1.0, 0.5], 4.0, 256, 1.0)


def test_mutation_and_crossover_keep_the_search_space():
    rng = np.random.default_rng(0)
    start = F.on_grid(np.array([1.0, 1.23, 1.6, 2.29, 4.0, 4.0, 4.0, 4.0]), 4.0, 0.01)
    changed = crossed = 0
    for _ in range(200):
        child = F.mutate(start, rng, 4.0, 0.01)
        assert np.all(np.diff(child) >= 0) and child.min() >= 1.0 and child.max() <= 4.0
        assert np.allclose(np.round((child - 1) / 0.01), (child - 1) / 0.01)  # on the 0.01 grid
        changed += not np.allclose(child, start)
        other = F.crossover(start, child, rng)
        assert other is None or (np.all(np.diff(other) >= 0) and not np.allclose(other, start))
        crossed += other is not None
    assert changed > 100  # a mutation moves something most of the time
    assert crossed > 20  # and a crossover often gives a new child (48 of 200 with this seed): the line above bites
    assert np.array_equal(F.on_grid(np.array([1.3, 1.1, 9.0]), 4.0, 0.1), np.array([1.3, 1.3, 4.0]))
