"""The ``attntemp`` command line: one sub-command per row of ``attntemp.commands``' table or module.

Each command's flags come from its config (a torch-free module: ``tests/test_cli_help.py`` holds
that), so the one parser of the command being run answers ``--help``, argparse's errors and
``completion`` without importing torch or transformers; the runner and its libraries are
imported only when the command runs. The top-level listing shows each command's one-line help
(:func:`attntemp.commands.command_help`), no command's config imported. Bad input (a
``ValueError`` named by field and value, an ``OSError``, a damaged database: :func:`_bad_input`)
becomes one line on stderr naming the flag (open progress bars ended first) and exit code 2,
never a traceback; a program attntemp drove that failed (an engine:
:class:`~attntemp.utils.errors.ExternalToolError`) is one line and exit code 1; Ctrl-C is one
line (:func:`interrupted`, saying whether a rerun resumes) and exit code 130; see
``docs/errors.md``.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import re
import shutil
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from .utils.errors import ExternalToolError
from .utils.resources import prefer_huge_pages

# Sub-command modules under attntemp.commands, in the order `attntemp --help` lists them.
COMMANDS = (
    "demo",
    "advise",
    "tables",
    "measure",
    "generate",
    "sweep",
    "tune",
    "eval",
    "report",
    "bake",
    "export",
    "verify",
    "audit",
    "calibrate",
    "completion",
)
DEFAULT_COMMAND = "demo"


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The top-level parser (``--version``) and its sub-command group, empty."""
    from .utils.version import VERSION

    parser = argparse.ArgumentParser(
        prog="attntemp",
        description="Attention temperature: apply, measure, tune and ship it. "
        "Temperature T divides the logits; the multiplier m = 1/T multiplies them.",
    )
    parser.add_argument("--version", action="version", version=f"attntemp {VERSION}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def build_parser(only: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command's flags, or only those of the commands in ``only`` (the
    others listed by name and their one-line help: their configs not imported)."""
    from .commands import PLAIN_COMMANDS, command_help, register_plain
    from .commands.output import add_json_flag

    parser, sub = _top_parser()
    for name in COMMANDS:
        if only is None or name in only:
            if name in PLAIN_COMMANDS:  # a row of the lazy table
                register_plain(sub, name)
            else:
                importlib.import_module(f"attntemp.commands.{name}").register(sub)
            add_json_flag(sub.choices[name])
        else:
            sub.add_parser(name, help=command_help(name), add_help=False)
    return parser


def _bad_input(exc: BaseException) -> bool:
    """What bad input raises: ValueError (named by field and value), OSError (a file or folder),
    KeyError, MemoryError (a size no check foresaw), sqlite3's errors (a damaged database)."""
    sqlite3 = sys.modules.get("sqlite3")
    db_error = sqlite3 is not None and isinstance(exc, sqlite3.Error)
    return db_error or isinstance(exc, (ValueError, OSError, KeyError, MemoryError))


DISK_FULL = ("No space left on device", "database or disk is full")  # OSError 28, safetensors, SQLite


def _disk_full(exc: BaseException, args: argparse.Namespace) -> str | None:
    """The one line for a full disk, whoever raised it (an OSError with errno 28, safetensors'
    ``SafetensorError``, SQLite's "database or disk is full"): the file (or ``--out``), the space
    left there, and that a rerun resumes. None for any other error."""
    if not (getattr(exc, "errno", None) == errno.ENOSPC or any(s in str(exc) for s in DISK_FULL)):
        return None
    target = getattr(exc, "filename", None) or getattr(args, "out", None) or "."
    where = Path(str(target)).expanduser().absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free / 2**20
    return (
        f"no space left on the device writing {str(target)!r} ({free:.0f} MiB free there): free some space, "
        "then rerun the same command (what was finished is kept; a rerun resumes)"
    )


def _end_progress_bars() -> None:
    """Close the progress bars still open (tqdm), so the error starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()
    sys.stderr.flush()


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers by name."""
    subs = getattr(parser, "_subparsers", None)
    return dict(getattr(subs._group_actions[0], "choices", {})) if subs is not None else {}


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's own errors (a missing value, an unknown flag) as one line, without the usage."""

    def fail_for(p: argparse.ArgumentParser):
        def fail(message: str):
            p.exit(2, f"{p.prog}: error: {' '.join(message.split())}\n")

        return fail

    for p in (parser, *_commands(parser).values()):
        p.error = fail_for(p)  # type: ignore[method-assign]


def _flags(parser: argparse.ArgumentParser, command: str) -> list[tuple[str, str, bool]]:
    """``(dest, flag, is_switch)`` of the command's options, longest dest first."""
    sub = _commands(parser).get(command)
    found = []
    for action in getattr(sub, "_actions", ()):
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in ("help", "version"):
            found.append((action.dest, longs[0], isinstance(action, argparse._StoreTrueAction)))
    return sorted(found, key=lambda f: -len(f[0]))


def _flagged(message: str, parser: argparse.ArgumentParser, command: str) -> str:
    """The message on one line, each Python argument named as its flag: ``overwrite=True`` ->
    ``--overwrite``, ``n_docs=0`` -> ``--docs=0``, ``lengths[0]=5`` -> ``--lengths[0]=5``."""
    text = " ".join(message.split())
    for dest, flag, switch in _flags(parser, command):
        if switch:
            text = re.sub(rf"(?<![\w.\-]){re.escape(dest)}=True\b", flag, text)
        text = re.sub(rf"(?<![\w.\-\[]){re.escape(dest)}(?=[=\[])", flag, text)
    return re.sub(r"(?<![\w-])(--[\w-]+)=(\([^()]*\))", _as_typed, text)


def _as_typed(match: re.Match[str]) -> str:
    """``--engines=('llama.cpp',)`` -> ``--engines='llama.cpp'``, ``--bracket=(2.0, 1.0)`` ->
    ``--bracket=2,1``: a tuple value as the comma list the user types (anything else kept)."""
    import ast

    from .utils.options import show

    try:
        value = ast.literal_eval(match[2])
    except (ValueError, SyntaxError):
        return match[0]
    if not isinstance(value, tuple):
        return match[0]
    typed = show(value)
    return f"{match[1]}={typed!r}" if not value or any(isinstance(v, str) for v in value) else f"{match[1]}={typed}"


def _library_noise(parser: argparse.ArgumentParser, args: argparse.Namespace) -> AbstractContextManager[None]:
    """For a command with ``--verbose`` (one that loads a model): transformers' bars and warnings
    off for the whole run (the bake's save and reload, generation), unless ``--verbose``."""
    if any(dest == "verbose" for dest, _, _ in _flags(parser, args.command)):
        from .utils.noise import quiet_libraries

        return quiet_libraries(verbose=bool(getattr(args, "verbose", False)))
    return nullcontext()


# Commands whose rerun picks up where an interrupted run stopped, from what it stored in --out
# (advise and demo: scores.db; sweep: sweep.db). tune resumes only a gradient tune's checkpoint.pt
# (:func:`_resumes`); the others start over.
RESUMING = ("advise", "demo", "sweep")


def _resumes(command: str | None, args: argparse.Namespace | None) -> bool:
    """Whether rerunning the interrupted command line resumes from what it left in ``--out``."""
    if command in RESUMING:
        return True
    if command == "tune" and args is not None and getattr(args, "out", None) is not None:
        from .tune.resume import resumable

        # flags not given are absent from ``args`` (their defaults are the config's)
        return resumable(argparse.Namespace(out=args.out, overwrite=bool(getattr(args, "overwrite", False))))
    return False


def interrupted(command: str | None, args: argparse.Namespace | None = None) -> str:
    """The one line Ctrl-C prints: ``attntemp CMD: interrupted`` and, where a rerun resumes,
    ``; rerun the same command to resume``."""
    prefix = f"attntemp {command}" if command else "attntemp"
    return f"{prefix}: interrupted" + ("; rerun the same command to resume" if _resumes(command, args) else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; Ctrl-C (``KeyboardInterrupt``) anywhere in it, from parsing to the
    last write, is one line on stderr (:func:`interrupted`) and exit code 130, never a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prefer_huge_pages()  # before torch is imported: its allocator reads the variable once
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = [DEFAULT_COMMAND, *argv]
    parsed: list[argparse.Namespace] = []
    try:
        return _run(argv, parsed)
    except KeyboardInterrupt:
        _end_progress_bars()
        command = argv[0] if argv[0] in COMMANDS else None
        try:
            line = interrupted(command, parsed[0] if parsed else None)
        except Exception:  # reading --out failed: say no more than is known
            line = interrupted(command, None)
        print(line, file=sys.stderr, flush=True)
        return 130


def _run(argv: list[str], parsed: list[argparse.Namespace]) -> int:
    """:func:`main`'s work: parse ``argv`` (its parsed arguments appended to ``parsed``), run the
    command, and turn bad input into one line and exit code 2."""
    parser = build_parser(only=argv[:1])
    _one_line_errors(parser)
    args = parser.parse_args(argv)  # --help and argparse's errors end here, before torch is imported
    parsed.append(args)
    if getattr(args, "full_parser", False) is None:  # `completion`: every command's flags, not only its own
        args.full_parser = build_parser
    try:
        with _library_noise(parser, args):
            return int(args.func(args) or 0)
    except ExternalToolError as exc:  # the input was fine; the program it drove failed
        _end_progress_bars()
        print(f"attntemp {args.command}: failed: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except Exception as exc:
        if (full := _disk_full(exc, args)) is not None:
            _end_progress_bars()
            print(f"attntemp {args.command}: error: {full}", file=sys.stderr)
            return 2
        if not _bad_input(exc):
            raise  # a bug: the traceback is what a report needs
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, MemoryError):
            msg = f"out of memory ({exc or 'MemoryError'}); use smaller sizes"
        _end_progress_bars()
        print(f"attntemp {args.command}: error: {_flagged(str(msg), parser, args.command)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
