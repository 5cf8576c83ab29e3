"""tune.rope_evolution: LongRoPE's evolutionary search on a budget of forwards (tiny model, small)."""

import numpy as np
import pytest
import torch

from attntemp.evaluate import lm
from attntemp.hf.rope_factors import factors_for, rope_factors
from attntemp.tune.rope_evolution import evolve_rope_factors

YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "attention_factor": 1.0}


def test_search_keeps_the_best_within_budget_and_the_search_space(tiny):
    model, _ = tiny
    ids = torch.randint(0, 256, (2, 320), generator=torch.Generator().manual_seed(4))  # [2, 320]
    f = factors_for(model, YARN4, 1024)
    with torch.no_grad(), rope_factors(model, f):
        start = float(lm.token_nll(model, ids, 256).mean())
    found = evolve_rope_factors(model, ids, f, budget=24, population=4, seed=1)
    assert found.forwards <= 24 and len(found.history) >= 4
    assert found.loss <= min(loss for _, loss in found.history) + 1e-12
    assert found.loss <= start + 1e-3  # the (grid-rounded) start is in the population
    best = np.array(found.factors)
    assert np.all(np.diff(best) >= 0) and best.min() >= 1.0 and best.max() <= 4.0 + 1e-9
    assert torch.allclose(f.factors().double(), torch.tensor(best), rtol=1e-6)  # left at the best
    with torch.no_grad(), rope_factors(model, f):
        assert float(lm.token_nll(model, ids, 256).mean()) == pytest.approx(found.loss, rel=1e-5)
    with pytest.raises(ValueError, match="budget=2 forwards over 2 windows"):
        evolve_rope_factors(model, ids, f, budget=2)
