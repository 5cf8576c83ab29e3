"""Rules of issue 36 on plans, results and options, read from the source with ``ast``:

- a function above ``ops/`` takes at most 8 parameters (its settings come whole, as a frozen
  options object carved from the command's config); ``ops/``, ``utils/`` and ``assets/`` are
  exempt: math keeps its plain-number keywords;
- a command never reads back a file it wrote: ``commands/`` prints the result its run returned,
  so no command module reads a file at all (its run's inputs are read by the layers below);
- a command prints the result object its ``run_*`` returned: each ``emit`` is given
  ``result.to_dict()`` and text built on ``result.markdown()`` (or none, as ``generate --json``).
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attntemp"
EXEMPT = ("ops", "utils", "assets")  # math and plumbing: plain-number keywords stay
MOST = 8
# calls that read a file: builtins.open, Path.open / read_text / read_bytes, json / torch / numpy /
# pickle load, sqlite3.connect
READERS = {"open", "read_text", "read_bytes", "load", "connect"}


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    """Positional, keyword-only, ``*args`` and ``**kwargs``; ``self`` and ``cls`` left out."""
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [v.arg for v in (a.vararg, a.kwarg) if v is not None]
    return [n for n in names if n not in ("self", "cls")]


def long_signatures(source: str, where: str) -> list[str]:
    """``where:line name (n)`` for each function of ``source`` with more than :data:`MOST` parameters."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            n = len(parameters(node))
            if n > MOST:
                found.append(f"{where}:{node.lineno} {getattr(node, 'name', 'lambda')} ({n})")
    return found


def file_reads(source: str, where: str) -> list[str]:
    """``where:line call`` for each call of ``source`` that reads a file (:data:`READERS`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in READERS:
            found.append(f"{where}:{node.lineno} {ast.unparse(f)}()")
    return found


def above_ops() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] not in EXEMPT]


def test_no_function_above_ops_takes_more_than_8_parameters():
    found = [hit for p in above_ops() for hit in long_signatures(p.read_text(), str(p.relative_to(SRC)))]
    assert not found, "pass a frozen options object instead of more than 8 parameters: " + "; ".join(found)


def test_no_command_reads_back_a_file_it_wrote():
    commands = sorted((SRC / "commands").glob("*.py"))  # the table (__init__) and the other commands' modules
    assert len(commands) >= 8
    found = [hit for p in commands for hit in file_reads(p.read_text(), f"commands/{p.name}")]
    assert not found, "a command prints the result its run returned, never a file: " + "; ".join(found)


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ("def f(a, b, c, d, e, f, g, h): pass", 0),
        ("def f(a, b, c, d, e, f, g, h, i): pass", 1),
        ("def f(a, b, c, d, e, f, g, *, h, **kw): pass", 1),  # keyword-only and **kwargs count
        ("class C:\n    def m(self, a, b, c, d, e, f, g, h): pass", 0),  # self does not
        ("lambda a, b, c, d, e, f, g, h, *i: 0", 1),
    ],
)
def test_the_parameter_rule_counts_what_the_issue_counts(source, hits):
    assert len(long_signatures(source, "x.py")) == hits


def _method_of(node: ast.AST, method: str) -> str | None:
    """``x`` when ``node`` is the call ``x.method()``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
        return ast.unparse(node.func.value)
    return None


def unprinted_results(source: str, where: str) -> list[str]:
    """``where:line`` for each ``emit(args, text, document)`` of ``source`` whose document is not
    ``result.to_dict()`` or whose text is neither empty nor built on that ``result.markdown()``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "emit"):
            continue
        text, document = node.args[1], node.args[2]
        owner = _method_of(document, "to_dict")
        empty = isinstance(text, ast.Constant) and text.value == ""
        if owner is None or not (empty or any(_method_of(n, "markdown") == owner for n in ast.walk(text))):
            found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_every_command_prints_the_result_its_run_returned():
    commands = [p for p in sorted((SRC / "commands").glob("*.py")) if p.name not in ("completion.py", "output.py")]
    found = [hit for p in commands for hit in unprinted_results(p.read_text(), f"commands/{p.name}")]
    assert not found, "print the run's result: emit(args, result.markdown(), result.to_dict()): " + "; ".join(found)


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ("emit(args, result.markdown(), result.to_dict())", 0),
        ('emit(args, f"{result.markdown()}\\nreport: {result.page}", result.to_dict())', 0),
        ('emit(args, "", result.to_dict())', 0),
        ('emit(args, human, {"out": cfg.out, "points": store.rows()})', 1),  # what sweep did on main
        ("emit(args, result.render(), dataclasses.asdict(result))", 1),  # what export did on main
        ("emit(args, other.markdown(), result.to_dict())", 1),
    ],
)
def test_the_result_rule_catches_a_command_building_its_own_output(source, hits):
    assert len(unprinted_results(source, "commands/x.py")) == hits


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ('print((Path(cfg.out) / "evidence.md").read_text())', 1),  # what tune, demo and report did on main
        ('md, page = build(cfg.dir)\nemit(args, md.read_text(), {"markdown": md.read_text()})', 2),
        ("data = json.load(open(path))", 2),
        ("emit(args, result.markdown(), result.to_dict())", 0),
    ],
)
def test_the_read_back_rule_catches_a_command_reading_its_output(source, hits):
    assert len(file_reads(source, "commands/x.py")) == hits
