"""The configs of the attention commands (``measure``, ``generate``): their flags, help and checks,
and the monitor's flag table they name, importable without torch (``--help`` builds from them).
The runners are :mod:`.run` and :mod:`.generate`."""

from __future__ import annotations

import stat
from dataclasses import dataclass, fields
from pathlib import Path

from ..hf.model_options import ModelOptions
from ..utils import checks, options
from ..utils.options import option

STEP_STATS = ("entropy", "norm_entropy", "sink_mass", "recent_mass")


# flag -> (statistic, direction): raised when direction * shift > margin
FLAGS: dict[str, tuple[str, float]] = {
    "collapse": ("recent_mass", 1.0),
    "diffusion": ("norm_entropy", 1.0),
    "sharpening": ("norm_entropy", -1.0),
    "sink_loss": ("sink_mass", -1.0),
}


DEFAULT_QUANTILE = 0.999


DEFAULT_WINDOW = 8


@dataclass(frozen=True, kw_only=True)
class MeasureConfig(ModelOptions):
    """``attntemp measure`` and :func:`run_measure`."""

    out: str = option(help="output folder (stats.json, PNGs, summary.md)")
    length: int = option(help="tokens per sequence")
    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    n_docs: int = option(1, "held-out documents (batch rows)", flag="--docs")
    spec: str | None = option(None, "a TemperatureSpec JSON file (temperatures and RoPE extension)")
    buckets: int = option(16, "query-position buckets")
    sink_tokens: int = option(4, "the first keys counted as the attention sink")
    recent_tokens: int = option(64, "the last keys counted as recent")
    overwrite: bool = option(False, "replace the results already in --out")

    def __post_init__(self) -> None:
        for name in ("length", "n_docs", "buckets", "sink_tokens", "recent_tokens"):
            checks.positive_int(name, getattr(self, name))
        for name in ("buckets", "sink_tokens", "recent_tokens"):
            checks.at_most(name, getattr(self, name), self.length, f"length={self.length} tokens has no more")


@dataclass(frozen=True, kw_only=True)
class GenerateConfig(ModelOptions):
    """``attntemp generate`` and :func:`run_generate`."""

    prompt_file: str = option(help="the prompt: a UTF-8 text file")
    max_new_tokens: int = option(help="tokens to generate")
    out: str = option(
        "attntemp-generate", "output folder: generated.txt, and monitor.jsonl + monitor.png with --monitor"
    )
    spec: str | None = option(None, "a TemperatureSpec JSON file to generate under (temperatures and RoPE extension)")
    monitor: bool = option(False, "record attention per generated token and flag departures from the reference")
    every: int = option(1, "with --monitor: record every k-th generated token")
    sample: bool = option(False, "sample (softmax temperature 1) instead of greedy decoding")
    seed: int = option(0, "seed of the sampling")
    reference: str | None = option(
        None, "with --monitor: a reference.json of an earlier run (or measure's stats.json) instead of measuring one"
    )
    reference_text: str = option("stdlib", "with --monitor: held-out text of the reference at the trained length")
    reference_docs: int = option(8, "with --monitor: documents (rows) of the reference")
    window: int = option(DEFAULT_WINDOW, "with --monitor: flags compare the mean of a row's last WINDOW recorded steps")
    quantile: float = option(
        DEFAULT_QUANTILE, "with --monitor: each flag's margin is this quantile of the reference's spread"
    )
    stop_on: tuple[str, ...] = option(
        (),
        f"with --monitor: stop at the first step raising one of these flags ({','.join(FLAGS)})",
        parse=options.names,
    )
    progress_bar: bool = option(False, "a progress bar instead of one line per step (the text streams to stdout)")
    overwrite: bool = option(False, "replace the results already in --out")

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "every", "window", "reference_docs"):
            checks.positive_int(name, getattr(self, name))
        if not 0.5 < float(self.quantile) < 1:
            raise ValueError(f"quantile={self.quantile!r} is not allowed; expected a number in (0.5, 1)")
        for i, flag in enumerate(self.stop_on):
            checks.choice(f"stop_on[{i}]", flag, FLAGS)
        for name in ("prompt_file", "spec", "reference"):
            path = getattr(self, name)
            readable = path is not None and (Path(path).is_file() or (name == "prompt_file" and _stream(Path(path))))
            if path is not None and not readable:
                why = "a folder, not a file" if Path(path).is_dir() else "no such file"
                raise ValueError(f"{name}={path!r} is not allowed: {why}")
        self._check_monitor_options()

    def _check_monitor_options(self) -> None:
        """The options that only shape ``--monitor``, refused without it (they would be ignored)."""
        if self.monitor:
            return
        defaults = {f.name: f.default for f in fields(self)}
        for name in ("every", "reference", "reference_text", "reference_docs", "window", "quantile", "stop_on"):
            if getattr(self, name) != defaults[name]:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not allowed without monitor=True: it shapes the monitor, "
                    "which is off; add monitor=True or leave it out"
                )


def _stream(path: Path) -> bool:
    """A FIFO or character device (``--prompt-file <(...)``, ``/dev/stdin``): read once, as a file."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
