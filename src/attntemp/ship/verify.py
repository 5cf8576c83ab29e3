"""``attntemp verify``: run an engine with exactly what ``export`` (or ``bake`` + conversion) ships
and compare it with attntemp's patched model on the same tokens.

Two runs per engine, each against attntemp's patched model on the same held-out windows: the
spec, and its m = 1 twin (the same RoPE, YaRN's attention factor 1, no temperature). How the
engine runs the spec is its module's (:mod:`attntemp.ship.engines`): a global spec with the
export's settings, a per-layer or per-head one baked (and, for llama.cpp, converted to GGUF in
float32). Reported (:mod:`attntemp.ship.comparison`): each side's perplexity over the scored
tokens, each side's ratio to its own m = 1 run (the temperature's effect, which must agree) and
the mean KL(attntemp || engine) per token (which must be ~0 in float32).
"""

from __future__ import annotations

import tempfile
from contextlib import nullcontext

from ..hf import preflight
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from .comparison import VerifyResult, check_work_dir
from .config import VerifyConfig
from .engines import ENGINES


# ----------------------------------------------------------------------------- before any work
def check_size(cfg: VerifyConfig, spec: TemperatureSpec) -> None:
    """Refuse ``chunks x length`` when attntemp's own forward over the windows would not fit."""
    config = preflight.source_config(cfg.model)  # its text part, or None before a first download
    if config is None:
        return
    trained = preflight.source_trained_length(config)
    length = cfg.window_length(spec, trained) if trained is not None else cfg.length
    if length is not None:
        preflight.check_forward("length", length, config, cfg.chunks, length)


def check_work_space(cfg: VerifyConfig) -> None:
    """The work folder's disk holds what verify writes there: a float32 GGUF beside a baked float32
    checkpoint for llama.cpp (two copies of the weights), a baked checkpoint for vLLM."""
    need = preflight.checkpoint_bytes(cfg.model)
    if need is None:
        return
    copies = ENGINES[cfg.engine].verify_copies
    where, name = (cfg.work_dir, "work_dir") if cfg.work_dir else (tempfile.gettempdir(), "TMPDIR")
    what = f"what verify writes there ({copies} float32 copies of the weights)"
    preflight.check_space(name, where, copies * need, what)


def run_verify(cfg: VerifyConfig) -> VerifyResult:
    """Load the spec, check the work folder and the sizes, then the engine's own verify (see the module doc)."""
    spec = TemperatureSpec.load(cfg.spec)
    check_work_dir(cfg.work_dir)  # its own words for a file in the way, before the lock makes the folder
    claim = outputs.claimed(cfg.work_dir, "verify", name="work_dir") if cfg.work_dir else nullcontext()
    with claim:  # --work-dir locked, then checked again: a second verify there is refused at once
        check_work_dir(cfg.work_dir)
        check_size(cfg, spec)
        check_work_space(cfg)
        engine = ENGINES[cfg.engine].verify
        assert engine is not None  # VerifyConfig takes verified engines only
        return engine(cfg, spec)
