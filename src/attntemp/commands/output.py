"""What a command prints: its human tables, or with ``--json`` one JSON document on stdout (every
command takes the flag; progress bars and errors stay on stderr either way)."""

from __future__ import annotations

import argparse
import json
from typing import Any

JSON_HELP = "print one JSON document on stdout instead of the human tables"


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json`` on ``parser`` (unless its config already has the flag, as ``tables`` does)."""
    if "--json" not in parser._option_string_actions:
        parser.add_argument("--json", dest="json_out", action="store_true", default=False, help=JSON_HELP)


def emit(args: argparse.Namespace, human: str, data: Any) -> None:
    """``human`` for a person; ``data`` as one JSON document under ``--json``."""
    if getattr(args, "json_out", False) or getattr(args, "json", False) is True:
        print(json.dumps(data, indent=1, default=str))
    else:
        print(human)
