"""Is transformers' compiled flex_attention right on this machine? Checked once against SDPA.

On an AVX2-only CPU (no AVX-512), torch 2.13's inductor CPU kernel for FlexAttention returns wrong
outputs for small heads: with ``head_dim <= 16`` and a key length of 8 mod 16 (40, 56, ...) the
gap to SDPA is O(1) and sometimes NaN, with random q, k, v and no mask at all, so it is the kernel,
not transformers' mask or attntemp's patch. Forced here with ``ATEN_CPU_CAPABILITY=avx2`` on an
AVX-512 machine (the tiny test configs: 0.46 in the logits, NaN for Mistral); with AVX-512 the
same kernel agrees with SDPA to 1e-7. ``docs/concepts.md`` has the table.

:func:`flex_problem` says why flex cannot be trusted, or None: a CPU below AVX-512 with small heads
(:func:`known_wrong`, no measurement needed), else :func:`flex_gap`, which runs the same compiled
kernel transformers uses (``compile_friendly_flex_attention``) and SDPA on random inputs of the
model's head shape at a few short lengths and returns the largest difference.
:func:`attntemp.hf.patch.apply` asks once per shape and falls back to SDPA (saying why in one line
on stderr) where there is a problem.
"""

from __future__ import annotations

import functools

import torch

# Lengths that reach the kernel's tails: 8 mod 16 (where the AVX2 kernel fails), a multiple of 16, odd.
# 40 twice: torch.compile builds a static kernel for the first shape it sees and a dynamic-shape one
# after a recompile, and the two can disagree (on CI's AVX2 path the first measurement of a shape gave
# 1.6 and a later one 2e-7); the model's forwards may run either, so both are checked.
CHECK_LENGTHS = (40, 56, 64, 33, 40)
FLEX_TOLERANCE = 1e-3  # float32 flex and SDPA agree to ~1e-6; the failures are O(1) or NaN


def _pair(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """Max |flex - SDPA| (inf for NaN) of causal attention over ``q, k, v`` ``[1, H, L, D]``."""
    from torch.nn.attention.flex_attention import create_block_mask
    from transformers.integrations.flex_attention import compile_friendly_flex_attention

    n = q.shape[2]
    mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, n, n, device=q.device)
    flex = compile_friendly_flex_attention(q, k, v, block_mask=mask)  # [1, H, L, D]
    assert isinstance(flex, torch.Tensor)  # no return_lse: the output alone
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # [1, H, L, D]
    gap = (flex.float() - sdpa.float()).abs().max()
    return float("inf") if torch.isnan(gap) else float(gap)


def flex_gap(heads: int, head_dim: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """The largest difference between the compiled flex kernel and SDPA for ``heads`` heads of
    ``head_dim`` on ``device`` (inf where flex gave NaN), over :data:`CHECK_LENGTHS`; measured once
    per shape, whichever way the arguments are passed (the kernel's answer depends on what was
    compiled before, so a second measurement could differ from the one ``apply`` acted on)."""
    return _measured_gap(heads, head_dim, device, dtype)


@functools.cache
def _measured_gap(heads: int, head_dim: int, device: str, dtype: torch.dtype) -> float:
    """:func:`flex_gap`'s measurement, cached under one key per shape."""
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    with torch.no_grad():
        for n in CHECK_LENGTHS:
            q, k, v = (torch.randn(1, heads, n, head_dim, generator=g).to(device, dtype) for _ in range(3))
            worst = max(worst, _pair(q, k, v))  # q, k, v: [1, H, n, D]
    return worst


SMALL_HEAD = 16  # head_dim at or below which torch's AVX2 CPU flex kernel was wrong (docs/concepts.md)


def known_wrong(head_dim: int, device: str = "cpu") -> bool:
    """Whether torch 2.13's compiled CPU flex kernel is known to be wrong here: a CPU that runs
    below AVX-512 (``torch.backends.cpu.get_cpu_capability()``, which ``ATEN_CPU_CAPABILITY``
    lowers) with ``head_dim <= 16``. Decided without a measurement, because which kernel a forward
    gets (static or dynamic shapes) depends on what was compiled before, so a measurement that
    passed can be followed by a wrong forward."""
    return device == "cpu" and head_dim <= SMALL_HEAD and torch.backends.cpu.get_cpu_capability() != "AVX512"


def flex_problem(heads: int, head_dim: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> str | None:
    """Why the compiled flex kernel cannot be trusted for this head shape on ``device``, or None:
    :func:`known_wrong`, else a measured :func:`flex_gap` above :data:`FLEX_TOLERANCE` (scaled for
    half precision)."""
    if known_wrong(head_dim, device):
        cap = torch.backends.cpu.get_cpu_capability()
        return f"torch's {cap} CPU kernel is wrong for head_dim {head_dim} <= {SMALL_HEAD}"
    tol = FLEX_TOLERANCE if dtype == torch.float32 else 2e-2
    gap = flex_gap(heads, head_dim, device, dtype)
    return None if gap <= tol else f"it differs from SDPA on this machine by {gap:.3g} (head_dim {head_dim})"


def flex_is_right(heads: int, head_dim: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> bool:
    """Whether flex can be trusted for this head shape: :func:`flex_problem` found nothing."""
    return flex_problem(heads, head_dim, device, dtype) is None
