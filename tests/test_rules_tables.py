"""Rule: every markdown table in the package is written by one function,
:func:`attntemp.utils.tables.markdown_table`; no other module spells a row or a rule line itself.
Read from the source with ``ast``: every string literal, and every literal piece of an f-string."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "attntemp"
WRITER = Path("utils", "tables.py")
# the start of a row or rule line ("| a |", "|---|", "|:--|") or a column rule ("---|", "--:|")
TABLE = re.compile(r"^\|[ :-]|--:?\|", re.MULTILINE)


def table_strings(root: Path) -> list[str]:
    """``path:line: text`` of each string literal under ``root`` that writes part of a markdown table
    (docstrings left out: they may show one)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root) == WRITER:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if TABLE.search(node.value):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def test_markdown_tables_are_written_once():
    found = table_strings(SRC)
    assert not found, "write markdown tables with attntemp.utils.tables.markdown_table:\n" + "\n".join(found)


def test_the_rule_sees_a_hand_written_table(tmp_path):
    (tmp_path / "m.py").write_text(
        'def t(rows):\n    """| a | b |"""\n'
        '    lines = ["| a | b |", "|" + "---|" * 2]\n'
        '    return lines + [f"| {x} | {y} |" for x, y in rows] + [" | ".join(rows[0])]\n'
    )
    assert [f.split(": ", 1)[1] for f in table_strings(tmp_path)] == ["'| a | b |'", "'---|'", "'| '"]
