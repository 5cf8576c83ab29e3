"""``attntemp tables``: YaRN's attention factor and what a temperature does to the weights."""

from __future__ import annotations

import argparse
import json

from ..report.config import TablesConfig
from ..utils.options import add_options, from_args
from . import command_help


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tables", help=command_help("tables"))
    add_options(p, TablesConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..report import tables

    cfg = from_args(TablesConfig, args)
    yarn, temp = tables.yarn_table(), tables.temperature_table()
    if cfg.json:
        print(json.dumps({"yarn": yarn, "temperature": temp}, indent=2))
        return 0
    print("YaRN (arXiv:2309.00071): attention_factor t = 0.1 ln s + 1 multiplies cos and sin,")
    print("so the logits are multiplied by m = t^2; T = 1/m. sqrt_variant is a tutorial's")
    print("sqrt(t), NOT the paper's.\n")
    print(tables.markdown(yarn))
    print("\nTemperature T divides the logits (m = 1/T multiplies them). ratio: weight ratio of")
    print("two logits 5 apart (e^(5/T)); entropy_over_ln_n: entropy of a random 64-key row / ln 64.\n")
    print(tables.markdown(temp))
    return 0
