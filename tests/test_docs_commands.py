"""The README and every page of ``docs/`` run as written: their ``python`` blocks and the
``attntemp`` commands of their ``bash`` blocks, in page order, each page in its own temporary
folder (a block may use what an earlier one made), so the examples cannot drift from the tool.

The README runs in the default suite; the ``docs/`` pages are marked ``docs_pages`` (``.ci/run``
runs them after the docs build: a few minutes); pages whose commands name SmolLM2 are ``slow``."""

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


def _cases(slow: bool) -> list:
    """One case per page: the pages whose commands name SmolLM2 (``slow``) or do not."""
    return [
        pytest.param(page, id=page.name, marks=[] if page.name == "README.md" else [pytest.mark.docs_pages])
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


@pytest.mark.parametrize("page", _cases(slow=False))
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(page)


@pytest.mark.slow
@pytest.mark.parametrize("page", _cases(slow=True))
def test_page_with_smollm2_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(page)
