"""``attntemp export``: a spec's global temperature as transformers / vLLM / llama.cpp settings."""

from __future__ import annotations

import argparse

from ..engines import export
from ..spec import TemperatureSpec


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="print an engine's settings for a spec (rope_parameters or flags)")
    p.add_argument("--spec", required=True, help="a TemperatureSpec JSON file")
    p.add_argument("--engine", required=True, help="transformers, vllm or llama.cpp")
    p.add_argument("--trained-length", type=int, help="the model's trained context (YaRN's L0)")
    p.add_argument("--rope-theta", type=float, help="the model's rope_theta, written into rope_parameters")
    p.add_argument("--gguf-arch", help="llama.cpp: the GGUF's general.architecture (for --override-kv)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = TemperatureSpec.load(args.spec)
    result = export(spec, args.engine, trained_length=args.trained_length, rope_theta=args.rope_theta,
                    gguf_arch=args.gguf_arch)
    print(result.render())
    return 0
