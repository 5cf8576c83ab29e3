"""Benchmark: SmolLM2 forward at 2048 tokens on CPU, patched with a per-head spec over unpatched.

Goal: patched / unpatched <= 1.05. Timings are interleaved (plain, patched, plain, ...) in one run.

    python benchmarks/model_overhead.py [--model smollm2] [--length 2048] [--repeats 3]
"""

from __future__ import annotations

import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from _harness import BenchOptions, time_interleaved

import attntemp
from attntemp.analysis.run import MeasureConfig
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, reuse


@dataclass(frozen=True, kw_only=True)
class OverheadBench(BenchOptions):
    """The model and the length of its timed forward."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    length: int = reuse(MeasureConfig, "length", 2048)
    repeats: int = reuse(BenchOptions, "repeats", 3)


def stdlib_ids(tok, length: int) -> torch.Tensor:
    text = "".join(p.read_text() for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("[a-d]*.py")))
    return tok(text, return_tensors="pt").input_ids[:, :length]  # [1, L]


def main(argv: list[str] | None = None) -> None:
    args = from_argv(OverheadBench, argv, __doc__.split("\n\n")[0])
    model, tok = attntemp.load_model(args.model)
    cfg = model.config
    ids = stdlib_ids(tok, args.length)
    heads = torch.linspace(0.8, 1.25, cfg.num_hidden_layers * cfg.num_attention_heads)
    spec = attntemp.TemperatureSpec.per_head(heads.reshape(cfg.num_hidden_layers, -1))

    def plain():
        with torch.no_grad():
            model(ids)

    def patched():
        with torch.no_grad(), attntemp.patch(model, spec):
            model(ids)

    t = time_interleaved({"unpatched": plain, "patched_per_head": patched}, args.repeats)
    print(
        json.dumps(
            {
                "benchmark": "model_overhead",
                "model": args.model,
                "tokens": int(ids.shape[1]),
                "threads": torch.get_num_threads(),
                "seconds": t,
                "patched_over_unpatched": t["patched_per_head"] / t["unpatched"],
                "goal": "<= 1.05",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
