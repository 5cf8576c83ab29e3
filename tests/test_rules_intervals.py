"""Rule: a metric's interval is decided once, by the rule its :class:`Metric` declares (a name in
:data:`attntemp.ops.intervals.RULES`, as lm-eval's ``stderr_for_metric``). No task class makes its
own intervals, nothing in ``evaluate/`` calls an interval function of ``ops.intervals`` past the
rules, and no code there branches on a metric's name. Read from the registry and, with ``ast``,
from the source."""

import ast
from pathlib import Path

import pytest

from attntemp.evaluate.task_base import Metric, Task
from attntemp.evaluate.tasks import TASKS
from attntemp.ops import intervals

SRC = Path(__file__).resolve().parents[1] / "src" / "attntemp"
# the interval makers of ops.intervals: reached through RULES only
MAKERS = {
    "wilson",
    "mean_interval",
    "perplexity_interval",
    "paired_ratio_interval",
    "paired_difference_interval",
    "newcombe_paired",
}
METRIC_NAMES = {"name", "metric"}  # what a variable holding a metric's name is called


def _metrics():
    return [(t, m) for t, cls in TASKS.items() for m in cls.metrics]


@pytest.mark.parametrize(("task", "metric"), _metrics(), ids=lambda x: getattr(x, "name", x))
def test_every_metric_declares_its_interval_rule(task, metric):
    rule = intervals.RULES[metric.rule]
    assert metric.comparison == rule.comparison and metric.null == rule.null
    assert len(metric.values) == (2 if rule.name == "perplexity" else 1), "a perplexity reads NLL and tokens"


def test_a_metric_without_a_known_rule_is_refused():
    with pytest.raises(ValueError, match="rule="):
        Metric("x", True, rule="normal")


@pytest.mark.parametrize("task", sorted(TASKS))
def test_no_task_makes_its_own_intervals(task):
    own = {k for cls in TASKS[task].__mro__ if cls not in (Task, object) for k in vars(cls)}
    assert not own & {"interval", "paired"}, f"{task}: declare the rule on the Metric instead"


def interval_decisions(root: Path) -> list[str]:
    """``path:line: what`` of each call of an interval maker and each comparison of a metric's name
    with a string, under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in MAKERS:
                found.append(f"{path.name}:{node.lineno}: {name}")
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = any(isinstance(s, ast.Name) and s.id in METRIC_NAMES for s in sides)
                if named and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_evaluate_decides_no_interval_itself():
    found = interval_decisions(SRC / "evaluate")
    assert not found, "ask the metric's rule (Metric.rule, ops.intervals.RULES):\n" + "\n".join(found)
