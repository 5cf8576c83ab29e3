"""Tuning: the 1-D search, bisection, entropy matching and the evidence."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from tiny_configs import model as tiny_random

from attntemp.analysis.measure import measure
from attntemp.evaluate import limits
from attntemp.evaluate.corpus import heldout_windows
from attntemp.ops.search import bisect_log_m, golden_section
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.entropy import EntropyOptions, _match_layer, capture_qk, tune_entropy
from attntemp.tune.plan import held_out_lengths
from attntemp.tune.runner import TuneConfig, preflight_tune, run_tune


def test_golden_section_finds_the_minimum():
    x = golden_section(lambda v: (v - 0.3) ** 2 + 1, -2.0, 2.0, iters=30)
    assert x == pytest.approx(0.3, abs=1e-4)


def test_bisection_solves_a_decreasing_function():
    target = torch.tensor([2.0, 1.0, 0.5])
    m = bisect_log_m(lambda m: 2.0 / m, target, bounds=(0.1, 10.0), iters=40)
    assert torch.allclose(m, torch.tensor([1.0, 2.0, 4.0]), rtol=1e-5)
    clamped = bisect_log_m(lambda m: 2.0 / m, torch.tensor([100.0]), bounds=(0.1, 10.0))
    assert float(clamped) == pytest.approx(0.1, rel=1e-4)


def _peaky(arch: str = "llama"):
    m = tiny_random(arch, seed=3)
    with torch.no_grad():  # make attention peaky enough that entropy responds to m
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(25.0)
            layer.self_attn.k_proj.weight.mul_(25.0)
    ids = torch.randint(1, 97, (2, 96), generator=torch.Generator().manual_seed(5))
    return m, ids


def test_entropy_matching_restores_trained_length_entropy():
    m, ids = _peaky()
    match = tune_entropy(m, ids, 32, EntropyOptions(granularity="head", progress=False))
    gap_before = abs(match.before - match.reference).mean()
    gap_after = abs(match.after - match.reference).mean()
    assert gap_after < 0.005 and gap_before > 0.03
    assert match.passes == 1  # one ordered pass is exact per head
    table = torch.tensor(match.spec.heads)
    assert table.shape == (2, 4) and (table > 1).float().mean() > 0.5  # longer context: mostly sharpen
    layer = tune_entropy(m, ids, 32, EntropyOptions(granularity="layer", progress=False))
    assert all(len(set(row)) == 1 for row in layer.spec.heads)


@pytest.mark.parametrize("granularity", ["head", "layer"])
def test_one_forward_pass_equals_matching_layer_by_layer(granularity):
    """The fast pass (each layer matched inside one forward) against the slow reference: a forward
    stopped at each layer in turn, with the layers below at their matched multipliers."""
    m, ids = _peaky()
    fast = tune_entropy(m, ids, 32, EntropyOptions(granularity=granularity, progress=False))
    ref = torch.tensor(fast.reference, dtype=torch.float32)  # [layers, H]
    table = torch.ones_like(ref)
    with torch.no_grad():
        for layer in range(table.shape[0]):
            seen = capture_qk(m, ids, TemperatureSpec(heads=table.tolist()), layer)
            table[layer] = _match_layer(seen, ref[layer], 32, granularity)
    assert torch.allclose(torch.tensor(fast.spec.heads), table, rtol=1e-4)
    assert not torch.allclose(table, torch.ones_like(table), rtol=0.02)  # it moved: the check can fail


def test_global_entropy_match_is_a_fixed_point():
    m, ids = _peaky()
    match = tune_entropy(m, ids, 32, EntropyOptions(granularity="global", max_passes=6, tol=1e-4, progress=False))
    g = match.spec.heads[0][0]
    assert all(x == g for row in match.spec.heads for x in row) and g > 1.05
    assert 1 < match.passes <= 6
    with torch.no_grad():  # at m = g every layer's own match averages back to g
        per_layer = [
            float(
                _match_layer(
                    capture_qk(m, ids, TemperatureSpec(multiplier=g), i),
                    torch.tensor(match.reference[i], dtype=torch.float32),
                    32,
                    "layer",
                )[0]
            )
            for i in range(len(match.spec.heads))
        ]
    assert sum(per_layer) / len(per_layer) == pytest.approx(g, rel=2e-3)


def test_run_tune_global_and_entropy_write_evidence(tiny, tmp_path):
    model, tok = tiny
    ev = run_tune(
        TuneConfig(
            out=str(tmp_path / "g"),
            length=384,
            rope="yarn",
            objective="perplexity",
            tasks=("perplexity",),
            n_docs=2,
            progress=False,
        ),
        model,
        tok,
    ).evidence
    assert set(ev["results"]) == {"m=1", "yarn (0.1 ln s + 1)^2", "tuned"}
    curve = ev["info"]["search"]["curve"]
    best = min(v for _, v in curve)
    assert ev["info"]["search"]["value"] == pytest.approx(best)
    assert 0.5 <= ev["spec"]["multiplier"] <= 2.5
    text = (tmp_path / "g" / "evidence.md").read_text()
    assert (tmp_path / "g" / "spec.json").is_file() and "| tuned |" in text
    # held out: the trained length and half / twice the tuning length, each with the tuned spec's own rope
    assert sorted(ev["checks"]) == [192, 256, 768] and "## stdlib (evaluation pool), held-out length 768 tokens" in text
    # the second text (default for the stdlib: package:markdown, scored whole) at every length too
    second = ev["heldout"]
    assert second["text"] == "package:markdown" and sorted(second["checks"]) == [192, 256, 768]
    assert "## package:markdown, held-out length 768 tokens" in text
    assert ev["results"]["m=1"]["perplexity"]["tail_ppl"] != second["results"]["m=1"]["perplexity"]["tail_ppl"]
    line = text.splitlines()[4]
    assert line.startswith("tuned against m = 1: on stdlib (evaluation pool), perplexity tail_ppl: ")
    assert "; on package:markdown, perplexity tail_ppl: " in line
    assert all(line.count(str(n)) == 2 for n in (192, 256, 384, 768))  # each length once per text
    for scored in (ev, *ev["checks"].values(), second, *second["checks"].values()):
        comps = {(c["against"], c["metric"]): c for c in scored["comparisons"]}
        vs1 = comps[("m=1", "tail_ppl")]
        res = scored["results"]
        ratio = res["tuned"]["perplexity"]["tail_ppl"] / res["m=1"]["perplexity"]["tail_ppl"]
        assert vs1["interval"]["value"] == pytest.approx(ratio, rel=1e-9)
        assert vs1["verdict"] in ("better", "worse", "not distinguishable")
        assert ("yarn (0.1 ln s + 1)^2", "ppl") in comps
    # the tuner never saw an evaluation document: the search scored the tuning pool
    ev = run_tune(
        TuneConfig(
            out=str(tmp_path / "e"),
            length=384,
            granularity="head",
            objective="entropy",
            tasks=("perplexity",),
            n_docs=2,
            progress=False,
            check_lengths=(),
            heldout_text="none",
        ),
        model,
        tok,
    ).evidence
    assert ev["checks"] == {} and "heldout" not in ev
    info = json.loads((tmp_path / "e" / "entropy.json").read_text())
    assert len(info["after"]) == 4 and all(math.isfinite(x) for row in info["after"] for x in row)
    assert "tail_ppl" in ev["results"]["tuned"]["perplexity"]


def test_held_out_defaults_fit_the_tasks_and_a_rerun_needs_overwrite(tiny, tmp_path):
    model, tok = tiny
    cfg = TuneConfig(out=str(tmp_path / "t"), length=300)  # tasks perplexity and passkey; L0 = 256
    need = limits.min_length("passkey", tok)
    assert 150 < need < 256  # half of 300 is too short for passkey: left out with a note, not refused
    lengths, notes = held_out_lengths(cfg, 256, tok)
    assert lengths == (256, 600)
    assert notes == [f"default held-out length 150 left out: too short for passkey: it needs at least {need} tokens"]
    preflight_tune(cfg, model, tok)
    given = dataclasses.replace(cfg, check_lengths=(300, 5))
    with pytest.raises(ValueError, match=r"^check_lengths\[1\]=5 is not allowed: a held-out length needs at least"):
        preflight_tune(given, model, tok)
    lengths, notes = held_out_lengths(dataclasses.replace(cfg, check_lengths=(300, 512)), 256, tok)
    assert lengths == (512,) and notes == ["held-out length 300 left out: it is a tuning length, scored there"]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "evidence.md").write_text("an earlier attntemp tune's")
    with pytest.raises(ValueError, match=r"already holds results \(evidence.md\); pass overwrite=True"):
        preflight_tune(cfg, model, tok)
    preflight_tune(dataclasses.replace(cfg, overwrite=True), model, tok)
    assert (tmp_path / "t" / "evidence.md").read_text() == "an earlier attntemp tune's"


def test_tune_config_validation():
    assert TuneConfig(out="x").second_text() == "package:markdown"
    assert TuneConfig(out="x", text="gutenberg:austen-emma").second_text() == "stdlib"
    assert TuneConfig(out="x", heldout_text="none").second_text() is None
    with pytest.raises(ValueError, match="heldout_text='stdlib' is --text itself"):
        TuneConfig(out="x", heldout_text="stdlib")
    with pytest.raises(ValueError, match="objective='entropy'"):
        TuneConfig(out="x", granularity="head", objective="perplexity")
    with pytest.raises(ValueError, match="Did you mean 'head'"):
        TuneConfig(out="x", granularity="heads")


def test_entropy_matching_builds_no_autograd_graph():
    """Called with gradients on (as `run_tune` does), no layer may record a graph: at 12k tokens
    that graph held every activation and ran a 24 GB machine out of memory."""
    m, ids = _peaky()
    grad_seen = []
    hooks = [
        layer.register_forward_hook(lambda *a: grad_seen.append(torch.is_grad_enabled())) for layer in m.model.layers
    ]
    try:
        with torch.enable_grad():
            tune_entropy(m, ids, 32, EntropyOptions(granularity="head", progress=False))
    finally:
        for h in hooks:
            h.remove()
    assert grad_seen and not any(grad_seen)


@pytest.mark.parametrize("granularity", ["head", "layer"])
def test_after_entropy_from_the_matching_pass_equals_a_fresh_measure(granularity):
    """``after`` is read inside the matching pass (no extra forward); it must equal measuring the
    tuned spec from scratch."""
    m, ids = _peaky()
    match = tune_entropy(m, ids, 32, EntropyOptions(granularity=granularity, progress=False))
    fresh = measure(m, ids, match.spec, positions=[32], progress=False).by_head("entropy", start=32)
    assert np.isfinite(match.after).all()
    np.testing.assert_allclose(match.after, fresh, rtol=1e-4, atol=1e-5)
    assert abs(match.after - match.before).max() > 0.01  # the spec moved entropy: the comparison can fail


def test_gradient_tune_of_a_length_schedule_from_two_lengths_checked_at_a_third(tiny, tmp_path):
    model, tok = tiny
    cfg = TuneConfig(
        out=str(tmp_path),
        length=384,
        lengths=(512,),
        method="gradient",
        granularity="head",
        schedule="log_length",
        steps=3,
        tasks=("perplexity",),
        n_docs=2,
        check_lengths=(768,),
        progress=False,
    )
    ev = run_tune(cfg, model, tok).evidence
    spec = TemperatureSpec.from_dict(ev["spec"])
    assert spec.schedule == "log_length" and dict(spec.schedule_params)["trained_len"] == 256
    assert list(ev["checks"]) == [768] and ev["info"]["lengths"] == [384, 512]
    with pytest.raises(ValueError, match="method='gradient'"):
        TuneConfig(out="x", schedule="log_length")


@pytest.mark.parametrize("target", ["entropy", "norm_entropy", "entropy_growth", "max_weight"])
def test_every_entropy_target_is_hit_per_head(tiny, target):
    model, tok = tiny
    ids = heldout_windows(tok, 512, n=2)
    match = tune_entropy(model, ids, 256, EntropyOptions(progress=False, target=target))
    m = np.asarray(match.spec.heads)
    inside = (m > 0.21) & (m < 4.9)  # heads not clamped at the bisection's bounds
    assert inside.mean() > 0.5 and match.target == target
    assert np.allclose(match.after[inside], match.reference[inside], rtol=2e-3, atol=2e-3)
    assert not np.allclose(match.before, match.reference, rtol=2e-3, atol=2e-3)  # matching moved something


def test_entropy_growth_target_allows_ln_n():
    from attntemp.tune.entropy import TARGETS

    grow = TARGETS["entropy_growth"].shift(256, 512, 256)
    expect = np.log(np.arange(257, 513)).mean() - np.log(np.arange(129, 257)).mean()
    assert grow == pytest.approx(expect) and TARGETS["entropy"].shift(256, 512, 256) == 0.0


def test_the_configs_target_names_are_entropy_matchings():
    """TuneConfig reads the targets' names without importing the tuner; they are TARGETS' keys."""
    from attntemp.tune import config, entropy

    assert config.TARGET_NAMES == tuple(entropy.TARGETS)
