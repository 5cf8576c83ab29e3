"""Rules for ``scripts/`` and ``benchmarks/``: their flags come from config dataclasses through the
package's options (:func:`attntemp.utils.options.from_argv`, built by ``add_options``; a shared
flag's help is the package field's, :func:`attntemp.utils.options.reuse`), never declared by hand;
each answers ``--help`` (the shell scripts too, doing nothing else); and each command line the
docs, READMEs and docstrings show still parses (parsed only: no workload runs, see
``tests/scripts/run_entries.py``; the smallest case of each runs in ``tests/benchmarks`` and
``tests/scripts/test_script_runs.py``)."""

import ast
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from runnable import ROOT, entries, sources

# the one script allowed its own argparse flags, and why
BY_HAND = {"scripts/vllm_logprobs.py": "it runs in vLLM's own virtual environment, which cannot import attntemp"}
# where command lines of the scripts are shown
SHOWN_IN = ("README.md", "docs/**/*.md", "scripts/*", "benchmarks/*.py", "src/attntemp/**/*.md", "src/attntemp/**/*.py")
_VALUE = r"""(?:"[^"]*"|'[^']*'|[^\s\]`|#>;&]+)"""
INVOCATION = re.compile(
    rf"(?P<python>(?:python\S*|\$PY)\s+)?(?<![\w/.])(?P<path>(?:scripts|benchmarks)/\w+\.py)"
    rf"(?P<flags>(?:\s+\[?--[\w-]+(?:(?:=|\s+)(?![-\[]){_VALUE})?\]?)*)"
)
PLACEHOLDER = re.compile(r"^(?:[A-Z]+|\{\w+\})$")  # DIR, N, K, {seed}: any value parses
DOCSTRING_END = re.compile(r'^[ \t]*(?:"""|\'\'\')[ \t]*$', re.MULTILINE)  # a line of closing quotes


def flags_by_hand(source: str) -> list[int]:
    """The lines of every ``.add_argument(...)`` call."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
    ]


def test_scripts_and_benchmarks_declare_no_flags_by_hand():
    found = {str(p.relative_to(ROOT)): flags_by_hand(p.read_text()) for p in sources()}
    found = {path: lines for path, lines in found.items() if lines}
    assert set(found) == set(BY_HAND), f"flags declared by hand (use a config and from_argv): {found}"


def test_the_rule_sees_a_flag_declared_by_hand():
    assert flags_by_hand("import argparse\np = argparse.ArgumentParser()\np.add_argument('--x')\n") == [3]
    assert flags_by_hand("from attntemp.utils.options import from_argv\n") == []


def shown_command_lines(text: str) -> list[tuple[str, list[str]]]:
    """``(path, argv)`` for each command line of a script in ``text``: with its flags, or run
    with ``python`` and none. Optional flags (``[--x N]``) count; placeholders become ``1``."""
    text = text.replace("\\\\\n", " ").replace("\\\n", " ")  # continued lines (also inside a string)
    text = DOCSTRING_END.sub("`", text)  # closing quotes end a command line (a code span's end), no value
    found = []
    for m in INVOCATION.finditer(text):
        if not (m["flags"].strip() or m["python"]):
            continue  # a script named in prose
        # a lone bracket is dropped; a quoted empty value ('') is kept
        argv = [t.strip("[]") for t in shlex.split(m["flags"]) if t.strip("[]") or not t]
        found.append((m["path"], ["1" if PLACEHOLDER.match(t) else t for t in argv]))
    return found


def documented() -> list[tuple[str, list[str]]]:
    lines = set()
    for pattern in SHOWN_IN:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path.suffix in (".md", ".py", ".sh"):
                lines.update((p, tuple(a)) for p, a in shown_command_lines(path.read_text(encoding="utf-8")))
    return sorted((p, list(a)) for p, a in lines)


def test_command_lines_are_read_from_the_docs():
    got = shown_command_lines(
        'run `python scripts/a.py --out DIR [--lengths 1,2] --only "x y"`; see scripts/b.py, '
        "python benchmarks/c.py > log &\n$PY scripts/d.py --checks 256,2048 \\\n  --seed {seed}"
        "\npython benchmarks/e.py --cases '' --k 2"
        '\n    python scripts/f.py --check\n    """\nimport os'
    )
    assert got == [
        ("scripts/a.py", ["--out", "1", "--lengths", "1,2", "--only", "x y"]),
        ("benchmarks/c.py", []),
        ("scripts/d.py", ["--checks", "256,2048", "--seed", "1"]),
        ("benchmarks/e.py", ["--cases", "", "--k", "2"]),
        ("scripts/f.py", ["--check"]),  # a docstring's closing quotes are not an empty value
    ]
    shown = documented()
    assert len(shown) > 40 and {p for p, _ in shown} <= set(entries())
    assert ("scripts/trust_table.py", ["--out", "runs/trust_tiny", "--threads", "1"]) in shown


@pytest.fixture(scope="module")
def ran():
    """Every entry's ``--help`` and every documented command line, in one interpreter."""
    jobs = [(path, ["--help"]) for path in entries()] + documented()
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "run_entries.py")],
        input=json.dumps([{"path": p, "argv": a} for p, a in jobs]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {(p, tuple(a)): r for (p, a), r in zip(jobs, json.loads(done.stdout), strict=True)}


@pytest.mark.parametrize("path", entries())
def test_every_script_and_benchmark_answers_help(ran, path):
    result = ran[path, ("--help",)]
    assert result["exit"] == 0 and result["out"].startswith("usage:"), result


@pytest.mark.parametrize("path, argv", documented(), ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_every_documented_command_line_parses(ran, path, argv):
    result = ran[path, tuple(argv)]
    assert result["parsed"], result


SHELL = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("path", SHELL)
def test_every_shell_script_answers_help_and_does_nothing_else(path, tmp_path):
    """Its header, usage line included; with every tool it would call set to ``false`` and its
    folders in ``tmp_path``, a script that went on past ``--help`` would fail or leave files."""
    tools = {k: "false" for k in ("ATTNTEMP", "PYTHON", "PIP")}
    env = {**os.environ, **tools, "HOME": str(tmp_path), "ATTNTEMP_ENGINES": str(tmp_path / "engines")}
    argv = ["bash", str(ROOT / path), "--help"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and f"bash {path}" in done.stdout, done
    assert not list(tmp_path.iterdir()), "--help made files"
