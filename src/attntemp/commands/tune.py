"""``attntemp tune``: a TemperatureSpec for one model and length, with held-out evidence."""

from __future__ import annotations

import argparse

from ..evidence import TuneConfig, run_tune


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune m = 1/T (global search, entropy matching or gradient)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--text", default="stdlib")
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--granularity", default="global", help="global, layer or head")
    p.add_argument("--objective", default="perplexity", help="perplexity, passkey or entropy")
    p.add_argument("--method", default="search", help="search (1-D / entropy matching) or gradient")
    p.add_argument("--rope", default="none", help="none, linear, ntk, dynamic or yarn (s = N / trained)")
    p.add_argument("--tasks", default="perplexity,passkey", help="evidence tasks")
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--steps", type=int, default=60, help="gradient steps (method gradient)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = TuneConfig(out=args.out, model=args.model, text=args.text, length=args.length,
                     granularity=args.granularity, objective=args.objective, rope=args.rope,
                     method=args.method, tasks=tuple(args.tasks.split(",")), n_docs=args.docs,
                     trials=args.trials, steps=args.steps)
    run_tune(cfg)
    print(open(f"{args.out}/evidence.md").read())
    print(f"spec: {args.out}/spec.json")
    return 0
