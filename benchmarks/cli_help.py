"""Benchmark: ``attntemp <command> --help`` in a fresh interpreter, from the flags snapshot (what the
CLI runs) against the real parser (which imports the command's module, torch and transformers).

Goal: help <= 0.5 s. Prints JSON: per command the median seconds of each path with its bootstrap
95% interval, the paired ratio, the CPU and the load average; runs interleaved in one process.

    python benchmarks/cli_help.py [--commands tune,eval,sweep,demo] [--repeats 5]
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from _harness import BenchOptions, machine, median_interval, times_interleaved

from attntemp.utils.options import from_argv, names, option

REAL = "import sys; from attntemp.cli import build_parser; build_parser(sys.argv[1:2]).parse_args(sys.argv[1:])"


@dataclass(frozen=True, kw_only=True)
class CliHelpBench(BenchOptions):
    """The commands whose help is timed."""

    commands: tuple[str, ...] = option(("tune", "eval", "sweep", "demo"), "attntemp commands, comma list", parse=names)


def paths(command: str):
    def run(argv: list[str]):
        return lambda: subprocess.run(argv, check=True, capture_output=True)

    return {
        "cli_help": run([sys.executable, "-m", "attntemp", command, "--help"]),
        "real_parser_help": run([sys.executable, "-c", REAL, command, "--help"]),
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(CliHelpBench, argv, __doc__.split("\n\n")[0])
    results = []
    for command in args.commands:
        runs = times_interleaved(paths(command), args.repeats)
        ratio = median_interval([a / b for a, b in zip(runs["cli_help"], runs["real_parser_help"], strict=True)])
        seconds = {n: median_interval(v) for n, v in runs.items()}
        results.append(
            {
                "command": command,
                "seconds": seconds,
                "cli_over_real": ratio,
                "goal_met": seconds["cli_help"]["median"] <= 0.5,
            }
        )
    print(
        json.dumps(
            {
                "benchmark": "cli_help",
                "goal": "cli_help <= 0.5 s",
                "results": results,
                "repeats": args.repeats,
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
