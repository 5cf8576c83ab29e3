"""``attntemp demo``: entropy, multiplier sweep, passkey, entropy matching and bake, in one report."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import _validate
from ..demo import demo_config, run_demo
from ..sweep import parse_multipliers


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole story on one model, as report.html (the default command)")
    p.add_argument("--model", default="tiny", help="tiny (default), smollm2, or a folder")
    p.add_argument("--out", default="attntemp-demo")
    p.add_argument("--docs", type=int, default=None, help="held-out documents (default 4; 1 for smollm2)")
    p.add_argument("--trials", type=int, default=None, help="passkey trials (default 20; 3 for smollm2)")
    p.add_argument("--scales", default=None, help="lengths as multiples of the trained length "
                   "(default 4,8; 1.5,2 for smollm2)")
    p.add_argument("--multipliers", default=None, help="m = 1/T to sweep (default 0.8:1.6:0.1; "
                   "0.9,1,1.15,1.3 for smollm2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scales = None
    if args.scales is not None:
        try:
            scales = tuple(float(x) for x in args.scales.split(","))
        except ValueError:
            raise ValueError(f"scales={args.scales!r} is not allowed; expected comma-separated numbers") from None
        for i, s in enumerate(scales):
            _validate.at_least(f"scales[{i}]", s, 1.0)
    multipliers = parse_multipliers(args.multipliers) if args.multipliers else None
    cfg = demo_config(args.model, out=args.out, scales=scales, n_docs=args.docs, trials=args.trials,
                      multipliers=multipliers)
    page = run_demo(cfg)
    text = (Path(args.out) / "report.md").read_text()
    print(text)
    print(f"report: {page.resolve()}")
    return 0
