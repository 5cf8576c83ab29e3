"""attntemp.hf.flex_check: when the compiled flex kernel is not trusted, and its one measurement."""

import pytest
import torch

import attntemp.hf.flex_check as F


@pytest.mark.parametrize(
    ("capability", "head_dim", "device", "wrong"),
    [
        ("AVX2", 16, "cpu", True),
        ("AVX2", 8, "cpu", True),
        ("DEFAULT", 16, "cpu", True),
        ("AVX2", 24, "cpu", False),
        ("AVX2", 64, "cpu", False),
        ("AVX512", 16, "cpu", False),
        ("AVX2", 16, "cuda", False),
    ],
)
def test_known_wrong_is_small_heads_below_avx512_on_the_cpu(monkeypatch, capability, head_dim, device, wrong):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert F.known_wrong(head_dim, device) is wrong


def test_a_known_wrong_shape_needs_no_measurement(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(F, "flex_gap", lambda *a: pytest.fail("measured a shape known to be wrong"))
    assert F.flex_problem(4, 16) == "torch's AVX2 CPU kernel is wrong for head_dim 16 <= 16"
    assert not F.flex_is_right(4, 16)


@pytest.mark.parametrize(
    ("gap", "dtype", "problem"),
    [
        (2e-7, torch.float32, None),
        (5e-3, torch.float32, "it differs from SDPA on this machine by 0.005 (head_dim 32)"),
        (5e-3, torch.bfloat16, None),
        (float("inf"), torch.bfloat16, "it differs from SDPA on this machine by inf (head_dim 32)"),
    ],
)
def test_otherwise_the_measured_gap_decides(monkeypatch, gap, dtype, problem):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(F, "flex_gap", lambda *a: gap)
    assert F.flex_problem(2, 32, "cpu", dtype) == problem


def test_the_gap_is_measured_once_however_the_arguments_are_spelled(monkeypatch):
    """A second measurement can differ from the first (another compiled kernel), so what is
    reported must be what apply acted on: one cache key per shape."""
    calls = []

    def pair(q, k, v):
        calls.append(q.shape)
        return 0.0

    monkeypatch.setattr(F, "_pair", pair)
    F._measured_gap.cache_clear()
    try:
        assert F.flex_gap(3, 8) == F.flex_gap(3, 8, "cpu", torch.float32) == F.flex_gap(3, 8, dtype=torch.float32)
        assert len(calls) == len(F.CHECK_LENGTHS)
        assert [s[2] for s in calls] == list(F.CHECK_LENGTHS) and calls[0][1:] == (3, 40, 8)
    finally:
        F._measured_gap.cache_clear()
