"""attntemp.monitor: per-token attention statistics under generate() with a KV cache equal
measure's on the full sequence at the generated positions (every architecture, padding, a
tempered patch); the flags fire on constructed collapse and diffusion and stay quiet at m = 1."""

import copy
import inspect
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import transformers as tf
from tiny_configs import ARCHS
from tiny_configs import model as tiny_arch

from attntemp.analysis.config import FLAGS, STEP_STATS
from attntemp.analysis.measure import measure
from attntemp.analysis.monitor import Monitor, monitor
from attntemp.analysis.monitor_rows import last_row_stats
from attntemp.analysis.reference_profile import Reference, trailing_means
from attntemp.evaluate.corpus import heldout_windows
from attntemp.hf.patch import is_patched, patch, probing
from attntemp.ops.attention_stats import attention_stats
from attntemp.ops.spec import TemperatureSpec

TOL = 1e-4


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Small tensors, one query row per step: one intra-op thread is the fast setting."""


def _generate(model, ids, mask, spec=None, new_tokens=6, **kw):
    """Greedy generate inside the monitor (under ``spec``'s patch when given): (output, monitor)."""
    with patch(model, spec) if spec is not None else nullcontext(), monitor(model, **kw) as mon:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=0)  # fmt: skip
    return out, mon


def _worst_gap(model, out, mask, mon, spec=None) -> float:
    """Largest difference between each recorded step and measure on that row's unpadded sequence."""
    gap, compared = 0.0, 0
    for b in range(out.shape[0]):
        pad = int((mask[b] == 0).sum())
        full = measure(model, out[b : b + 1, pad:], spec, positions="all", progress=False)
        for step in mon.steps:
            p = int(step.positions[b])
            assert p == mask.shape[1] - pad - 1 + step.index  # step k: the query predicting token k
            for name in STEP_STATS:
                mine, theirs = step.stats[name][b], full.stats[name][..., p]  # [layers, heads]
                assert np.array_equal(np.isnan(mine), np.isnan(theirs))
                gap = max(gap, float(np.nanmax(np.abs(mine - theirs))))
                compared += 1
    assert compared > 0
    return gap


def _padded_batch(vocab: int, length: int = 30, pad: int = 5):
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (2, length))
    mask = torch.ones_like(ids)
    ids[1, :pad], mask[1, :pad] = 0, 0
    return ids, mask


@pytest.mark.parametrize("arch", ARCHS)
def test_equals_measure_at_generated_positions_for_every_architecture(arch):
    model = tiny_arch(arch)  # 2 layers; sliding windows of 24 (mistral, gemma): the prompt passes them
    ids, mask = _padded_batch(97)
    out, mon = _generate(model, ids, mask)
    assert len(mon.steps) == 6 and mon.steps[0].stats["entropy"].shape == (2, 2, 4)
    assert _worst_gap(model, out, mask, mon) <= TOL
    out, mon = _generate(model, ids[:, 5:], mask[:, 5:])  # no padding: every row sees every key (m None)
    assert _worst_gap(model, out, mask[:, 5:], mon) <= TOL
    spec = TemperatureSpec(multiplier=1.7)  # on top of a temperature patch: the tempered attention
    out, mon = _generate(model, ids[:1], mask[:1], spec, every=2)
    assert [s.index for s in mon.steps] == [0, 2, 4]
    assert _worst_gap(model, out, mask[:1], mon, spec) <= TOL


def test_equals_measure_on_the_tiny_model_under_a_position_schedule(tiny):
    model, tok = tiny
    ids = heldout_windows(tok, 96, n=2)  # [2, 96]
    mask = torch.ones_like(ids)
    mask[0, :7] = 0  # left padding on one row
    spec = TemperatureSpec(schedule="log_length", schedule_params={"trained_len": 64, "b": 0.4})
    out, mon = _generate(model, ids, mask, spec, new_tokens=8)
    assert _worst_gap(model, out, mask, mon, spec) <= TOL


def test_one_row_is_linear_memory_and_equals_the_kernel_on_all_keys():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 4, 5, 8, generator=g), torch.randn(3, 2, 40, 8, generator=g)  # GQA
    m = torch.rand(3, 4, 5, generator=g) + 0.5
    st = last_row_stats(q, k, m, 0.3, {"sliding_window": 16}, positions=[39, 20, 10])
    for b, p in enumerate((39, 20, 10)):  # row b: its real keys are the last p + 1 (left padding)
        ref = attention_stats(q[b : b + 1, :, -1:], k[b : b + 1, :, 39 - p :], m[b : b + 1, :, -1:], 0.3, None, 16)
        for name in STEP_STATS:
            assert torch.allclose(st[name][b], ref[name][0, :, 0], atol=1e-6, equal_nan=True), (b, name)


@pytest.fixture(scope="module")
def stdlib_reference(tiny):
    model, tok = tiny
    return monitor.reference(model, "stdlib", 256, tokenizer=tok, n_docs=32)


def _flag_shares(model, tok, ref, multiplier, sample, rows=8, new_tokens=96):
    """Share of (step, row) raising each flag while generating at the trained length (128 + 96 < 256)."""
    prompts = heldout_windows(tok, 128, n=32 + rows)[32:]  # documents the reference did not see
    torch.manual_seed(0)
    with patch(model, TemperatureSpec(multiplier=multiplier)), monitor(model, ref) as mon:
        model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=sample, pad_token_id=257)  # fmt: skip
    return {f: float(np.mean([s.flags[f].mean() for s in mon.steps])) for f in FLAGS}


def test_flags_fire_on_collapse_and_diffusion_and_stay_quiet_at_m_1(tiny, stdlib_reference):
    model, tok = tiny
    quiet = _flag_shares(model, tok, stdlib_reference, 1.0, sample=True)
    assert max(quiet.values()) <= 0.02, quiet  # a rate: the margins are the reference's 99.9% quantiles
    sharp = _flag_shares(model, tok, stdlib_reference, 8.0, sample=False)
    assert sharp["collapse"] >= 0.5 and sharp["sharpening"] >= 0.9 and sharp["diffusion"] == 0, sharp
    soft = _flag_shares(model, tok, stdlib_reference, 0.1, sample=False)
    assert soft["diffusion"] >= 0.9 and soft["collapse"] == 0 and soft["sharpening"] == 0, soft


def test_a_loop_on_one_token_reads_as_diffusion(tiny, stdlib_reference):
    """Greedy text stuck on one character (a banner of '#') spreads attention evenly over identical
    keys: the monitor calls that diffusion, at m = 1 and the trained length."""
    model, tok = tiny
    ids = tok("import os\n\n" + "#" * 100, return_tensors="pt", add_special_tokens=False).input_ids
    with monitor(model, stdlib_reference) as mon:
        out = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=257)
    assert set(tok.decode(out[0, ids.shape[1] :])) == {"#"}
    assert np.mean([s.flags["diffusion"][0] for s in mon.steps]) >= 0.5


def test_margins_come_from_the_reference_spread(stdlib_reference):
    ref = stdlib_reference
    assert ref.series["entropy"].shape == (32, 128) and ref.mean["entropy"].shape == (4, 8)
    m1 = ref.margins(0.999, window=1)
    m8 = ref.margins(0.999, window=8)
    dev = ref.deviations("norm_entropy")  # [rows, positions]
    assert m1["diffusion"][0] == pytest.approx(np.quantile(dev, 0.999))
    assert m8["diffusion"][-1] < m8["diffusion"][0]  # means of 8 queries spread less than single ones
    assert m8["sharpening"][-1] == pytest.approx(np.quantile(-trailing_means(dev, 8), 0.999))
    assert ref.margins(0.99)["collapse"][-1] < ref.margins(0.999)["collapse"][-1]
    with pytest.raises(ValueError, match="window=200"):
        ref.margins(window=200)
    with pytest.raises(ValueError, match=r"quantile=1\.5"):
        ref.margins(1.5)


def test_trailing_means_skip_padding_and_stride():
    dev = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, np.nan, np.nan]])
    assert sorted(trailing_means(dev, 2)) == [1.5, 2.5, 3.5, 5.5]
    assert sorted(trailing_means(dev, 2, stride=2)) == [2.0, 3.0]


def test_reference_round_trips_and_comes_from_measure_or_steps(tiny, stdlib_reference, tmp_path):
    model, tok = tiny
    ref = Reference.load(stdlib_reference.save(tmp_path / "ref.json"))
    for name in STEP_STATS:
        assert np.allclose(ref.mean[name], stdlib_reference.mean[name], atol=1e-6)
        assert np.allclose(ref.series[name], stdlib_reference.series[name], atol=1e-6, equal_nan=True)
    stats = measure(model, heldout_windows(tok, 128, n=1), positions="all", progress=False)
    from_stats = Reference.load(stats.save(tmp_path / "stats.json"))  # measure's stats.json works too
    assert from_stats.series["entropy"].shape == (1, 64) and from_stats.start == 64
    assert Monitor(model, stats).margins["diffusion"].shape == (8,)
    ids = heldout_windows(tok, 64, n=2)
    _, mon = _generate(model, ids, torch.ones_like(ids), new_tokens=5)
    steps_ref = mon.as_reference()
    assert steps_ref.series["entropy"].shape == (2, 5) and steps_ref.start == 63


def test_callback_stops_generation_and_switches_the_spec(tiny):
    model, tok = tiny
    ids = heldout_windows(tok, 40, n=1)
    with monitor(model, callback=lambda s: "stop" if s.index == 3 else None) as mon:
        out = model.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=257,
                             stopping_criteria=mon.stopping_criteria)  # fmt: skip
    assert out.shape[1] == 40 + 4 and mon.stopped
    # a one-token prompt attends to itself only, whatever m: switching at step 0 is then exactly
    # the same as generating under the spec from the start
    one = ids[:, :1]
    spec = TemperatureSpec(multiplier=2.5)
    with patch(model, spec), monitor(model) as patched:
        a = model.generate(one, max_new_tokens=12, do_sample=False, pad_token_id=257)
    with monitor(model, callback=lambda s: spec if s.index == 0 else None) as switched:
        b = model.generate(one, max_new_tokens=12, do_sample=False, pad_token_id=257)
    assert torch.equal(a, b)
    for x, y in zip(patched.steps[1:], switched.steps[1:], strict=True):
        assert np.allclose(x.stats["entropy"], y.stats["entropy"], atol=1e-5)
    yarn = TemperatureSpec.yarn(4.0, 256)
    with monitor(model) as mon, pytest.raises(ValueError, match=r"spec\.rope="):
        mon.switch(yarn)  # the cached keys carry the RoPE in use
    with monitor(model, callback=lambda s: 3) as mon, pytest.raises(ValueError, match="callback returned 3"):
        model.generate(one, max_new_tokens=2, do_sample=False, pad_token_id=257)


def test_public_name_probes_and_arguments(tiny, stdlib_reference):
    model, _ = tiny
    assert callable(monitor) and callable(monitor.reference)
    assert isinstance(monitor(model), Monitor)
    with pytest.raises(ValueError, match="every=0"):
        monitor(model, every=0)
    with pytest.raises(ValueError, match=r"margins=.*unknown flag"):
        monitor(model, stdlib_reference, flags=monitor.FlagOptions(margins={"colapse": 0.1}))
    with pytest.raises(ValueError, match="recent_tokens=32 differs"):
        monitor(model, stdlib_reference, recent_tokens=32)
    with probing(model, TemperatureSpec(), lambda *a: None), pytest.raises(ValueError, match="probed already"):
        monitor(model).__enter__()
    assert not is_patched(model)  # the monitor's own patch is gone after the block
    assert tf.StoppingCriteriaList is type(monitor(model).stopping_criteria)


def test_every_k_records_the_same_steps_as_every_step_across_resumed_runs():
    """Unrecorded steps move positions on without reading tensors; the recorded steps must still be
    exactly every-step monitoring's, and runs restarted from caches filled elsewhere be found."""
    model = tiny_arch("llama")
    torch.manual_seed(3)
    ids = torch.randint(3, 97, (1, 24))
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        cache = getattr(model(ids[:, :-1], use_cache=True), name)  # filled outside the monitor

    def runs(every):
        with monitor(model, every=every) as mon:
            for _ in range(2):  # the same prompt twice, each resumed from a copy of the cache
                kw = {name: copy.deepcopy(cache)}
                model.generate(ids, max_new_tokens=7, min_new_tokens=7, do_sample=False, pad_token_id=0, **kw)
        return {(s.run, s.index): s for s in mon.steps}

    each, third = runs(1), runs(3)
    assert sorted(third) == [(r, i) for r in (0, 1) for i in (0, 3, 6)]
    for key, step in third.items():
        assert np.array_equal(step.positions, each[key].positions)
        for name in STEP_STATS:
            np.testing.assert_allclose(step.stats[name], each[key].stats[name], rtol=1e-6, atol=1e-7)


def test_unrecorded_steps_call_the_probe_on_the_first_layer_only():
    """Between recorded steps the other layers run the bare patch (no probe): one probe call a step,
    and the probe is back on every layer for the recorded ones and after the block."""
    from attntemp.hf.introspect import attention_modules
    from attntemp.hf.patch import PROBE

    model = tiny_arch("llama")
    layers = len(attention_modules(model))
    seen = []

    class Counting(Monitor):
        def __call__(self, module, *args):
            seen.append(module.layer_idx)
            return super().__call__(module, *args)

    ids = torch.randint(3, 97, (1, 16), generator=torch.Generator().manual_seed(0))
    with Counting(model, every=4) as mon:
        model.generate(ids, max_new_tokens=9, min_new_tokens=9, do_sample=False, pad_token_id=0)
    assert [s.index for s in mon.steps] == [0, 4, 8]
    assert len(seen) == 3 * layers + 6  # steps 0, 4, 8 on every layer; the six others on the first
    assert layers > 1 and not any(hasattr(m, PROBE) for m in attention_modules(model))
