"""Write ``src/attntemp/assets/cli_flags.json``, the flags snapshot ``--help`` and completion answer
from (:mod:`attntemp.cli_flags`), from the real parsers; run after changing a command's flags.

    python scripts/cli_flags.py
"""

from __future__ import annotations

from dataclasses import dataclass

from attntemp.cli import build_parser
from attntemp.cli_flags import write
from attntemp.utils.options import from_argv


@dataclass(frozen=True)
class CliFlagsConfig:
    """No options: the snapshot goes where the package reads it."""


def main(argv: list[str] | None = None) -> None:
    from_argv(CliFlagsConfig, argv, __doc__.split("\n\n")[0])  # --help, and no other flag
    print(f"wrote {write(build_parser())}")


if __name__ == "__main__":
    main()
