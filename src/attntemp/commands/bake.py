"""``attntemp bake``: fold a TemperatureSpec into a checkpoint's weights and config, checked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..baking import check_out_dir, save_baked
from ..models import load_model
from ..spec import TemperatureSpec


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bake", help="write a checkpoint with the temperature in its weights (plain to serve)")
    p.add_argument("--model", default="tiny", help="tiny (default), smollm2, a hub id or a folder")
    p.add_argument("--spec", required=True, help="a TemperatureSpec JSON file (multipliers m = 1/T, RoPE)")
    p.add_argument("--out", required=True, help="output folder (must be new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--check-tokens", type=int, default=64, help="tokens in the fp32 logit check")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = TemperatureSpec.load(args.spec)
    check_out_dir(Path(args.out), args.overwrite)  # before the (slow) model load
    model, tok = load_model(args.model)
    result = save_baked(model, tok, spec, args.out, overwrite=args.overwrite, check_tokens=args.check_tokens)
    targets = ", ".join(sorted({step.target for step in result.layers}))
    diff, n = result.max_abs_diff, result.tokens
    print(f"baked {len(result.layers)} layers ({targets}) into {result.path}")
    print(f"max abs diff, reloaded vs patched logits (fp32, {n} tokens): {diff:.3g}")
    print(json.dumps({"path": str(result.path), "max_abs_diff": diff, "tokens": n}))
    return 0
