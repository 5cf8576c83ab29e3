"""``attntemp sweep``: every (length, rope, multiplier, task) point into DIR/sweep.db, resumable."""

from __future__ import annotations

import argparse

from ..report import best_table
from ..sweep import SweepConfig, parse_multipliers, run_sweep


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"lengths={text!r} is not allowed; expected comma-separated integers") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep multipliers x lengths x RoPE methods x tasks (resumable)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--text", default="stdlib", help="held-out documents: stdlib, gutenberg:<book>, a path")
    p.add_argument("--lengths", default="512,1024")
    p.add_argument("--rope", default="none,yarn", help="comma list of none, linear, ntk, dynamic, yarn")
    p.add_argument("--multipliers", default="0.8:1.4:0.1", help="m = 1/T: LO:HI:STEP or a comma list")
    p.add_argument("--tasks", default="perplexity", help="comma list of perplexity, passkey, needle")
    p.add_argument("--docs", type=int, default=4, help="held-out documents per point")
    p.add_argument("--trials", type=int, default=20, help="passkey/needle trials per point (and depth)")
    p.add_argument("--gutenberg", help="haystack for needle, e.g. gutenberg:melville-moby_dick")
    p.add_argument("--sequential", action="store_true", help="one forward per multiplier (no batching)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = SweepConfig(out=args.out, model=args.model, text=args.text, lengths=_ints(args.lengths),
                      rope=tuple(args.rope.split(",")), multipliers=parse_multipliers(args.multipliers),
                      tasks=tuple(args.tasks.split(",")), n_docs=args.docs, trials=args.trials,
                      gutenberg=args.gutenberg, batched=not args.sequential)
    store = run_sweep(cfg)
    rows = store.rows()
    store.close()
    trained = next((r["metrics"].get("tail_start") for r in rows if r["task"] == "perplexity"
                    and r["length"] > r["metrics"].get("tail_start", r["length"])), None)
    print(best_table(rows, trained))
    print(f"{len(rows)} points in {args.out}/sweep.db; `attntemp report {args.out}` makes the plots")
    return 0
