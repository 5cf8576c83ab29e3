"""scripts/gpu_check.py --dry-run: the GPU check's code paths on the CPU (tiny model, small lengths),
one JSON line per figure, each finite and of the kind the GPU run prints."""

import json
import math

import pytest
from script_loader import load_script


@pytest.fixture(scope="module")
def gpu_check():
    return load_script("gpu_check")


@pytest.fixture(scope="module")
def figures(gpu_check):
    """The figures of one dry run: it writes its own fp32 reference first (the --write-cpu-reference
    path) and compares against it (the --cpu-reference path)."""
    printed = []
    gpu_check.emit = lambda figure, **values: printed.append({"figure": figure, **values}) or printed[-1]
    assert gpu_check.main(["--dry-run"]) == 0
    return printed


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_dry_run_prints_every_figure(figures):
    by = {}
    for line in figures:
        json.dumps(line)  # one JSON line each
        by.setdefault(line["figure"], []).append(line)
    assert set(by) == {
        "cpu_reference",
        "setup",
        "sdpa_kernel",
        "forward_time",
        "tail_ppl",
        "measure",
        "gradient_tune",
        "total",
    }
    assert by["setup"][0]["dtype"] == "torch.bfloat16" and by["cpu_reference"][0]["dtype"] == "float32"
    kernels = {(k["length"], k["patched"]): k["kernels"] for k in by["sdpa_kernel"]}
    assert set(kernels) == {(320, False), (320, True), (512, False), (512, True)}
    assert all(k and set(k) <= {"flash", "efficient", "cudnn", "fused", "math"} for k in kernels.values())
    for t in by["forward_time"]:
        assert _finite(t["ratio"]["value"]) and t["ratio"]["low"] <= t["ratio"]["value"] <= t["ratio"]["high"]


def test_dry_run_tail_ppl_is_paired_with_the_fp32_reference(figures):
    (ppl,) = [f for f in figures if f["figure"] == "tail_ppl"]
    (ref,) = [f for f in figures if f["figure"] == "cpu_reference"]
    assert ppl["length"] == 320 and ppl["windows"] == 2 and ppl["cpu_fp32"] == pytest.approx(ref["tail_ppl"])
    ratio = ppl["ratio"]
    assert ratio["method"] == "paired bootstrap over windows" and ratio["low"] <= ratio["value"] <= ratio["high"]
    assert abs(ratio["value"] - 1) < 0.02  # bf16 against fp32 on the same windows


def test_dry_run_measure_and_tune_figures(figures):
    (m,) = [f for f in figures if f["figure"] == "measure"]
    (g,) = [f for f in figures if f["figure"] == "gradient_tune"]
    assert m["length"] == 512 and _finite(m["seconds"]) and m["peak_memory_bytes"] > 2**20
    assert m["memory"] == "cpu_peak_rss" and _finite(m["mean_entropy_over_heads"]["value"])
    assert g["steps"] == 2 and _finite(g["seconds_train"]) and _finite(g["tail_ppl_after"])
    assert _finite(g["loss_first"]) and _finite(g["loss_last"])
