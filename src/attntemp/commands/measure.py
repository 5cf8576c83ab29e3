"""``attntemp measure``: attention statistics of a model on long text, with plots and JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from .. import data, plots
from ..models import load_model
from ..observe import measure
from ..spec import TemperatureSpec
from ..tiny_eval import heldout_windows


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="entropy, sink and recency of attention per layer/head/position")
    p.add_argument("--model", default="tiny", help="tiny (default), smollm2, a hub id or a folder")
    p.add_argument("--text", default="stdlib", help="stdlib (default), gutenberg:<book>, a file or folder")
    p.add_argument("--length", type=int, required=True, help="tokens per sequence")
    p.add_argument("--docs", type=int, default=1, help="held-out documents (batch rows)")
    p.add_argument("--spec", help="a TemperatureSpec JSON file (temperatures and RoPE extension)")
    p.add_argument("--buckets", type=int, default=16, help="query-position buckets")
    p.add_argument("--sink-tokens", type=int, default=4)
    p.add_argument("--recent-tokens", type=int, default=64)
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=run)


def summary_table(stats) -> str:
    rows = ["| layer | entropy (nats) | H / ln n | max weight | sink mass | recent mass | distance |",
            "|---|---|---|---|---|---|---|"]
    names = ("entropy", "norm_entropy", "max_weight", "sink_mass", "recent_mass", "mean_distance")
    tables = [stats.per_head(n).mean(1) for n in names]
    for layer in range(stats.shape[0]):
        rows.append(f"| {layer} | " + " | ".join(f"{t[layer]:.3f}" for t in tables) + " |")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    spec = TemperatureSpec.load(args.spec) if args.spec else None
    docs = data.load_text(args.text)
    model, tok = load_model(args.model)
    ids = heldout_windows(tok, args.length, n=args.docs, docs=docs)
    stats = measure(model, ids, spec, n_buckets=args.buckets, sink_tokens=args.sink_tokens,
                    recent_tokens=args.recent_tokens)
    stats.meta.update(model=args.model, text=args.text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stats.save(out / "stats.json")
    pngs = plots.save_all(stats, out)
    table = summary_table(stats)
    (out / "summary.md").write_text(f"# attention statistics: {args.model}, L={args.length}\n\n{table}\n")
    print(table)
    print(json.dumps({"out": str(out), "plots": [p.name for p in pngs],
                      "mean_entropy": float(np.mean(stats.per_head("entropy")))}))
    return 0
