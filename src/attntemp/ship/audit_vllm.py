"""``attntemp audit`` through vLLM: the config's proxy served from a folder, its prompt
log-probabilities against the transformers proxy's on the same tokens.

The proxy is the one llama.cpp audits (:func:`attntemp.ship.audit_llamacpp.save_proxy`: float32,
the tiny model's byte-level tokenizer, q and k weights large enough that attention is far from
uniform). ``scripts/vllm_logprobs.py`` runs in vLLM's own venv (``scripts/build_vllm_cpu.sh``) and
returns the whole vocabulary's log-probabilities at every position of ``CHUNKS`` random-token
chunks of ``LENGTH``; both sides are compared over the second half (positions ``LENGTH/2 ..
LENGTH-2``) by the mean KL(transformers || vLLM) per token. At most ``KL_AGREE``: agrees; else the
factor c on every softmax scale of the transformers proxy that brings it closest to vLLM is fitted
(golden section on ln c; vLLM runs once): vLLM's logit multiplier is c times the reference's, and
a KL still large at the best c says the difference is in the rotation, not (only) the scale.
"""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..ops.search import golden_section
from ..utils.errors import ExternalToolError
from . import llamacpp
from .audit_llamacpp import FIT_RANGE, FIT_STEPS, KL_AGREE, cannot, proxy_logp, save_proxy
from .vllm_engine import find_vllm, run_logprobs

CHUNKS, LENGTH = 2, 256


def audit_vllm(config: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """vLLM's verdict on ``config`` (see the module doc); ``ours`` is the transformers entry."""
    try:
        python = find_vllm(None)
    except FileNotFoundError as exc:
        return cannot(str(exc))
    if ours["verdict"] != "agrees":
        return cannot("its base, the transformers proxy, differs from the reference (see transformers)")
    with tempfile.TemporaryDirectory(prefix="attntemp-audit-vllm-") as tmp:
        return _run(config, python, Path(tmp))


def engine_logp(got: dict[str, Any], vocab: int, length: int) -> list[torch.Tensor]:
    """vLLM's log-probabilities ``[n, V]`` per row at the scored positions: its ``top[p]`` is the
    distribution predicted at position p (of token p + 1), as the proxy's logits at p."""
    part = llamacpp.scored(length)
    out = []
    for row in got["rows"]:
        dense = torch.full((len(row["top"]), vocab), -math.inf, dtype=torch.float64)  # [L-1, V]
        for p, entry in enumerate(row["top"]):
            ids = torch.tensor([k for k, _ in entry])  # [K]
            dense[p, ids] = torch.tensor([v for _, v in entry], dtype=torch.float64)
        out.append(dense[part])  # [n, V]
    return out


def mean_kl(ref: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    """Mean KL(ref || got) per position, both ``[n, V]`` log-probabilities per row."""
    kl = [(r.exp() * (r - g)).sum(-1) for r, g in zip(ref, got, strict=True)]  # [n] each
    return max(float(torch.cat(kl).mean()), 0.0) + 0.0  # no -0


def _run(config: dict[str, Any], python: Path, work: Path) -> dict[str, Any]:
    model = save_proxy(config, work / "proxy")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (CHUNKS, LENGTH), generator=g)  # [C, L]
    ids[:, 0] = 256  # BOS, as the llama.cpp audit has it
    try:
        model(ids[:1, :4])
    except (RuntimeError, TypeError, ValueError) as exc:
        return cannot(f"the proxy's own forward fails in transformers ({type(exc).__name__}: {str(exc)[:160]})")
    try:
        got = run_logprobs(python, work / "proxy", ids, None, -1, work)
    except ExternalToolError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        said = [line for line in lines if "Error" in line] or lines or [""]  # its exception, not a last warning
        return cannot(f"vLLM cannot run this proxy: {said[-1].strip()[-240:]}")
    theirs = engine_logp(got, model.config.vocab_size, LENGTH)
    fit = functools.cache(lambda log_c: mean_kl(proxy_logp(model, ids, math.exp(log_c)), theirs))
    kl = fit(0.0)
    where = f"positions {LENGTH // 2}-{LENGTH - 2}"
    entry = {"version": f"vllm {got['vllm']}", "kl": kl, "positions": [LENGTH // 2, LENGTH - 2],
             "command": " ".join(got["command"])}  # fmt: skip
    if kl <= KL_AGREE:
        return {"verdict": "agrees", "summary": f"KL(transformers proxy || vLLM) {kl:.3g} per token at {where} "
                f"(limit {KL_AGREE:g})", **entry}  # fmt: skip
    log_c = golden_section(fit, -math.log(FIT_RANGE), math.log(FIT_RANGE), iters=FIT_STEPS)
    best, c = fit(log_c), math.exp(log_c)
    cause = "the scale" if best <= KL_AGREE else "the rotation or more than one scale (KL stays above the limit)"
    summary = (
        f"KL {kl:.3g} per token at {where} (limit {KL_AGREE:g}); the logit multiplier that fits best is "
        f"x{c:.4g} of the reference (KL {best:.3g} there): the difference is in {cause}"
    )
    return {"verdict": "differs", "summary": summary, "best_multiplier_ratio": c, "kl_at_best": best, **entry}
