"""The package's folders are its layers: each module imports only from its own folder or the folders
below it, and never a private name (``_x``) of another module. Read from the source with ``ast``."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attntemp"
# Bottom to top; a module may import from its own layer and every layer before it. "top" is the
# package's own __init__, __main__ and cli.
LAYERS = ("utils", "assets", "ops", "hf", "evaluate", "analysis", "tune", "ship", "logits", "report",
          "commands", "top")
RANK = {name: i for i, name in enumerate(LAYERS)}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """``attntemp.hf.patch`` -> ``hf``; ``attntemp.cli`` and ``attntemp`` -> ``top``."""
    parts = module.split(".")
    if len(parts) > 1 and (SRC / parts[1]).is_dir():
        return parts[1]
    return "top"


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def imports(source: str, module: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """``(imported attntemp module, names taken from it, line)`` for every import, nested ones too."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "attntemp"]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, package)
            if target.split(".")[0] != "attntemp":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, [], node.lineno) if _is_module(sub) else (target, [alias.name], node.lineno))
    return found


def _module_aliases(tree: ast.AST, module: str, package: str) -> set[str]:
    """Local names bound to attntemp modules (``from ..hf import patch``, ``import attntemp.x as y``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(node, package)
            names |= {a.asname or a.name for a in node.names
                      if target.startswith("attntemp") and _is_module(f"{target}.{a.name}")}
        elif isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.asname and a.name.startswith("attntemp")}
    return names


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What ``module`` (its ``source``) does against the layering and privacy rules."""
    own = layer_of(module)
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for target, names, line in imports(source, module, is_package):
        if RANK[layer_of(target)] > RANK[own]:
            out.append(f"{module}:{line} imports {target} (layer {layer_of(target)} is above {own})")
        private = [n for n in names if n.startswith("_") and n != "__version__"]
        private += [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
        if private and target != module:
            out.append(f"{module}:{line} imports the private name(s) {private} of {target}")
    tree = ast.parse(source)
    aliases = _module_aliases(tree, module, package)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append(f"{module}:{node.lineno} reads {node.value.id}.{node.attr}, another module's private name")
    return out


def package_modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def test_every_folder_is_a_known_layer():
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(LAYERS) - {"top"}


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_module_imports_only_from_below_and_nothing_private(path):
    assert violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("attntemp.ops.rope", "from ..hf.patch import apply\n", "layer hf is above ops"),
        ("attntemp.ops.rope", "import attntemp.report.build\n", "layer report is above ops"),
        ("attntemp.hf.patch", "def f():\n    from ..tune import runner\n", "layer tune is above hf"),
        ("attntemp.tune.runner", "from ..hf.patch import _SAVED\n", "private name(s) ['_SAVED']"),
        ("attntemp.ship.bake", "from ..hf import patch\nx = patch._SAVED\n", "reads patch._SAVED"),
        ("attntemp.ship.bake", "from ..utils import _hidden\n", "private name(s) ['_hidden']"),
    ],
)
def test_the_checker_catches_what_it_forbids(module, source, expected):
    found = violations(source, module)
    assert any(expected in v for v in found), found


def test_the_checker_allows_what_is_allowed():
    src = "from ..ops.spec import TemperatureSpec\nfrom . import patch\nfrom .introspect import text_config\n"
    assert violations(src, "attntemp.hf.learnable") == []
