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

from dataclasses import dataclass

from ..hf import preflight
from ..hf.loading import ModelOptions
from ..ops.spec import TemperatureSpec
from ..utils import checks
from ..utils.options import option
from .comparison import VerifyResult, check_work_dir, default_length
from .engines import ENGINES, verified


@dataclass(frozen=True, kw_only=True)
class VerifyConfig(ModelOptions):
    """``attntemp verify`` and :func:`run_verify`."""

    engine: str = option(help=f"the engine to run: {', '.join(verified())}")
    spec: str = option(help="a TemperatureSpec JSON file")
    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    length: int | None = option(
        None, "tokens per window (default: the spec's RoPE s * L0, else the trained length)", parse=int
    )
    chunks: int = option(2, "windows (held-out documents), each scored over its second half as llama-perplexity does")
    engine_dir: str | None = option(None, "folder of the engine build (default: PATH, then ~/.cache/attntemp/engines)")
    work_dir: str | None = option(None, "where the GGUF files, baked checkpoints and KL files go (default: a temp dir)")

    def __post_init__(self) -> None:
        checks.choice("engine", self.engine, verified())
        checks.positive_int("chunks", self.chunks)
        if self.length is not None and checks.positive_int("length", self.length) < 4:
            raise ValueError(f"length={self.length} is not allowed; expected >= 4")
        if self.dtype not in (None, "float32"):
            raise ValueError(f"dtype={self.dtype!r} is not allowed; verify compares float32 models")

    def window_length(self, spec: TemperatureSpec, trained: int) -> int:
        """Tokens per window: ``length``, else the spec's RoPE s x L0, else the trained length."""
        return self.length or default_length(spec, trained)


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


def run_verify(cfg: VerifyConfig) -> VerifyResult:
    """Load the spec, check the work folder and the sizes, then the engine's own verify (see the module doc)."""
    spec = TemperatureSpec.load(cfg.spec)
    check_work_dir(cfg.work_dir)
    check_size(cfg, spec)
    engine = ENGINES[cfg.engine].verify
    assert engine is not None  # VerifyConfig takes verified engines only
    return engine(cfg, spec)


from ..utils.deprecation import legacy_getattr  # noqa: E402 (the aliases come last)

__getattr__ = legacy_getattr(__name__)  # old names that warn: attntemp.utils.deprecation.RENAMED
