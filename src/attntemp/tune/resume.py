"""Where ``attntemp tune`` writes (:mod:`attntemp.utils.outputs`' rule: its own outputs replaced only
with ``overwrite``), and the one exception: a gradient tune killed before its evidence (its
``checkpoint.pt`` there, no ``evidence.md``) is resumed by a run with the settings recorded in that
checkpoint, and refused, naming the first setting that differs, for any other.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..utils import outputs

TUNE_RESULTS = (
    "spec.json",
    "evidence.json",
    "evidence.md",
    "entropy.json",
    "learned_spec.json",
    "learned_heatmap.png",
    "train_log.json",
)
CHECKPOINT_FILE = "checkpoint.pt"  # a gradient tune's: a killed run's is resumed by the same settings
# with the report's figure too
TUNE_OUTPUTS = outputs.Outputs((*TUNE_RESULTS, CHECKPOINT_FILE, CHECKPOINT_FILE + ".tmp", "entropy_shift.png"))
UNSETTLED = ("out", "overwrite", "progress", "threads", "verbose")  # what a resumed run may change


def settings(cfg: Any) -> dict[str, Any]:
    """What a gradient tune's checkpoint is resumed with: every option but :data:`UNSETTLED`."""
    return {k: v for k, v in asdict(cfg).items() if k not in UNSETTLED}


def resumable(cfg: Any) -> bool:
    """True when ``out`` holds a killed gradient tune's ``checkpoint.pt`` (no ``evidence.md`` yet)
    that this run resumes (not with ``overwrite``, which starts over)."""
    out = Path(cfg.out)
    return not cfg.overwrite and (out / CHECKPOINT_FILE).is_file() and not (out / "evidence.md").exists()


def check_tune_out(cfg: Any) -> None:
    """``out`` by the rule of :mod:`attntemp.utils.outputs`; a killed gradient tune's folder is
    resumed instead (:func:`check_resume`)."""
    outputs.check_out(cfg.out, () if resumable(cfg) else TUNE_OUTPUTS, overwrite=cfg.overwrite)


def check_resume(cfg: Any) -> None:
    """A killed gradient tune's ``checkpoint.pt`` in ``out`` is resumed only by a run with its
    settings (recorded there), anything else refused naming the first setting that differs."""
    if not resumable(cfg):
        return
    path = Path(cfg.out) / CHECKPOINT_FILE
    try:
        saved = torch.load(path, weights_only=True).get("meta", {}).get("settings")
    except Exception as exc:  # a damaged file: pickle, zip and OS errors alike
        raise ValueError(
            f"out={cfg.out!r} holds a checkpoint.pt that cannot be read ({type(exc).__name__}); pass "
            "overwrite=True to start over, or choose another folder"
        ) from None
    now = {k: list(v) if isinstance(v, tuple) else v for k, v in settings(cfg).items()}
    if cfg.method != "gradient" or (saved is not None and saved != now):
        old = saved or {"method": "gradient"}
        key = next(k for k in (*now, *old) if old.get(k) != now.get(k))
        raise ValueError(
            f"out={cfg.out!r} holds a killed gradient tune's checkpoint.pt made with {key}={old.get(key)!r}; this "
            f"run has {key}={now.get(key)!r}: rerun with its settings to resume it, or pass overwrite=True to start "
            "over"
        )
