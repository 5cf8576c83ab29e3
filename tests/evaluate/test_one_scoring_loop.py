"""One way to score a spec: no module of the package and no script runs a task's ``evaluate``
itself; they all go through :mod:`attntemp.evaluate.score` (read from the source with ``ast``)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ONLY = ROOT / "src" / "attntemp" / "evaluate" / "score.py"


def evaluate_calls(path: Path) -> list[int]:
    """Lines of ``<something>.evaluate(model, ...)`` calls: a task scored outside score.py."""
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "evaluate"
        and node.args
        and isinstance(node.args[0], (ast.Name, ast.Attribute))
        and "model" in ast.unparse(node.args[0])
    ]


def test_only_score_runs_a_task():
    files = sorted((ROOT / "src" / "attntemp").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    found = {str(p.relative_to(ROOT)): evaluate_calls(p) for p in files if p != ONLY}
    assert {k: v for k, v in found.items() if v} == {}
    assert evaluate_calls(ONLY)  # the one place: the rule is checked against a real call
