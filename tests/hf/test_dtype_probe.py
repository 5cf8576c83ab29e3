"""``--dtype auto``: the probe measures float32 against bfloat16 on the model's linear shape, caches
the decision per CPU, flags, threads and shape, and says it in one line."""

import json

import pytest
import torch

from attntemp.hf.devices import parse_dtype
from attntemp.hf.probes import dtype as dtype_probe
from attntemp.hf.probes.dtype import cpu_identity, linear_shape, probe_cpu_dtype

CPU = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_bf16x\n"


def test_cpu_identity_reads_the_model_and_the_bf16_flags_exactly():
    assert cpu_identity(CPU) == ("AMD EPYC 9R14", ("avx2", "avx512f", "avx512_bf16"))
    assert cpu_identity("flags : avx2\n") == ("unknown CPU", ("avx2",))


@pytest.mark.parametrize(
    "fp32, bf16, want",
    [(1.0, 0.5, "bfloat16"), (1.0, 0.9, "bfloat16"), (1.0, 0.95, "float32"), (1.0, 1.3, "float32")],
)
def test_bfloat16_is_chosen_only_when_clearly_faster(monkeypatch, tmp_path, fp32, bf16, want):
    monkeypatch.setattr(dtype_probe, "time_linear", lambda dt, *a: fp32 if dt == torch.float32 else bf16)
    found = probe_cpu_dtype(64, 128, 32, cache=tmp_path / "p.json", cpuinfo=CPU)
    assert found.dtype == want and found.ratio == pytest.approx(bf16 / fp32) and not found.cached
    assert want in found.line() and "AMD EPYC 9R14" in found.line() and "avx512_bf16" in found.line()


def test_the_decision_is_cached_per_shape_and_threads_and_a_damaged_cache_is_remeasured(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(dtype_probe, "time_linear", lambda dt, *a: calls.append(dt) or 1.0)
    cache = tmp_path / "p.json"
    first = probe_cpu_dtype(64, 128, 32, cache=cache, cpuinfo=CPU)
    again = probe_cpu_dtype(64, 128, 32, cache=cache, cpuinfo=CPU)
    assert len(calls) == 2 and again.cached and again.dtype == first.dtype  # read back, not measured
    probe_cpu_dtype(64, 256, 32, cache=cache, cpuinfo=CPU)  # another shape: measured
    assert len(calls) == 4 and len(json.loads(cache.read_text())) == 2
    cache.write_text("{not json")
    assert not probe_cpu_dtype(64, 128, 32, cache=cache, cpuinfo=CPU).cached and len(calls) == 6


def test_the_real_probe_times_both_dtypes(tmp_path):
    found = probe_cpu_dtype(32, 64, 16, cache=tmp_path / "p.json")
    assert found.dtype in ("float32", "bfloat16") and found.float32_s > 0 and found.bfloat16_s > 0


def test_linear_shape_and_the_flag():
    assert linear_shape({"hidden_size": 576, "intermediate_size": 1536}) == (576, 1536)
    assert linear_shape({"text_config": {"hidden_size": 640, "intermediate_size": 2048}}) == (640, 2048)
    assert linear_shape({"hidden_size": "576", "intermediate_size": 1536}) is None and linear_shape(None) is None
    assert parse_dtype("auto") == "auto"
    with pytest.raises(ValueError, match="or auto"):
        parse_dtype("fp8")


def test_load_model_auto_probes_the_tiny_models_shape(tmp_path, monkeypatch, capsys):
    from attntemp.hf.loading import load_model

    monkeypatch.setenv("ATTNTEMP_CACHE", str(tmp_path))
    model, _ = load_model("tiny", dtype="auto")
    err = capsys.readouterr().err
    assert "dtype auto:" in err and str(next(model.parameters()).dtype).removeprefix("torch.") in err
    assert (tmp_path / dtype_probe.DTYPE_PROBE_FILE).is_file()
