"""llama.cpp's audit of a config: the config's proxy (:mod:`attntemp.ship.engine_common`) converted to
GGUF with the build's ``convert_hf_to_gguf.py``; ``llama-perplexity --kl-divergence`` reads the
transformers proxy's log-probabilities and prints KL(transformers || llama.cpp), fitted over the
logit scale c where it differs (:func:`attntemp.ship.engine_common.kl_verdict`)."""

from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path
from typing import Any

import torch

from ...utils.errors import ExternalToolError
from .. import llamacpp_binary as llamacpp
from ..engine_common import LENGTH, cannot, kl_verdict, proxy_logp, random_ids, save_proxy
from .base import AuditRun


def audit(run: AuditRun) -> dict[str, Any]:
    """llama.cpp's verdict on the config (see the module doc)."""
    try:
        llama = llamacpp.find_llamacpp(run.engine_dir)
    except FileNotFoundError as exc:
        return cannot(str(exc))
    if llama.convert is None:
        return cannot(f"no convert_hf_to_gguf.py beside {llama.perplexity}")
    if run.base["verdict"] != "agrees":
        return cannot("its base, the transformers proxy, differs from the reference (see transformers)")
    with tempfile.TemporaryDirectory(prefix="attntemp-audit-") as tmp:
        return _audit_run(run.config, llama, Path(tmp), run.threads)


def _audit_run(config: dict[str, Any], llama: llamacpp.LlamaCpp, work: Path, threads: int | None) -> dict:
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
    ids = random_ids()  # [C, L]
    runs: list[Any] = []

    @functools.cache  # the search's best point is read back, not run again
    def fit(log_c: float) -> float:
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
        kl = fit(0.0)
        entry = {"version": llamacpp.version(llama), "kl": kl, "positions": [LENGTH // 2, LENGTH - 2],
                 "command": " ".join(runs[0].command)}  # fmt: skip
        return kl_verdict(fit, "llama.cpp", entry)
    except _Stop as stop:
        return cannot(f"llama-perplexity failed on this proxy: {str(stop)[-240:]}")


class _Stop(Exception):
    """llama-perplexity failed: the audit says so instead of going on."""
