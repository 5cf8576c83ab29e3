"""Learn per-head temperatures of the shipped tiny model at a long length; print the evidence JSON.

    python scripts/learn_tiny.py --length 512 --steps 20 --rope yarn --out out/learn_tiny

Only the temperatures train (every weight frozen); see ``attntemp.tune.gradient.run_gradient_tuning``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from attntemp.hf.introspect import trained_length
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.ops.spec import GRANULARITIES
from attntemp.tune.gradient import GradientOptions, run_gradient_tuning
from attntemp.tune.runner import TuneConfig
from attntemp.tune.train import TrainOptions
from attntemp.utils import checks
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class LearnTinyConfig:
    """The gradient run: its length, steps, RoPE, granularity, schedule and sizes."""

    length: int = option(512, "training and evaluation length N")
    steps: int = option(20, "gradient steps")
    rope: str = option("none", "RoPE extension: none or yarn (YaRN's frequencies, attention_factor 1)")
    granularity: str = reuse(TuneConfig, "granularity", "head")
    schedule: str = option("none", "none, or log_length: also learn a slope per head")
    lr: float = option(0.05, "Adam's learning rate for the temperatures")
    n_train: int = option(8, "training windows")
    n_eval: int = option(8, "evaluation windows")
    batch_size: int = option(1, "windows per step")
    model: str = reuse(ModelOptions, "model")
    out: str = option("out/learn_tiny", "output folder")

    def __post_init__(self) -> None:
        checks.choice("rope", self.rope, ("none", "yarn"))
        checks.choice("granularity", self.granularity, GRANULARITIES)
        checks.choice("schedule", self.schedule, ("none", "log_length"))


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
    args = from_argv(LearnTinyConfig, argv, __doc__)
    torch.manual_seed(0)
    model, tok = load_model(args.model)
    rope = rope_for(args.rope, args.length, trained_length(model))
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
