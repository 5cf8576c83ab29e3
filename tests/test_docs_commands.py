"""The README and every page of ``docs/`` run as written: their ``python`` blocks and the
``attntemp`` commands of their ``bash`` blocks, in page order, each page in its own temporary
folder (a block may use what an earlier one made), so the examples cannot drift from the tool.

The README runs in the default suite; the ``docs/`` pages are marked ``docs_pages`` (``.ci/run``
runs them after the docs build: a few minutes); pages whose commands name SmolLM2 are ``slow``; a
page that runs ``attntemp verify`` (docs/engines.md) is ``engines``: it needs llama.cpp built."""

import os
import re
import shlex
from pathlib import Path

import pytest

from attntemp.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", flags=re.S | re.M)


def commands(block: str) -> list[list[str]]:
    """The argv of each ``attntemp ...`` line of a bash block (``\\`` continuations joined, comments
    dropped); other lines (venv set-up, scripts) are not commands of the tool."""
    lines = (shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines())
    return [argv[1:] for argv in lines if argv and argv[0] == "attntemp"]


def steps(page: Path) -> list[tuple[str, object]]:
    """``("python", code)`` and ``("attntemp", argv)`` in page order."""
    out: list[tuple[str, object]] = []
    for kind, body in BLOCK.findall(page.read_text()):
        out += [("python", body)] if kind == "python" else [("attntemp", argv) for argv in commands(body)]
    return out


def _marks(page: Path) -> list:
    """README: the default suite; a page that runs ``attntemp verify`` needs the built engines
    (``engines``, opt-in like tests/ship/test_engines.py); any other page: ``docs_pages``."""
    if page.name == "README.md":
        return []
    verifies = any(k == "attntemp" and a[0] == "verify" for k, a in steps(page))  # type: ignore[index]
    return [pytest.mark.engines] if verifies else [pytest.mark.docs_pages]


def _cases(slow: bool) -> list:
    """One case per page: the pages whose commands name SmolLM2 (``slow``) or do not."""
    return [
        pytest.param(page, id=page.name, marks=_marks(page))
        for page in PAGES
        if steps(page) and any("smollm2" in a for k, a in steps(page) if k == "attntemp") == slow
    ]


def _run(page: Path) -> None:
    for kind, what in steps(page):
        if kind == "python":
            exec(compile(str(what), str(page), "exec"), {"__name__": "docs"})
        else:
            assert main(list(what)) == 0, f"{page.name}: attntemp {shlex.join(what)}"  # type: ignore[arg-type]


def test_the_readme_has_a_tour_and_python():
    kinds = [k for k, _ in steps(ROOT / "README.md")]
    assert kinds.count("attntemp") >= 6 and "python" in kinds


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Each page in a folder of its own; ``gutenberg:<book>`` still finds ../shared/data/gutenberg
    of the checkout (the pages are written to be run from the repository's root)."""
    if "ATTNTEMP_GUTENBERG" not in os.environ:
        monkeypatch.setenv("ATTNTEMP_GUTENBERG", str(ROOT.parent / "shared" / "data" / "gutenberg"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("page", _cases(slow=False))
def test_page_runs(page, in_tmp):
    _run(page)


@pytest.mark.slow
@pytest.mark.parametrize("page", _cases(slow=True))
def test_page_with_smollm2_runs(page, in_tmp):
    _run(page)
