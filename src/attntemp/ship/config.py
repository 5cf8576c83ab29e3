"""The configs of the shipping commands (``bake``, ``export``, ``verify``, ``audit``): their flags,
help and checks, importable without torch (``--help`` builds from them; ``tests/test_layers.py``
holds that). The runners are :mod:`.bake_runner`, :mod:`.export`, :mod:`.verify` and
:mod:`.audit.run`; a check that needs a model or an engine runs there, before any heavy work."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..hf.model_options import ModelOptions
from ..ops.geometry import check_theta
from ..utils import checks
from ..utils.options import ints, names, option
from .engines import ENGINE_NAMES, VERIFIED

if TYPE_CHECKING:
    from ..ops.spec import TemperatureSpec


@dataclass(frozen=True, kw_only=True)
class BakeConfig(ModelOptions):
    """``attntemp bake`` and :func:`run_bake`."""

    spec: str = option(help="a TemperatureSpec JSON file (multipliers m = 1/T, RoPE extension)")
    out: str = option(help="output folder (must be new or empty)")
    overwrite: bool = option(False, "replace a non-empty --out")
    check_tokens: int = option(64, "tokens in the fp32 logit check")

    def __post_init__(self) -> None:
        checks.positive_int("check_tokens", self.check_tokens)
        if self.dtype not in (None, "float32"):
            raise ValueError(
                f"dtype={self.dtype!r} is not allowed; bake folds m into float32 weights and checks them in float32"
            )


@dataclass(frozen=True)
class ExportConfig:
    """``attntemp export`` and :func:`run_export`."""

    spec: str = option(help="a TemperatureSpec JSON file")
    engine: str = option(help=f"the engine: {', '.join(ENGINE_NAMES)}")
    trained_length: int | None = option(None, "the model's trained context (YaRN's L0)", parse=int)
    rope_theta: float | None = option(None, "the model's rope_theta, written into rope_parameters", parse=float)
    gguf_arch: str | None = option(None, "llama.cpp: the GGUF's general.architecture (for --override-kv)")
    config: str | None = option(
        None,
        "the model's config.json, or a shipped config's name: its rope_theta, and its RoPE per layer type "
        "(Gemma 3: the rope goes to the global layers only)",
    )

    def __post_init__(self) -> None:
        checks.choice("engine", self.engine, ENGINE_NAMES)
        if self.rope_theta is not None:
            check_theta(self.rope_theta)
        if self.gguf_arch is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", self.gguf_arch):
            raise ValueError(
                f"gguf_arch={self.gguf_arch!r} is not allowed; expected a GGUF architecture name (letters, digits, "
                "'_', '-', '.'), e.g. llama, qwen2, gpt-oss"
            )
        from .engines import reading_gguf_arch  # the registry: imported when a config is made, not for --help

        readers = reading_gguf_arch()
        if self.gguf_arch is not None and self.engine not in readers:
            raise ValueError(
                f"gguf_arch={self.gguf_arch!r} is not allowed with engine={self.engine!r}: only "
                f"{', '.join(readers)} reads it"
            )


@dataclass(frozen=True, kw_only=True)
class VerifyConfig(ModelOptions):
    """``attntemp verify`` and :func:`run_verify`."""

    engine: str = option(help=f"the engine to run: {', '.join(VERIFIED)}")
    spec: str = option(help="a TemperatureSpec JSON file")
    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    length: int | None = option(
        None, "tokens per window (default: the spec's RoPE s * L0, else the trained length)", parse=int
    )
    chunks: int = option(2, "windows (held-out documents), each scored over its second half as llama-perplexity does")
    engine_dir: str | None = option(None, "folder of the engine build (default: PATH, then ~/.cache/attntemp/engines)")
    work_dir: str | None = option(None, "where the GGUF files, baked checkpoints and KL files go (default: a temp dir)")

    def __post_init__(self) -> None:
        checks.choice("engine", self.engine, VERIFIED)
        checks.positive_int("chunks", self.chunks)
        if self.length is not None and checks.positive_int("length", self.length) < 4:
            raise ValueError(f"length={self.length} is not allowed; expected >= 4")
        if self.dtype not in (None, "float32"):
            raise ValueError(f"dtype={self.dtype!r} is not allowed; verify compares float32 models")

    def window_length(self, spec: TemperatureSpec, trained: int) -> int:
        """Tokens per window: ``length``, else the spec's RoPE s x L0, else the trained length."""
        from .comparison import default_length

        return self.length or default_length(spec, trained)


TOLERANCE = 1e-5  # relative: engines compute cos/sin in float32


MAX_POSITION = 2**31 - 1


MAX_THREADS = 1024  # llama.cpp's threads: more is a typo, not a machine


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """``attntemp audit`` and :func:`run_audit`."""

    config: str | None = option(
        None,
        "a model's config.json (no weights needed), or a shipped config's name: gpt_oss, ... "
        "(needed unless --readings)",
    )
    engines: tuple[str, ...] = option(
        tuple(ENGINE_NAMES), f"engines to audit, comma-separated: {', '.join(ENGINE_NAMES)}", parse=names
    )
    positions: tuple[int, ...] | None = option(
        None, "query positions, comma-separated (default: 0, 1, around L0 and 2 L0, the schedule's steps, the end)",
        parse=ints,
    )  # fmt: skip
    tolerance: float = option(TOLERANCE, "relative difference above which an engine differs", parse=float)
    engine_dir: str | None = option(None, "llama.cpp build folder (default: PATH, then ~/.cache/attntemp/engines)")
    threads: int | None = option(None, "llama.cpp threads (default: its own)", parse=int)
    readings: bool = option(
        False,
        "check the engine readings (docs/readings.md) in the engines installed here: dynamic, yarn with an "
        "explicit attention factor and longrope under and past L0 on a head_dim-64 Llama proxy",
    )

    def __post_init__(self) -> None:
        if self.config is None and not self.readings:
            raise ValueError("config is missing; give a model's config.json or a shipped config's name, or --readings")
        if not self.engines:
            raise ValueError(f"engines={self.engines!r} is not allowed; expected some of {', '.join(ENGINE_NAMES)}")
        for i, e in enumerate(self.engines):
            checks.choice(f"engines[{i}]", e, ENGINE_NAMES)
        if self.positions is not None and not self.positions:
            raise ValueError("positions is empty; give query positions, e.g. 0,4096, or leave it out for the defaults")
        if self.engine_dir is not None and not Path(self.engine_dir).expanduser().is_dir():
            why = "a file" if Path(self.engine_dir).exists() else "no such folder"
            raise ValueError(f"engine_dir={self.engine_dir!r} is not allowed: {why}; expected llama.cpp's build folder")
        for i, p in enumerate(self.positions or ()):
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_POSITION:
                raise ValueError(f"positions[{i}]={p!r} is not allowed; expected an integer in [0, {MAX_POSITION}]")
        if checks.positive("tolerance", self.tolerance) >= 1:
            raise ValueError(f"tolerance={self.tolerance!r} is not allowed; expected a number in (0, 1)")
        if self.threads is not None and not 1 <= checks.positive_int("threads", self.threads) <= MAX_THREADS:
            raise ValueError(f"threads={self.threads} is not allowed; expected an integer in [1, {MAX_THREADS}]")
