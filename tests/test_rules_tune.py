"""Rules of issue 36 on plans, results and options, read from the source with ``ast``:

- a function above ``ops/`` takes at most 8 parameters (its settings come whole, as a frozen
  options object carved from the command's config); ``ops/``, ``utils/`` and ``assets/`` are
  exempt: math keeps its plain-number keywords;
- a command never reads back a file it wrote: ``commands/`` prints the result its run returned,
  so no command module reads a file at all (its run's inputs are read by the layers below).
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
    commands = sorted((SRC / "commands").glob("*.py"))
    assert len(commands) > 10
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
