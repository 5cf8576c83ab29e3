"""Every fenced Python block of the README runs as written (each defines what it uses), so the
README's snippets cannot go stale. Each runs in a fresh namespace inside a temporary folder."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})


def _resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"`(attntemp(?:\.\w+)+)", README.read_text()))))
def test_every_dotted_name_in_the_readme_resolves(dotted):
    _resolve(dotted)


def test_the_flat_layout_names_are_the_moved_modules():
    import importlib

    import attntemp

    for old, new in attntemp.MOVED.items():
        moved = importlib.import_module(f"attntemp.{old}")
        assert moved is importlib.import_module(f"attntemp.{new}") and moved.__name__ == f"attntemp.{new}"
        assert getattr(attntemp, old) is moved
