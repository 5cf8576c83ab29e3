"""The one markdown table writer: every table attntemp prints or writes goes through
:func:`markdown_table` (as lm-eval's ``make_table`` does for its results).

Cells are written as given (``str`` of each), without escaping: a caller keeps ``|`` out of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

RULES = {"-": "---", "l": ":---", "c": ":---:", "r": "---:"}  # a column's rule by its alignment


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown_table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """``headers`` and ``rows`` as a markdown table, one line per row (no trailing newline).

    ``align``: one letter per column, ``-`` (none), ``l``, ``c`` or ``r``; None leaves every column
    unaligned (``|---|``)."""
    align = "-" * len(headers) if align is None else align
    if len(align) != len(headers) or any(a not in RULES for a in align):
        raise ValueError(
            f"align={align!r} is not allowed; expected one of {''.join(RULES)} per column ({len(headers)})"
        )
    lines = [_row(headers), "|" + "".join(RULES[a] + "|" for a in align)]
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells; the table has {len(headers)} columns")
        lines.append(_row(r))
    return "\n".join(lines)
