"""The README's monitor figure and table: passkey retrieval watched token by token by
``attntemp.monitor`` at the trained length and at ``--scale`` x it (m = 1 and YaRN), the demo's
monitor section on its own (``attntemp.analysis.monitor_demo.monitor_section``).

    python scripts/monitor_figure.py --model tiny --trials 16 --out docs/img   # ~2 min on 2 cores

Writes ``OUT/<model>_monitor_passkey.png`` and prints the markdown section (table with Wilson and
bootstrap 95% intervals).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from attntemp.analysis.monitor_demo import monitor_section
from attntemp.evaluate.tasks import EvalOptions
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class MonitorFigureConfig:
    """The model, the long setting, the passkey prompts and where the PNG goes."""

    model: str = reuse(ModelOptions, "model")
    scale: float = option(4.0, "the long setting: scale x the trained length")
    trials: int = reuse(EvalOptions, "trials", 16)
    seed: int = reuse(EvalOptions, "seed")
    out: str = option("docs/img", "folder of the PNG")


def main(argv: list[str] | None = None) -> None:
    args = from_argv(MonitorFigureConfig, argv, __doc__.split("\n\n")[0])
    model, tok = load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        lines = monitor_section(model, tok, Path(tmp), args.scale, args.trials, args.seed)
        png = Path(args.out) / f"{Path(args.model).name}_monitor_passkey.png"
        png.parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / "monitor_passkey.png").replace(png)
    print("\n".join(line.replace("monitor_passkey.png", str(png)) for line in lines))


if __name__ == "__main__":
    main()
