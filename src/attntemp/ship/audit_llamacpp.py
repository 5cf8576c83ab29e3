"""``attntemp audit`` through llama.cpp: the config's proxy converted to GGUF and run on the same tokens.

The proxy (:func:`attntemp.hf.proxy.build_proxy` with the start of the model's layer pattern, which
llama.cpp hard-codes for some architectures, the shipped tiny model's byte-level tokenizer, q and k weights
large enough that attention is far from uniform) is saved in float32 and converted
with the build's ``convert_hf_to_gguf.py``. ``llama-perplexity --kl-divergence`` then reads the
transformers proxy's log-probabilities on ``CHUNKS`` random-token chunks of ``LENGTH`` (scored over
their second half, positions ``LENGTH/2 .. LENGTH-2``) and prints KL(transformers || llama.cpp).
That base is the reference only where the transformers audit agreed with attntemp's math, so it
is used only then. KL at most ``KL_AGREE``: agrees. Otherwise the factor c on every layer's softmax
scale that makes the transformers side closest to llama.cpp is fitted (golden section on ln c):
llama.cpp's logit multiplier is c times the reference's; a KL still large at the best c says the
difference is in the rotation, not (only) the scale.
"""

from __future__ import annotations

import functools
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..assets import tiny_path
from ..hf.proxy import build_proxy
from ..ops.search import golden_section
from ..utils.errors import ExternalToolError
from . import llamacpp

CHUNKS, LENGTH = 2, 256
KL_AGREE = 1e-5  # mean KL per token; float32 GGUF against the float64 proxy
INIT_RANGE = 0.15  # q, k weights: logits of a few units, attention far from uniform
FIT_RANGE = 4.0  # c searched in [1/4, 4]
FIT_STEPS = 14


def cannot(reason: str) -> dict[str, Any]:
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


@torch.no_grad()
def proxy_logp(model: Any, ids: torch.Tensor, c: float) -> list[torch.Tensor]:
    """The proxy's log-probabilities at llama-perplexity's scored positions, every softmax scale x c."""
    modules = [m for m in model.modules() if hasattr(m, "scaling") and hasattr(m, "layer_idx")]
    saved = [m.scaling for m in modules]
    part = llamacpp.scored(ids.shape[1])
    try:
        for m in modules:
            m.scaling = m.scaling * c
        return [torch.log_softmax(model(row[None]).logits[0, part].double(), dim=-1) for row in ids]  # [n, V]
    finally:
        for m, s in zip(modules, saved, strict=True):
            m.scaling = s


def audit_llamacpp(config: dict[str, Any], ref: dict[str, Any], ours: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """llama.cpp's verdict on ``config`` (see the module doc); ``ours`` is the transformers entry."""
    try:
        llama = llamacpp.find_llamacpp(cfg.engine_dir)
    except FileNotFoundError as exc:
        return cannot(str(exc))
    if llama.convert is None:
        return cannot(f"no convert_hf_to_gguf.py beside {llama.perplexity}")
    if ours["verdict"] != "agrees":
        return cannot("its base, the transformers proxy, differs from the reference (see transformers)")
    with tempfile.TemporaryDirectory(prefix="attntemp-audit-") as tmp:
        return _run(config, ref, llama, Path(tmp), cfg.threads)


def _run(config: dict[str, Any], ref: dict[str, Any], llama: llamacpp.LlamaCpp, work: Path, threads) -> dict:
    model = save_proxy(config, work / "proxy")
    probe = torch.zeros(1, 4, dtype=torch.long)  # [1, 4]
    try:
        model(probe)
    except (RuntimeError, TypeError, ValueError) as exc:
        return cannot(f"the proxy's own forward fails in transformers ({type(exc).__name__}: {str(exc)[:160]})")
    gguf = work / "proxy-f32.gguf"
    assert llama.convert is not None
    try:
        llamacpp.convert(llama.convert, work / "proxy", gguf)
    except ExternalToolError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return cannot(f"convert_hf_to_gguf.py cannot convert this proxy: {(lines or [''])[-1][-240:]}")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (CHUNKS, LENGTH), generator=g)  # [C, L]
    ids[:, 0] = 256  # BOS, as llama.cpp puts it there
    runs: list[Any] = []

    def kl_at(log_c: float) -> float:
        base = llamacpp.write_base(work / "base.kld", ids, proxy_logp(model, ids, math.exp(log_c)))
        cmd = llamacpp.kl_command(llama, gguf, base, LENGTH, (), threads)
        try:
            runs.append(llamacpp.run_kl(cmd, LENGTH))
        except ExternalToolError as exc:
            lines = str(exc).splitlines()
            said = [line[line.index("GGML_ASSERT") :] for line in lines if "GGML_ASSERT" in line]
            said = said or [line for line in lines if " E " in line] or [line for line in lines if "error" in line]
            message = (said or [str(exc)])[0].strip()
            raise _Stop(message + (" (it printed nothing)" if message.endswith(":") else "")) from None
        return max(runs[-1].kl.value, 0.0) + 0.0  # no -0

    try:
        kl = kl_at(0.0)
        command = " ".join(runs[0].command)
        entry = {
            "version": llamacpp.version(llama),
            "kl": kl,
            "positions": [LENGTH // 2, LENGTH - 2],
            "command": command,
        }
        if kl <= KL_AGREE:
            return {"verdict": "agrees", "summary": _agrees(kl), **entry}
        fit = functools.cache(kl_at)  # the search's best point is read back, not run again
        log_c = golden_section(fit, -math.log(FIT_RANGE), math.log(FIT_RANGE), iters=FIT_STEPS)
        best = fit(log_c)
    except _Stop as stop:
        return cannot(f"llama-perplexity failed on this proxy: {str(stop)[-240:]}")
    c = math.exp(log_c)
    where = "the scale" if best <= KL_AGREE else "the rotation or more than one scale (KL stays above the limit)"
    summary = (
        f"KL {kl:.3g} per token at positions {LENGTH // 2}-{LENGTH - 2} (limit {KL_AGREE:g}); the logit multiplier "
        f"that fits best is x{c:.4g} of the reference (KL {best:.3g} there): the difference is in {where}"
    )
    return {"verdict": "differs", "summary": summary, "best_multiplier_ratio": c, "kl_at_best": best, **entry}


def _agrees(kl: float) -> str:
    where = f"positions {LENGTH // 2}-{LENGTH - 2}"
    return f"KL(transformers proxy || llama.cpp) {kl:.3g} per token at {where} (limit {KL_AGREE:g})"


class _Stop(Exception):
    """llama-perplexity failed: the audit says so instead of going on."""
