"""Write ``src/attntemp/assets/cli_flags.json``, the flags snapshot ``--help`` and completion answer
from (:mod:`attntemp.cli_flags`), from the real parsers; run after changing a command's flags.

    python scripts/cli_flags.py
"""

from __future__ import annotations

from attntemp.cli import build_parser
from attntemp.cli_flags import write_snapshot

if __name__ == "__main__":
    print(f"wrote {write_snapshot(build_parser())}")
