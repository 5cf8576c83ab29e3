"""House rules read from the source with ``ast``: no engine is named outside its own module, and
Python source lives in modules, never in string constants."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attntemp"
ENGINE_NAMES = {"transformers", "llama.cpp", "vllm"}
ENGINES_FOLDER = SRC / "ship" / "engines"
SOURCE_LINES = 3  # a string of more lines that parses as Python with a def, class or import is source


# ----------------------------------------------------------------------------- engine names
def _engine_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in ENGINE_NAMES


def engine_branches(source: str) -> list[str]:
    """Where ``source`` compares with an engine's name or lists engine names (a tuple, list or set
    of two or more, or a dict keyed by two or more): ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_engine_literal(x) for x in (node.left, *node.comparators)):
            found.append(f"{node.lineno}: compares with an engine name")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(_engine_literal, node.elts)) >= 2:
            found.append(f"{node.lineno}: a collection of engine names")
        elif isinstance(node, ast.Dict) and sum(_engine_literal(k) for k in node.keys if k is not None) >= 2:
            found.append(f"{node.lineno}: a table keyed by engine names")
    return found


def test_no_engine_name_branch_outside_ship_engines():
    bad = {
        str(p.relative_to(SRC)): engine_branches(p.read_text())
        for p in sorted(SRC.rglob("*.py"))
        if ENGINES_FOLDER not in p.parents
    }
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize(
    "source, caught",
    [
        ('if engine == "vllm":\n    pass\n', True),
        ('ok = name in ("transformers", "llama.cpp")\n', True),
        ('SOURCES = {"transformers": 1, "vllm": 2}\n', True),
        ('x = "llama.cpp" != engine\n', True),
        ('export(spec, "transformers")\n', False),  # naming one engine as an argument is not a branch
        ('versions = {"attntemp": 1, "transformers": 2}\n', False),  # the library, once
    ],
)
def test_the_engine_name_rule_catches_branches_and_tables(source, caught):
    assert bool(engine_branches(source)) is caught


# ----------------------------------------------------------------------------- no source in strings
def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _text(node: ast.AST) -> str | None:
    """A string constant's text; an f-string's with each placeholder as a name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    return None


def python_in_strings(source: str) -> list[str]:
    """Where ``source`` holds Python source in a string (docstrings aside): a string of more than
    ``SOURCE_LINES`` lines that parses as Python with a def, class or import statement."""
    tree = ast.parse(source)
    skip, found = _docstrings(tree), []
    for node in ast.walk(tree):
        text = _text(node)
        if id(node) in skip or text is None or text.count("\n") < SOURCE_LINES:
            continue
        try:
            code = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
        if any(isinstance(s, kinds) for s in ast.walk(code)):
            found.append(f"{node.lineno}: {text.count(chr(10)) + 1} lines of Python in a string")
    return found


def test_no_python_source_in_string_constants():
    bad = {str(p.relative_to(SRC)): python_in_strings(p.read_text()) for p in sorted(SRC.rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize(
    "source, caught",
    [
        ('CODE = """\nimport torch\n\n\ndef f(x):\n    return x\n"""\n', True),
        ('CODE = f"""\nclass {NAME}:\n    pass\n\n\n"""\n', True),  # an f-string, its placeholders as names
        ('def f():\n    """A docstring.\n\n    def g(): an example, not source\n    """\n', False),
        ('TEXT = """\nplain prose over\nseveral lines\nand more\n"""\n', False),
        ('CMD = "import sys; sys.exit(1)"\n', False),  # one line: a command, not a module
    ],
)
def test_the_source_rule_catches_modules_in_strings(source, caught):
    assert bool(python_in_strings(source)) is caught
