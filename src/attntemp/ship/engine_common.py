"""What the engines share (llama.cpp, vLLM, and their readings checked in them): the proxy they are
audited on and their verdict by KL, the positions a chunk scores, the engines' cache, and KL over
log-probability tables.

The proxy (:func:`attntemp.hf.proxy.build_proxy` with the start of the model's layer pattern,
which llama.cpp hard-codes for some architectures, the shipped tiny model's byte-level tokenizer,
q and k weights large enough that attention is far from uniform) is saved in float32; an engine
runs it on ``CHUNKS`` random-token chunks of ``LENGTH`` and its log-probabilities over their second
half (positions ``LENGTH/2 .. LENGTH-2``) are compared with the transformers proxy's by the mean
KL(transformers || engine) per token. That base is the reference only where the transformers audit
agreed with attntemp's math, so it is used only then. KL at most ``KL_AGREE``: agrees. Otherwise
the factor c on every layer's softmax scale that brings the transformers side closest to the
engine is fitted (golden section on ln c): the engine's logit multiplier is c times the
reference's; a KL still large at the best c says the difference is in the rotation, not (only)
the scale.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..assets import tiny_path
from ..hf.proxy import build_proxy
from ..ops.search import golden_section

CHUNKS, LENGTH = 2, 256
KL_AGREE = 1e-5  # mean KL per token; float32 GGUF against the float64 proxy
INIT_RANGE = 0.15  # q, k weights: logits of a few units, attention far from uniform
FIT_RANGE = 4.0  # c searched in [1/4, 4]
FIT_STEPS = 14
WHERE = f"positions {LENGTH // 2}-{LENGTH - 2}"


def cannot(reason: str) -> dict[str, Any]:
    """An engine's audit entry when it cannot run, with the reason on one line."""
    return {"verdict": "cannot run", "reason": " ".join(reason.split())}


def save_proxy(config: dict[str, Any], folder: Path) -> Any:
    """The proxy with the tiny model's tokenizer, saved in float32 to ``folder``; the model."""
    tiny = tiny_path()
    vocab = 258  # the tiny tokenizer's ids: 256 bytes, BOS 256, EOS 257
    model, _ = build_proxy(config, vocab_size=vocab, initializer_range=INIT_RANGE, full_depth=True)
    model = model.float()  # float32 on both sides (some expert kernels have no float64)
    model.config.bos_token_id, model.config.eos_token_id = 256, 257
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, folder / name)
    return model


def random_ids() -> torch.Tensor:
    """The audit's ``[CHUNKS, LENGTH]`` random byte tokens (seeded), BOS first as llama.cpp puts it."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (CHUNKS, LENGTH), generator=g)  # [C, L]
    ids[:, 0] = 256  # BOS
    return ids


@torch.no_grad()
def proxy_logp(model: Any, ids: torch.Tensor, c: float) -> list[torch.Tensor]:
    """The proxy's log-probabilities at llama-perplexity's scored positions, every softmax scale x c."""
    modules = [m for m in model.modules() if hasattr(m, "scaling") and hasattr(m, "layer_idx")]
    saved = [m.scaling for m in modules]
    part = scored(ids.shape[1])
    try:
        for m in modules:
            m.scaling = m.scaling * c
        return [torch.log_softmax(model(row[None]).logits[0, part].double(), dim=-1) for row in ids]  # [n, V]
    finally:
        for m, s in zip(modules, saved, strict=True):
            m.scaling = s


def kl_verdict(fit: Callable[[float], float], engine: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The verdict from ``fit(ln c)``, the KL with every softmax scale of the proxy x c (cached: its
    value at 0 is read back, not run again): agrees at c = 1, or the best c and where the
    difference lies. ``entry``: the engine's figures (version, kl, positions, command)."""
    kl = fit(0.0)
    if kl <= KL_AGREE:
        said = f"KL(transformers proxy || {engine}) {kl:.3g} per token at {WHERE} (limit {KL_AGREE:g})"
        return {"verdict": "agrees", "summary": said, **entry}
    log_c = golden_section(fit, -math.log(FIT_RANGE), math.log(FIT_RANGE), iters=FIT_STEPS)
    best, c = fit(log_c), math.exp(log_c)
    cause = "the scale" if best <= KL_AGREE else "the rotation or more than one scale (KL stays above the limit)"
    summary = (
        f"KL {kl:.3g} per token at {WHERE} (limit {KL_AGREE:g}); the logit multiplier that fits best is "
        f"x{c:.4g} of the reference (KL {best:.3g} there): the difference is in {cause}"
    )
    return {"verdict": "differs", "summary": summary, "best_multiplier_ratio": c, "kl_at_best": best, **entry}


# ----------------------------------------------------------------------------- shared by the engines
def scored(length: int) -> slice:
    """The positions llama-perplexity scores in a chunk of ``length``: its second half."""
    return slice(length // 2, length - 1)


def engines_cache() -> Path:
    """``$ATTNTEMP_ENGINES`` or ``~/.cache/attntemp/engines`` (where scripts/build_*.sh put them); a
    ValueError naming the variable when it names a file."""
    env = os.environ.get("ATTNTEMP_ENGINES")
    if env and Path(env).expanduser().exists() and not Path(env).expanduser().is_dir():
        raise ValueError(
            f"ATTNTEMP_ENGINES={env!r} is not allowed: it is a file; expected the folder scripts/build_*.sh build "
            "the engines in (unset it for ~/.cache/attntemp/engines)"
        )
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attntemp" / "engines"


def engine_rows(got: dict[str, Any], vocab: int) -> list[torch.Tensor]:
    """vLLM's prompt log-probabilities per row as ``[n - 1, V]`` (row p: the distribution of token p + 1)."""
    out = []
    for row in got["rows"]:
        dense = torch.full((len(row["top"]), vocab), -math.inf, dtype=torch.float64)  # [n-1, V]
        for p, entry in enumerate(row["top"]):
            dense[p, torch.tensor([k for k, _ in entry])] = torch.tensor([v for _, v in entry], dtype=torch.float64)
            if any(math.isnan(v) for _, v in entry):
                dense[p] = math.nan
        out.append(dense)
    return out


def kl(ref: torch.Tensor, got: torch.Tensor) -> float:
    """Mean KL(ref || got) per position of two ``[P, V]`` log-probability tables (NaN where ``got`` is)."""
    if got.shape[0] == 0:
        return 0.0
    return max(float((ref.exp() * (ref - got)).sum(-1).mean()), 0.0) + 0.0  # no -0


def finite_kl(ref: torch.Tensor, got: torch.Tensor) -> float:
    """:func:`kl` over the positions where ``got`` has no NaN."""
    keep = ~torch.isnan(got).any(-1)  # [P]
    return kl(ref[keep], got[keep])


def per_row_kl(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """KL(ref || got) per position ``[P]`` (NaN where ``got`` is)."""
    return (ref.exp() * (ref - got)).sum(-1)  # [P]


def mean_kl(ref: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    """Mean KL(ref || got) per position, both ``[n, V]`` log-probabilities per row."""
    return kl(torch.cat(ref), torch.cat(got))  # [sum n, V] each
