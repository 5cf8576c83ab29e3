"""The readings checked in vLLM (:mod:`attntemp.ship.readings.engine_checks` for the method): the case's
settings as ``--hf-overrides`` and ``--max-model-len`` (``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` unset, so
a limit past the length vLLM derives is refused as its reading says), the whole vocabulary's
prompt log-probabilities from ``scripts/vllm_logprobs.py`` in vLLM's own venv."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ...utils.errors import ExternalToolError
from .. import vllm_venv
from ..engine_common import engine_rows, finite_kl, save_proxy
from . import reader_for, readers_of
from .engine_checks import (
    PROXY_CONFIG,
    READINGS_KL,
    Case,
    cases,
    predicted_logp,
    random_row,
    reading_verdict,
)


def run_vllm(model_dir: Path, case: Case, row: list[int], python: Path, work: Path) -> dict[str, Any] | None:
    """vLLM's output on ``row`` with the case's overrides and ``--max-model-len`` (None: it refused)."""
    try:
        return vllm_venv.run_logprobs(
            python, model_dir, [row], case.overrides(), -1, work, max_model_len=case.limit, allow_long=False
        )
    except ExternalToolError:
        return None


def check_vllm(python: Path, work: Path) -> dict[str, Any]:
    """Every case in vLLM (the version its venv holds), against that version's reading."""
    model = save_proxy(PROXY_CONFIG, work / "proxy").eval()
    version = vllm_venv.vllm_version(python)
    reader, hf = reader_for("vllm", version), readers_of("transformers")[0]
    rows = []
    for i, case in enumerate(cases()):
        ids = random_row(case.n, seed=i)
        reading = reader(case.handed(), case.n)
        got = run_vllm(work / "proxy", case, ids, python, work)
        theirs = engine_rows(got, model.config.vocab_size)[0] if got else None
        mine = None if reading.breaks.startswith("refuses") else predicted_logp(model, ids, reading)
        meant = hf(case.handed(), case.n)
        away = finite_kl(predicted_logp(model, ids, meant), theirs) if theirs is not None else None
        rows.append(reading_verdict(case, reading, mine, theirs, away))
    return {"engine": "vllm", "version": version, "reading": reader.label, "source": reader.source,
            "tolerance": READINGS_KL, "rows": rows}  # fmt: skip


def check_vllm_installed(engine_dir: str | None, unavailable: str | None) -> dict[str, Any]:
    """The readings checked in the vLLM venv at ``engine_dir`` (default: the newest in the engines
    cache), or ``cannot run`` with why (``unavailable``: why vLLM cannot run here, None if it can)."""
    if unavailable is not None:
        return {"engine": "vllm", "verdict": "cannot run", "reason": unavailable}
    with tempfile.TemporaryDirectory(prefix="attntemp-readings-") as tmp:
        return check_vllm(vllm_venv.find_vllm(None), Path(tmp))
