"""`attntemp eval` bad inputs: each is one stderr line naming the flag (or the fix), exit code 2,
before the model loads."""

import importlib.util
import os
import sys

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from attntemp.cli import main
from attntemp.evaluate.harness.task_folder import lm_eval_tasks_path
from attntemp.ops.spec import TemperatureSpec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="needs attntemp[eval]")

OFFLINE_TASK = """task: needs_the_hub
dataset_path: attntemp-nobody/no-such-dataset
test_split: test
output_type: loglikelihood
doc_to_text: q
doc_to_target: a
"""


@pytest.fixture
def args(tmp_path):
    """A valid command line (spec, task, out); each case swaps or adds a flag."""
    spec = TemperatureSpec(multiplier=1.2).save(tmp_path / "spec.json")
    (tmp_path / "hub_tasks").mkdir()
    (tmp_path / "hub_tasks" / "needs_the_hub.yaml").write_text(OFFLINE_TASK)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "comparison.json").write_text("an earlier eval's results")
    return {"--spec": str(spec), "--tasks": "attntemp_passkey_256", "--out": str(tmp_path / "out")}


CASES = [
    # (flag changed, its value, text the one error line must contain)
    ("--limit", "0", "--limit=0 is not allowed"),
    ("--limit", "many", "--limit 'many'"),
    ("--batch-size", "0", "--batch-size=0 is not allowed"),
    ("--max-length", "4k", "--max-length '4k'"),
    ("--lengths", "0", "--lengths[0]=0 is not allowed"),
    ("--lengths", "8192", "--lengths[0]=8192 is not allowed; expected <= --max-length=4096"),
    ("--bootstrap-iters", "-1", "--bootstrap-iters=-1 is not allowed"),
    ("--spec", "{tmp}/missing.json", "spec="),
    ("--out", "{tmp}/full", "--out='{tmp}/full' already holds results (comparison.json); pass --overwrite"),
    ("--include-path", "{tmp}/nowhere", "--include-path '{tmp}/nowhere' is not a folder"),
    ("--tasks", ",", "--tasks='' is not allowed"),
    # an unknown name is looked up among lm-eval's own ~15k tasks too: indexing them takes 12-30 s
    pytest.param("--tasks", "attntemp_paskey_256", "did you mean 'attntemp_passkey_256'?", marks=pytest.mark.slow),
    ("--tasks", "needs_the_hub", "--tasks 'needs_the_hub' could not be loaded"),
]


@pytest.mark.parametrize(
    "flag, value, expected",
    CASES,
    ids=[f"{c[0]}={c[1]}" if isinstance(c, tuple) else f"{c.values[0]}={c.values[1]}" for c in CASES],
)
def test_bad_input_is_one_line_and_exit_2(args, tmp_path, capsys, flag, value, expected):
    given = {**args, flag: value.format(tmp=tmp_path)}
    if flag == "--tasks" and value == "needs_the_hub":
        given["--include-path"] = str(tmp_path / "hub_tasks")
    argv = ["eval", *[x for pair in given.items() for x in pair]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("attntemp eval: error:") and expected.format(tmp=tmp_path) in err[0]
    assert not (tmp_path / "out").exists()  # nothing written, not even a staging folder left
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_without_lm_eval_the_error_names_the_install(args, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` raises ImportError
    assert main(["eval", *[x for pair in args.items() for x in pair]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "attntemp eval: error: lm-eval is not installed; pip install 'attntemp[eval]' (or 'lm-eval>=0.4,<0.5')"
    ]


def test_the_shipped_tasks_need_no_include_path(args):
    from attntemp.evaluate.harness.lookup import task_manager
    from attntemp.evaluate.harness.paired import include_paths

    manager = task_manager(["attntemp_passkey*"], include_paths([]))
    assert "attntemp_passkey_1024" in manager.all_tasks
    assert include_paths([str(lm_eval_tasks_path())]) == [str(lm_eval_tasks_path())]  # not listed twice


def test_an_unknown_task_names_the_closest_and_how_to_list_them(args, monkeypatch, capsys):
    """As the slow case above, with lm-eval's own tasks left out of the index (fast)."""
    import lm_eval.tasks

    real = lm_eval.tasks.TaskManager
    monkeypatch.setattr(
        lm_eval.tasks, "TaskManager", lambda include_path, **_: real(include_path=include_path, include_defaults=False)
    )
    args["--tasks"] = "attntemp_needle_ll_2048"
    assert main(["eval", *[x for pair in args.items() for x in pair]]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == (
        "attntemp eval: error: --tasks 'attntemp_needle_ll_2048' is not a task, group or tag lm-eval knows "
        "(did you mean 'attntemp_needle_ll_1024'?); list them with `lm_eval ls tasks`, or add the folder of its "
        "YAML with --include-path"
    )
