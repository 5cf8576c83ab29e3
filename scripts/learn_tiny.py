"""Learn per-head temperatures of the shipped tiny model at a long length; print the evidence JSON.

    python scripts/learn_tiny.py --length 512 --steps 20 --rope yarn --out out/learn_tiny

Only the temperatures train (every weight frozen); see ``attntemp.tune.gradient.run_gradient_tuning``.
"""

from __future__ import annotations

import argparse
import json

import torch

from attntemp.hf.loading import load_model
from attntemp.ops.spec import GRANULARITIES
from attntemp.tune.gradient import GradientOptions, run_gradient_tuning
from attntemp.tune.train import TrainOptions


def rope_for(kind: str, length: int, trained_length: int) -> dict | None:
    """``yarn``: YaRN frequencies for ``length`` with attention_factor 1 (the temperature is learned)."""
    if kind == "none":
        return None
    factor = max(1.0, length / trained_length)
    return {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": trained_length,
        "attention_factor": 1.0,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--length", type=int, default=512, help="training and evaluation length N")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rope", choices=("none", "yarn"), default="none")
    ap.add_argument("--granularity", choices=GRANULARITIES, default="head")
    ap.add_argument("--schedule", choices=("none", "log_length"), default="none")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--n-train", type=int, default=8)
    ap.add_argument("--n-eval", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out", default="out/learn_tiny")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model, tok = load_model(args.model)
    rope = rope_for(args.rope, args.length, model.config.max_position_embeddings)
    schedule = None if args.schedule == "none" else args.schedule
    train = TrainOptions(
        steps=args.steps, lr=args.lr, batch_size=args.batch_size, granularity=args.granularity, schedule=schedule,
        rope=rope,
    )  # fmt: skip
    opts = GradientOptions(lengths=(args.length,), train=train, n_train=args.n_train, n_eval=args.n_eval)
    _, evidence = run_gradient_tuning(model, tok, opts, args.out)
    print(json.dumps(evidence, indent=2))
    return evidence


if __name__ == "__main__":
    main()
