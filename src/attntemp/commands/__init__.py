"""CLI sub-commands. The plain ones (a config, a runner, its result printed) are rows of one lazy
table, :data:`PLAIN_COMMANDS` (lm-evaluation-harness's lazy task registry is the model): a row names its
config and runner by import path, and nothing is imported until the command is registered; the
others are modules here defining ``register(subparsers)`` (``advise``, ``demo``, ``report``, ...).
``attntemp.cli`` builds the parser from both."""

from __future__ import annotations

import argparse
import functools
import importlib
from dataclasses import dataclass
from typing import Any

from ..utils.options import add_options, from_args
from .output import emit


@dataclass(frozen=True)
class Plain:
    """A plain command: its one-line help, its config and runner (``"module:name"`` under
    ``attntemp``; ``runner(config)`` returns a result with ``markdown()`` and ``to_dict()``), and
    the result's attribute that makes the exit code 1 (``"differs"``: when true; ``"!passed"``:
    when false; None: always 0)."""

    help: str
    config: str
    runner: str
    fails_when: str | None = None


PLAIN_COMMANDS: dict[str, Plain] = {
    "measure": Plain(
        "entropy, sink and recency of attention per layer/head/position",
        "analysis.config:MeasureConfig", "analysis.run:run_measure",
    ),
    "sweep": Plain(
        "sweep multipliers x lengths x RoPE methods x tasks (resumable)",
        "evaluate.sweep.config:SweepConfig", "evaluate.sweep.run:run_sweep",
    ),
    "tune": Plain(
        "tune m = 1/T (global search, entropy matching or gradient)", "tune.config:TuneConfig", "tune.runner:run_tune"
    ),
    "eval": Plain(
        "lm-eval tasks without and with a spec, in one paired table (needs [eval])",
        "evaluate.harness.config:EvalHarnessConfig", "evaluate.harness.run:run_eval",
    ),
    "bake": Plain(
        "write a checkpoint with the temperature in its weights (plain to serve)",
        "ship.config:BakeConfig", "ship.bake_runner:run_bake",
    ),
    "export": Plain(
        "print an engine's settings for a spec (rope_parameters or flags)",
        "ship.config:ExportConfig", "ship.export:run_export",
    ),
    "audit": Plain(
        "check engines' RoPE scaling and temperature against a model's config.json, per position",
        "ship.config:AuditConfig", "ship.audit.run:run_audit", "differs",
    ),
    "verify": Plain(
        "run llama.cpp or vLLM with the shipped settings and compare with attntemp (KL, perplexity)",
        "ship.config:VerifyConfig", "ship.verify:run_verify", "!passed",
    ),
}  # fmt: skip


# The one-line help of the commands that are modules here (the table's rows carry their own): the
# top-level listing reads it without importing a command's config.
MODULE_HELP: dict[str, str] = {
    "demo": "advise's whole story on one model, as report.html (the default command)",
    "advise": "what should this model run with at --length: diagnose, race candidates on distant context, "
    "confirm, recommend per engine",
    "tables": "print the YaRN and temperature tables",
    "generate": "generate text; --monitor watches attention per token against the trained length",
    "report": "report.md and report.html from sweep.db and evidence in DIR",
    "calibrate": "fit a temperature on held-out logits (Guo et al. 2017)",
    "completion": "print the shell completion script (bash, zsh, tcsh)",
}


def command_help(name: str) -> str:
    """Command ``name``'s one-line help: its row's, or its module's (:data:`MODULE_HELP`)."""
    return PLAIN_COMMANDS[name].help if name in PLAIN_COMMANDS else MODULE_HELP[name]


def load_named(path: str) -> Any:
    """The object ``"module:name"`` names under ``attntemp`` (its module imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(f"attntemp.{module}"), name)


def register_plain(sub: argparse._SubParsersAction, name: str) -> None:
    """The sub-parser of :data:`PLAIN_COMMANDS`'s ``name``: its config's flags; it runs :func:`run_plain`."""
    row = PLAIN_COMMANDS[name]
    p = sub.add_parser(name, help=row.help)
    add_options(p, load_named(row.config))
    p.set_defaults(func=functools.partial(run_plain, name))


def run_plain(name: str, args: argparse.Namespace) -> int:
    """Run :data:`PLAIN_COMMANDS`'s ``name`` on the parsed flags (its runner looked up now, so a test may
    replace it where it is defined), print the result, and return the exit code."""
    row = PLAIN_COMMANDS[name]
    result = load_named(row.runner)(from_args(load_named(row.config), args))
    emit(args, result.markdown(), result.to_dict())
    if row.fails_when is None:
        return 0
    flag = bool(getattr(result, row.fails_when.lstrip("!")))
    return int(flag != row.fails_when.startswith("!"))  # "differs" true, or "!passed" false: 1
