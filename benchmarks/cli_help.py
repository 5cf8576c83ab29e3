"""Benchmark: ``attntemp <command> --help`` in a fresh interpreter (the real parser, built from the
command's torch-free config) beside the bare interpreter's start-up and beside importing torch
(what the help would cost if a config still imported it).

Goal: help within 0.09 s of wall time (0.07-0.09 s before, from a flags snapshot that this
replaced). Prints JSON: per command the median seconds of each path with its bootstrap 95%
interval, help over the bare interpreter (the paired ratio) and the seconds attntemp adds, the
CPU and the load average; the paths run interleaved in one process.

    python benchmarks/cli_help.py [--commands top,tune,eval,sweep,advise,demo] [--repeats 7]
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from _harness import BenchOptions, machine, median_interval, times_interleaved

from attntemp.utils.options import from_argv, names, option, reuse

GOAL_S = 0.09


@dataclass(frozen=True, kw_only=True)
class CliHelpBench(BenchOptions):
    """The commands whose help is timed (``top``: ``attntemp --help``)."""

    commands: tuple[str, ...] = option(
        ("top", "tune", "eval", "sweep", "advise", "demo"), "attntemp commands, comma list", parse=names
    )
    repeats: int = reuse(BenchOptions, "repeats", 7)


def paths(command: str) -> dict:
    def run(argv: list[str]):
        return lambda: subprocess.run(argv, check=True, capture_output=True)

    line = ["--help"] if command == "top" else [command, "--help"]
    return {
        "cli_help": run([sys.executable, "-m", "attntemp", *line]),
        "bare_python": run([sys.executable, "-c", "pass"]),
        "import_torch": run([sys.executable, "-c", "import torch"]),
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(CliHelpBench, argv, __doc__.split("\n\n")[0])
    results = []
    for command in args.commands:
        runs = times_interleaved(paths(command), args.repeats)
        pairs = zip(runs["cli_help"], runs["bare_python"], strict=True)
        seconds = {n: median_interval(v) for n, v in runs.items()}
        results.append(
            {
                "command": command,
                "seconds": seconds,
                "help_over_bare_python": median_interval([a / b for a, b in pairs]),
                "added_s": median_interval([a - b for a, b in zip(runs["cli_help"], runs["bare_python"], strict=True)]),
                "goal_met": seconds["cli_help"]["median"] <= GOAL_S,
            }
        )
    report = {"benchmark": "cli_help", "goal": f"cli_help <= {GOAL_S} s", "results": results}
    print(json.dumps({**report, "repeats": args.repeats, "machine": machine()}, indent=2))


if __name__ == "__main__":
    main()
