"""The README's monitor figure and table: passkey retrieval watched token by token by
``attntemp.monitor`` at the trained length and at ``--scale`` x it (m = 1 and YaRN), the demo's
monitor section on its own (``attntemp.analysis.monitor_demo.monitor_section``).

    python scripts/monitor_figure.py --model tiny --trials 16 --out docs/img   # ~2 min on 2 cores

Writes ``OUT/<model>_monitor_passkey.png`` and prints the markdown section (table with Wilson and
bootstrap 95% intervals).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from attntemp.analysis.monitor_demo import monitor_section
from attntemp.hf.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--scale", type=float, default=4.0, help="the long setting: scale x the trained length")
    ap.add_argument("--trials", type=int, default=16, help="passkey prompts per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/img", help="folder of the PNG")
    args = ap.parse_args()
    model, tok = load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        lines = monitor_section(model, tok, Path(tmp), args.scale, args.trials, args.seed)
        png = Path(args.out) / f"{Path(args.model).name}_monitor_passkey.png"
        png.parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / "monitor_passkey.png").replace(png)
    print("\n".join(line.replace("monitor_passkey.png", str(png)) for line in lines))


if __name__ == "__main__":
    main()
