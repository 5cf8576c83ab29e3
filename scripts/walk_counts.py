"""How far one value travels through attntemp's own calls while a command runs (issue 53's "walk"):
the command runs in this process under ``sys.setprofile``, and every call of a function in the
``attntemp`` package that receives the value is counted.

- ``functions``: the attntemp functions (and methods) called with the value (an argument holds
  it, up to three levels into tuples, mappings such as a ``Rope``, and dataclasses such as a spec,
  a candidate or a plan), each counted once however often it runs;
- ``files``: the modules those functions are in;
- ``climbs``: the functions that return the value to their caller (it went down, came back up,
  and is handed on again from higher up);
- ``calls``: every such call as it ran (a loop counts each turn).

Two values: ``scale``, YaRN's s = length / L0 of ``attntemp advise`` on the tiny model (a float
equal to it, or a RoPE setting whose factor it is); ``model``, the loaded model of ``attntemp tune``
on the tiny model (any ``PreTrainedModel``). Run it on another checkout's package to compare::

    python scripts/walk_counts.py --value scale --out /tmp/walk
    PYTHONPATH=/tmp/before/src python scripts/walk_counts.py --value scale --out /tmp/walk-before
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import math
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attntemp.utils import checks
from attntemp.utils.options import from_argv, option

LENGTH = 608  # s = 608 / 256 = 2.375 on the tiny model: a float no other setting of the run equals
TRAINED = 256
VALUES = ("scale", "model")
DEPTH = 3


@dataclass(frozen=True, kw_only=True)
class WalkOptions:
    """Which value to follow, and where the command writes."""

    value: str = option("scale", f"the value followed: {', '.join(VALUES)}")
    out: str | None = option(None, "the command's --out (default: a temporary folder)")

    def __post_init__(self) -> None:
        checks.choice("value", self.value, VALUES)


def command(value: str, out: str) -> list[str]:
    """The command line the value is followed through (small: the walk, not the result, is counted)."""
    if value == "scale":
        return ["advise", "--length", str(LENGTH), "--race-windows", "2", "--min-windows", "2", "--block", "2",
                "--docs", "2", "--trials", "2", "--retrieval-per-window", "1", "--no-tune", "--check-length", "0",
                "--quiet", "--out", out]  # fmt: skip
    return ["tune", "--length", "512", "--method", "search", "--grid", "3", "--iters", "1", "--docs", "2",
            "--trials", "2", "--quiet", "--out", out]  # fmt: skip


def carrier(value: str) -> Callable[[Any], bool]:
    """Whether an object holds the value (see the module doc)."""
    if value == "model":
        from transformers import PreTrainedModel

        return lambda x: isinstance(x, PreTrainedModel)
    s = LENGTH / TRAINED
    return lambda x: isinstance(x, float) and math.isclose(x, s, rel_tol=1e-9)


def holds(x: Any, hit: Callable[[Any], bool], depth: int = DEPTH) -> bool:
    """``hit`` on ``x`` or, ``depth`` levels down, on its items, values or dataclass fields."""
    if hit(x):
        return True
    if depth == 0 or isinstance(x, (str, bytes, int, float, type(None))):
        return False
    if isinstance(x, Mapping):
        try:  # an object under construction (its __init__ is a call too) may not read yet
            inner: Any = list(x.values())[:64]
        except Exception:
            return False
    elif isinstance(x, (tuple, list)):
        inner = x[:64]
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        inner = [getattr(x, f.name, None) for f in dataclasses.fields(x)]  # a missing field reads None
    else:
        return False
    return any(holds(y, hit, depth - 1) for y in inner)


def follow(argv: list[str], hit: Callable[[Any], bool]) -> dict[str, Any]:
    """Run ``attntemp argv`` under a profiler that counts the walk."""
    from attntemp.cli import main

    calls: collections.Counter[str] = collections.Counter()  # "file:function" -> calls with the value
    climbs: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        where = code.co_filename
        if "/attntemp/" not in where or "/assets/" in where:
            return
        name = f"{where.split('/attntemp/', 1)[1]}:{code.co_qualname}"
        if event == "call":
            n = code.co_argcount + code.co_kwonlyargcount
            if any(holds(frame.f_locals.get(v), hit) for v in code.co_varnames[:n]):
                calls[name] += 1
        elif event == "return" and arg is not None and holds(arg, hit):
            climbs.add(name)

    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the command's own result: the counts go to stdout
            code = main(argv)
    finally:
        sys.setprofile(None)
    files = collections.Counter(name.split(":")[0] for name in calls)
    return {
        "exit": code,
        "functions": len(calls),
        "files": len(files),
        "climbs": len(climbs),
        "calls": sum(calls.values()),
        "functions_per_file": dict(files.most_common()),
        "climbing": sorted(climbs),
    }


def main(argv: list[str] | None = None) -> None:
    opts = from_argv(WalkOptions, argv, __doc__.split("\n\n")[0])
    import attntemp

    with tempfile.TemporaryDirectory() as tmp:
        out = opts.out or str(Path(tmp) / "out")
        found = follow(command(opts.value, out), carrier(opts.value))
    where = str(Path(attntemp.__file__).parent)
    print(json.dumps({"value": opts.value, "package": where, "command": command(opts.value, "OUT"), **found}, indent=1))


if __name__ == "__main__":
    main()
