"""Every dotted ``attntemp.`` name in the README and in ``docs/`` resolves, and the flat layout's
old module names still import (the blocks themselves run in ``tests/test_docs_commands.py``)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = "".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


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


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"`(attntemp(?:\.\w+)+)", TEXT))))
def test_every_dotted_name_in_the_readme_resolves(dotted):
    _resolve(dotted)


def test_the_flat_layout_names_are_the_moved_modules():
    import importlib

    import attntemp

    for old, new in attntemp.MOVED.items():
        moved = importlib.import_module(f"attntemp.{old}")
        assert moved is importlib.import_module(f"attntemp.{new}") and moved.__name__ == f"attntemp.{new}"
        assert getattr(attntemp, old) is moved
