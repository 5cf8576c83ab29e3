"""measure(): statistics from the probe equal the materialised reference of the same q and k."""

import numpy as np
import pytest
import torch
from tiny_configs import Capture, model

from attntemp.analysis import plots
from attntemp.analysis.measure import AttentionStats, StatOptions, _bucket_means, bucket_edges, measure
from attntemp.ops.attention_stats import STATS, reference_stats
from attntemp.ops.spec import TemperatureSpec

X = torch.randint(1, 97, (2, 90), generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("arch", ["llama", "mistral", "gemma2", "qwen3"])
def test_measure_equals_reference_on_captured_q_k(arch):
    m = model(arch)
    heads = 0.5 + torch.rand(2, 4, generator=torch.Generator().manual_seed(0))
    spec = TemperatureSpec.per_head(heads)
    stats = measure(m, X, spec, opts=StatOptions(n_buckets=5, budget_bytes=4096), progress=False)
    name = "attntemp_eager" if arch == "gemma2" else "attntemp_sdpa"
    with Capture(name) as cap, __import__("attntemp").patch(m, spec), torch.no_grad():
        m(X)
    edges = bucket_edges(90, "buckets", 5)
    cfg = m.config
    for layer, q, k, _, kw, _ in cap.calls:
        ref = reference_stats(
            q,
            k,
            spec.static_multipliers(layer, 4).reshape(1, 4, 1),
            kw["scaling"],
            getattr(cfg, "attn_logit_softcapping", None),
            kw.get("sliding_window"),
        )
        for s in STATS:
            a, b = stats.stats[s][layer], _bucket_means(ref[s], edges)
            assert np.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True), (arch, layer, s)


def test_entropy_rises_when_softened():
    m = model("llama", seed=1)
    base = measure(m, X, progress=False)
    soft = measure(m, X, TemperatureSpec(multiplier=0.25), progress=False)
    sharp = measure(m, X, TemperatureSpec(multiplier=8.0), progress=False)
    assert (soft.by_head("entropy") >= base.by_head("entropy") - 1e-6).all()
    assert (sharp.by_head("entropy") < base.by_head("entropy")).all()
    assert sharp.by_head("max_weight").mean() > base.by_head("max_weight").mean()


def synthetic(recent, norm_ent):
    shape = (2, 3, 4)
    stats = {s: np.full(shape, 0.5) for s in STATS}
    stats["recent_mass"] = np.broadcast_to(np.asarray(recent)[..., None], shape).copy()
    stats["norm_entropy"] = np.broadcast_to(np.asarray(norm_ent)[..., None], shape).copy()
    return AttentionStats(stats, [0, 10, 20, 30, 40], 40, 4, 8)


def test_compare_flags_collapse_and_diffusion():
    trained = synthetic([[0.3] * 3] * 2, [[0.5] * 3] * 2)
    long = synthetic([[0.6, 0.3, 0.3], [0.3, 0.3, 0.35]], [[0.4, 0.7, 0.5], [0.5, 0.5, 0.52]])
    c = long.compare(trained)
    assert c.collapsed == [(0, 0)] and c.diffused == [(0, 1)]
    assert c.norm_entropy_shift[0, 1] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="stats shapes differ"):
        long.compare(AttentionStats({s: np.zeros((1, 3, 4)) for s in STATS}, [0, 1, 2, 3, 4], 4, 1, 1))


def test_per_head_start_and_json_round_trip(tmp_path):
    s = synthetic([[0.3] * 3] * 2, [[0.5] * 3] * 2)
    s.stats["entropy"][..., 2:] = 2.0
    assert np.allclose(s.by_head("entropy", start=20), 2.0)
    assert np.allclose(s.by_head("entropy"), 1.25)
    back = AttentionStats.load(s.save(tmp_path / "s.json"))
    assert all(np.allclose(back.stats[k], s.stats[k]) for k in STATS) and back.bucket_edges == s.bucket_edges
    with pytest.raises(ValueError, match="past the last bucket"):
        s.by_head("entropy", start=41)
    paths = plots.save_all(s, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)


def test_bucket_edges():
    assert bucket_edges(100, "buckets", 4) == [0, 25, 50, 75, 100]
    assert bucket_edges(5, "all") == [0, 1, 2, 3, 4, 5]
    assert bucket_edges(100, [10, 50]) == [0, 10, 50, 100]
    with pytest.raises(ValueError, match="positions='every'"):
        bucket_edges(10, "every")


def test_average_of_per_document_runs_equals_one_batched_measure(tiny, stdlib_docs):
    from attntemp.evaluate.corpus import heldout_windows

    model, tok = tiny
    ids = heldout_windows(tok, 300, n=2, docs=stdlib_docs)
    six = StatOptions(n_buckets=6)
    batched = measure(model, ids, opts=six, progress=False)
    each = AttentionStats.average([measure(model, ids[i : i + 1], opts=six, progress=False) for i in range(2)])
    for name in batched.stats:
        assert np.allclose(each.stats[name], batched.stats[name], rtol=1e-4, atol=1e-5, equal_nan=True), name
    assert each.meta["batch"] == 2
