"""Run command lines of scripts/ and benchmarks/ in this one interpreter (torch imported once), as
``python PATH ARGS...`` would, but stop each right after it parsed its flags: ``--help`` runs for
real (argparse prints and exits), any other line stops at the config it built, so no workload runs.

    python tests/scripts/run_entries.py < jobs.json   # [{"path": "scripts/x.py", "argv": [...]}, ...]

Prints one JSON list, a result per job: ``exit`` (the SystemExit code, or None), ``parsed`` (the
flags were read into a config without an error), ``out`` and ``err`` (what it printed: the head, the tail).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import runpy
import sys
from pathlib import Path
from typing import Any

from attntemp.utils import options


class Parsed(Exception):
    """Raised where a script's flags were read: what follows is its workload, not run here."""


def _stop_after_parsing() -> None:
    """``options.from_argv`` and argparse's ``parse_args`` (for a script without a config) raise
    :class:`Parsed` once the flags are read (and, for a config, converted and checked)."""
    real_from_argv, real_parse_args = options.from_argv, argparse.ArgumentParser.parse_args
    inside = []

    def from_argv(cls: Any, argv: Any = None, description: Any = None) -> Any:
        inside.append(True)
        try:
            real_from_argv(cls, argv, description)
        finally:
            inside.pop()
        raise Parsed

    def parse_args(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        parsed = real_parse_args(self, args, namespace)
        if not inside:
            raise Parsed
        return parsed

    options.from_argv = from_argv
    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]


def run(path: str, argv: list[str]) -> dict[str, Any]:
    """One command line, ``python path *argv``, up to its parsed flags."""
    out, err = io.StringIO(), io.StringIO()
    result: dict[str, Any] = {"exit": None, "parsed": False}
    sys.argv = [path, *argv]
    sys.path.insert(0, str(Path(path).resolve().parent))  # as python puts the script's folder first
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except Parsed:
        result["parsed"] = True
    except SystemExit as exc:
        result["exit"] = exc.code
    except Exception as exc:  # a failure to report, not to stop the other jobs
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        sys.path.pop(0)
    return {**result, "out": out.getvalue()[:3000], "err": err.getvalue()[-3000:]}


def main() -> None:
    jobs = json.load(sys.stdin)
    _stop_after_parsing()
    stdout = sys.stdout
    results = [run(job["path"], job["argv"]) for job in jobs]
    stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
