"""House rules read from the source with ``ast``: no engine is named outside its own module, Python
source lives in modules, never in string constants, each fact has one reader and each public name
one meaning."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attntemp"
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


# ----------------------------------------------------------------------------- one geometry
GEOMETRY_KEYS = {"max_position_embeddings", "original_max_position_embeddings"}
GEOMETRY = SRC / "ops" / "geometry.py"


def python_files(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _allowed_key(node: ast.Constant, parent: ast.AST) -> bool:
    """A geometry key that writes or names, not reads: a dict literal's key or value (an exported
    config, a table of field names), a member of a set literal (the keys a dict may hold), the
    target of ``d[key] = ...``, or the name a ``checks.*`` call gives the value in its error."""
    if isinstance(parent, ast.Dict) or isinstance(parent, ast.Set):
        return True
    if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
        return True
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        func = parent.func
        return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "checks"
    return False


def geometry_key_reads(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each read of a geometry key: the key string anywhere but where
    :func:`_allowed_key` allows it (subscripts, ``.get``, ``getattr``, ``in``, helper arguments,
    names bound to it), and attribute access ``x.max_position_embeddings`` on anything but ``self``
    (a plain-number field of an ops class, such as the Mistral schedule's L0). Keyword arguments
    and parameters named like the keys (plain numbers of the ops math) are not reads."""
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in GEOMETRY_KEYS:
            parent = parents[node]
            if not _allowed_key(node, parent):
                found.append((node.lineno, f"{node.value!r} in {ast.unparse(parent)[:80]}"))
        elif isinstance(node, ast.Attribute) and node.attr in GEOMETRY_KEYS and isinstance(node.ctx, ast.Load):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_geometry_key_reads_are_found():
    """The scan itself: reads are found, writes and names are not."""
    reads = """
cfg.get("max_position_embeddings")
cfg["original_max_position_embeddings"]
getattr(cfg, "max_position_embeddings", None)
config.max_position_embeddings
"original_max_position_embeddings" in params
_need(params, "original_max_position_embeddings", "vllm")
name = "max_position_embeddings"
for key in ("factor", "original_max_position_embeddings"): pass
"""
    assert [line for line, _ in geometry_key_reads(reads)] == [2, 3, 4, 5, 6, 7, 8, 9]
    writes = """
out = {"original_max_position_embeddings": l0, "k": "max_position_embeddings"}
out["original_max_position_embeddings"] = l0
config.max_position_embeddings = 32
rope.yarn(dim, base, factor, original_max_position_embeddings=l0)
checks.positive_int("original_max_position_embeddings", value)
keys = {"rope_type", "original_max_position_embeddings"}
def f(max_position_embeddings: int): return self.original_max_position_embeddings
"""
    assert geometry_key_reads(writes) == []


def test_one_reader_of_the_geometry_keys():
    """Only ``ops/geometry.py`` reads ``max_position_embeddings`` / ``original_max_position_embeddings``
    (issue 36): everything else asks its :class:`ModelGeometry` (or ``stated_l0`` for a RoPE dict)."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in python_files(SRC, ROOT / "scripts", ROOT / "benchmarks")
        if path != GEOMETRY
        for line, what in geometry_key_reads(path.read_text(encoding="utf-8"))
    ]
    assert not bad, "read the geometry keys through attntemp.ops.geometry:\n" + "\n".join(bad)


# Names several modules define by design, each in the listed folders only (their definitions there
# count as one: the protocol):
ENGINE_PROTOCOL = ("ENGINE", "NAME", "SOURCE", "LONGROPE_SOURCE", "SCHEDULE_READERS", "export_settings",
                   "with_schedule", "audit", "verify", "attn_factor", "logit_multiplier")  # fmt: skip
PROTOCOL = {
    # cli.build_parser imports each sub-command module and calls its register(subparsers); vLLM calls
    # its general plugin's register() (assets/remote_code/vllm_plugin.py, copied into vLLM's environment)
    "register": ("attntemp.commands", "attntemp.assets.remote_code"),
    # the sub-command's entry, which its register sets as the parser's func (cli.main calls args.func)
    "run": ("attntemp.commands",),
    # the architecture a schedule checkpoint's config.json names: transformers' auto_map and vLLM's
    # registry each resolve it to their own class (modeling_attntemp_schedule, vllm_model)
    "AttntempScheduleLlamaForCausalLM": ("attntemp.assets.remote_code",),
    # one module per engine behind ship.engines.ENGINES, each answering the same questions of its engine
    **dict.fromkeys(ENGINE_PROTOCOL, ("attntemp.ship.engines",)),
}


def module_level_names(source: str) -> list[str]:
    """Public names a module defines at its top level: functions, classes, assigned names."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n not in ("__all__", "main")]


def public_definitions() -> dict[str, list[str]]:
    """Each public name -> the modules of ``src/attntemp`` that define it (importing is not defining);
    a :data:`PROTOCOL` name's definitions in its folders count as one."""
    found: dict[str, list[str]] = {}
    for path in python_files(SRC):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        for name in module_level_names(path.read_text(encoding="utf-8")):
            folders = PROTOCOL.get(name, ())
            where = "the protocol" if any(module.startswith(f + ".") for f in folders) else module
            if where not in found.setdefault(name, []):
                found[name].append(where)
    return found


def test_each_public_name_is_defined_once():
    """A public module-level name means one thing in the package (issue 36): one module defines
    it and the others import it; a :data:`PROTOCOL` name is defined in its folders only."""
    twice = {name: modules for name, modules in public_definitions().items() if len(modules) > 1}
    assert not twice, "rename, or import from one module:\n" + "\n".join(f"{n}: {m}" for n, m in sorted(twice.items()))
