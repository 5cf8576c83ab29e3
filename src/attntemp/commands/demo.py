"""``attntemp demo``: entropy, multiplier sweep, passkey, entropy matching and bake, in one report."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..demo import DemoConfig, run_demo


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole story on one model, as report.html (the default command)")
    p.add_argument("--model", default="tiny", help="tiny (default), smollm2, or a folder")
    p.add_argument("--out", default="attntemp-demo")
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--scales", default="4,8", help="lengths as multiples of the trained length")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        scales = tuple(int(x) for x in args.scales.split(","))
    except ValueError:
        raise ValueError(f"scales={args.scales!r} is not allowed; expected comma-separated integers") from None
    page = run_demo(DemoConfig(out=args.out, model=args.model, scales=scales, n_docs=args.docs,
                               trials=args.trials))
    text = (Path(args.out) / "report.md").read_text()
    print(text)
    print(f"report: {page.resolve()}")
    return 0
