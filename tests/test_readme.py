"""Every dotted ``attntemp.`` name in what ships to a reader resolves (the README, ``docs/``, the
package's own READMEs, ``scripts/`` and ``benchmarks/``), and the flat layout's old module names
are gone (the blocks themselves run in ``tests/test_docs_commands.py``)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "src" / "attntemp").rglob("*.md")),
    *sorted(p for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
]
# A dotted name anywhere (backticks, prose, imports), not part of a path or a longer word.
DOTTED = re.compile(r"(?<![\w/.-])attntemp(?:\.\w+)+")
NAMES = sorted({(name, p.relative_to(ROOT).as_posix()) for p in SHIPPED for name in DOTTED.findall(p.read_text())})


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


@pytest.mark.parametrize("dotted, where", NAMES, ids=[f"{w}:{n}" for n, w in NAMES])
def test_every_dotted_name_in_shipped_text_resolves(dotted, where):
    _resolve(dotted)


def test_the_shipped_text_is_read_and_a_stale_name_is_caught():
    assert len(NAMES) > 100 and {"scripts/learn_tiny.py", "src/attntemp/assets/tiny/README.md"} <= {w for _, w in NAMES}
    assert DOTTED.findall("see attntemp.tiny_eval.passkey_accuracy, not attntemp-demo/x or src/attntemp.egg") == [
        "attntemp.tiny_eval.passkey_accuracy"
    ]
    with pytest.raises(AttributeError):
        _resolve("attntemp.evaluate.lm.passkey_accuracy")


def test_the_flat_layout_names_are_gone():
    """0.3.0 removed the old module paths (tests/test_deprecation.py has them all)."""
    import importlib

    for old in ("rope", "attention", "calibration", "tiny_eval"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"attntemp.{old}")
