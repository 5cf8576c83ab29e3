"""``attntemp completion SHELL``: the shell's completion script for every command and flag (shtab).

eval "$(attntemp completion bash)"                    # this shell
attntemp completion bash > ~/.local/share/bash-completion/completions/attntemp
attntemp completion zsh > "${fpath[1]}/_attntemp"      # zsh, in a folder of $fpath
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from . import command_help
from .output import emit

SHELLS = ("bash", "zsh", "tcsh")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help=command_help("completion"))
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=run, full_parser=None)  # the CLI hands over its builder: every command's flags


def run(args: argparse.Namespace) -> int:
    import shtab

    build: Callable[[], argparse.ArgumentParser] = args.full_parser
    script = shtab.complete(build(), shell=args.shell)
    emit(args, script, {"shell": args.shell, "script": script})
    return 0
