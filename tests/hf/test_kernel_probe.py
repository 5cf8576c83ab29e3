"""The attention kernel by probe: the choice, its cache and its line; a patched forward that runs the
blocked kernel gives SDPA's logits with the temperature patch, per-head multipliers, YaRN and the
sliding-window layers still applied; short prefills, cache steps and gradients stay on SDPA."""

import json

import pytest
import torch
from tiny_configs import model

import attntemp.hf.patch as P
from attntemp.hf.loading import load_model
from attntemp.hf.patch import patch
from attntemp.hf.probes import kernel as kernel_probe
from attntemp.hf.probes.kernel import kernel_for, pick_kernel, probe
from attntemp.ops.spec import TemperatureSpec

CPU = "processor\t: 0\nmodel name\t: Intel Xeon X\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"


@pytest.mark.parametrize("sdpa, blocked, want", [(1.0, 0.5, "blocked"), (1.0, 0.9, "blocked"), (1.0, 0.95, "sdpa")])
def test_blocked_is_chosen_only_when_clearly_faster(monkeypatch, tmp_path, sdpa, blocked, want):
    monkeypatch.setattr(kernel_probe, "time_kernels", lambda *a: {"sdpa": sdpa, "blocked": blocked})
    found = probe((9, 3, 64), torch.bfloat16, cache=tmp_path / "p.json", cpuinfo=CPU)
    assert found.kernel == want and found.ratio == pytest.approx(blocked / sdpa) and not found.cached
    line = found.line()
    assert want in line and "Intel Xeon X" in line and "amx_bf16" in line and "bfloat16" in line


def test_the_decision_is_cached_per_shape_and_dtype(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(kernel_probe, "time_kernels", lambda *a: calls.append(a) or {"sdpa": 1.0, "blocked": 2.0})
    cache = tmp_path / "p.json"
    first = probe((9, 3, 64), torch.float32, cache=cache, cpuinfo=CPU)
    again = probe((9, 3, 64), torch.float32, cache=cache, cpuinfo=CPU)
    assert len(calls) == 1 and again.cached and again.kernel == first.kernel == "sdpa"
    probe((9, 3, 64), torch.bfloat16, cache=cache, cpuinfo=CPU)  # another dtype: measured
    probe((4, 1, 256), torch.float32, cache=cache, cpuinfo=CPU)  # another shape: measured
    assert len(calls) == 3 and len(json.loads(cache.read_text())) == 3


def test_the_real_timing_and_the_forcing_variable(monkeypatch):
    t = kernel_probe.time_kernels((4, 2, 16), torch.float32, 64, repeats=1)
    assert set(t) == set(kernel_probe.KERNELS) and all(s > 0 for s in t.values())
    monkeypatch.setenv(kernel_probe.ENV, "blocked")
    assert (
        pick_kernel(4, 2, 16, torch.float32).kernel == "blocked"
        and "forced" in pick_kernel(4, 2, 16, torch.float32).line()
    )
    monkeypatch.setenv(kernel_probe.ENV, "fast")
    with pytest.raises(ValueError, match="expected one of sdpa, blocked"):
        pick_kernel(4, 2, 16, torch.float32)


def test_short_prefills_cache_steps_and_gradients_stay_on_sdpa(monkeypatch):
    monkeypatch.setenv(kernel_probe.ENV, "blocked")
    n = kernel_probe.MIN_LENGTH
    q, k = torch.zeros(1, 4, n, 8), torch.zeros(1, 2, n, 8)
    assert kernel_for(q, k) == "blocked"
    assert kernel_for(q[:, :, :-1], k[:, :, :-1]) == "sdpa"  # below MIN_LENGTH
    assert kernel_for(q[:, :, :1], k) == "sdpa"  # a cache step
    assert kernel_for(q.requires_grad_(), k) == "sdpa"  # the learner's backward runs SDPA's


def _logits(m, x, kernel, monkeypatch):
    monkeypatch.setenv(kernel_probe.ENV, kernel)
    monkeypatch.setattr(kernel_probe, "MIN_LENGTH", 2)
    ran = []
    orig = P.blocked_causal_attention
    monkeypatch.setattr(P, "blocked_causal_attention", lambda *a, **kw: ran.append(1) or orig(*a, **kw))
    with torch.no_grad():
        out = m(x).logits
    return out, len(ran)


def test_tiny_model_logits_agree_with_per_head_multipliers_and_yarn(tiny, monkeypatch):
    m, _ = tiny
    x = torch.randint(1, 250, (1, 600), generator=torch.Generator().manual_seed(0))  # past its 256: YaRN x4
    cfg = m.config
    heads = 0.6 + torch.rand(cfg.num_hidden_layers, cfg.num_attention_heads, generator=torch.Generator().manual_seed(1))
    spec = TemperatureSpec.per_head(heads).with_rope(TemperatureSpec.yarn(4.0, 256).rope)  # YaRN's frequencies
    with patch(m, spec):
        sdpa, n_sdpa = _logits(m, x, "sdpa", monkeypatch)
        blocked, n_blocked = _logits(m, x, "blocked", monkeypatch)
    plain, _ = _logits(m, x, "sdpa", monkeypatch)
    assert n_sdpa == 0 and n_blocked == cfg.num_hidden_layers  # every layer ran the blocked kernel
    assert (blocked - sdpa).abs().max() < 1e-4  # float32 (measured: ~2e-6)
    assert (sdpa - plain).abs().max() > 1e-2  # the multipliers reached the blocked run too


def test_sliding_window_layers_keep_their_window(monkeypatch):
    m = model("gemma3_text")  # window 24: sliding layers run windowed_sdpa, full ones the blocked kernel
    x = torch.randint(1, 97, (2, 90), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        plain = m(x).logits  # transformers' own masked SDPA
    with P.patch(m, TemperatureSpec()):
        patched, ran = _logits(m, x, "blocked", monkeypatch)
    full = sum(t == "full_attention" for t in m.config.layer_types)
    assert 0 < ran == full < m.config.num_hidden_layers
    assert (patched - plain).abs().max() < 1e-4


def test_in_bfloat16_the_blocked_kernel_is_as_close_to_float32_as_sdpa(monkeypatch):
    x = torch.randint(1, 250, (1, 600), generator=torch.Generator().manual_seed(0))
    spec = TemperatureSpec(multiplier=1.3).with_rope(TemperatureSpec.yarn(4.0, 256).rope)
    out = {}
    for dtype, kernel in (("float32", "sdpa"), ("bfloat16", "sdpa"), ("bfloat16", "blocked")):
        m, _ = load_model("tiny", dtype=dtype)
        with patch(m, spec):
            out[dtype, kernel] = _logits(m, x, kernel, monkeypatch)[0].float()
    gap = {k: (out[k] - out["float32", "sdpa"]).abs() for k in (("bfloat16", "sdpa"), ("bfloat16", "blocked"))}
    ours, sdpa = gap["bfloat16", "blocked"], gap["bfloat16", "sdpa"]
    # measured: mean 0.028 against SDPA's 0.026, max 0.61 against 0.25 (the blocked kernel's scores are
    # rounded to bf16 by the matmul, as in transformers' eager attention; SDPA keeps them in fp32)
    assert ours.mean() < 1.2 * sdpa.mean() and ours.max() < 4 * sdpa.max()


def test_a_model_asking_for_its_kernel_probes_into_the_cache_folder(monkeypatch, tmp_path):
    """The path a patched model takes (pick_kernel -> the cache folder -> probe): it once imported a
    module that was not there, and only the slow benchmark noticed."""
    monkeypatch.setenv("ATTNTEMP_CACHE", str(tmp_path))
    monkeypatch.delenv(kernel_probe.ENV, raising=False)
    monkeypatch.setattr(kernel_probe, "time_kernels", lambda *a: {"sdpa": 1.0, "blocked": 2.0})
    found = kernel_probe._picked.__wrapped__(4, 2, 16, torch.float32, 1)
    assert found.kernel == "sdpa" and (tmp_path / kernel_probe.KERNEL_PROBE_FILE).is_file()
