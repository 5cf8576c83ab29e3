"""lm-evaluation-harness on the tiny model without and with a spec (``attntemp eval``,
``attntemp.evaluate.harness.harness``), the shipped passkey/needle task folder, the paired table, and the
same numbers from lm-eval's own CLI on the baked checkpoint (slow)."""

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import attntemp
from attntemp.cli import main
from attntemp.evaluate import corpus
from attntemp.evaluate.harness import table as harness_table
from attntemp.evaluate.harness import task_folder as lm_eval_tasks
from attntemp.ops import intervals
from attntemp.ops.spec import TemperatureSpec

needs_lm_eval = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="needs attntemp[eval]")
SHIPPED = lm_eval_tasks.lm_eval_tasks_path()
TASKS = ("attntemp_passkey_512", "attntemp_passkey_ll_512")
LIMIT = 5


# ----------------------------------------------------------------------------- the task folder
def test_shipped_task_folder_equals_a_fresh_generation(tiny, tmp_path):
    fresh = lm_eval_tasks.write_folder(tmp_path / "tasks", tiny[1])
    names = sorted(p.name for p in SHIPPED.iterdir() if p.is_file())
    assert names == sorted(p.name for p in fresh.iterdir())
    for name in names:
        assert (fresh / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    assert sum((SHIPPED / n).stat().st_size for n in names) < 200_000  # KB, not MB


@pytest.mark.parametrize("family", lm_eval_tasks.FAMILIES)
@pytest.mark.parametrize("length", lm_eval_tasks.LENGTHS)
def test_shipped_prompts_fit_their_length_and_hold_their_key(tiny, family, length):
    rows = [json.loads(line) for line in (SHIPPED / f"{family}_{length}.jsonl").read_text().splitlines()]
    assert len(rows) == lm_eval_tasks.DOCS and len({r["answer"] for r in rows}) > 1
    for r in rows:
        n = corpus.count_tokens(tiny[1], r["prompt"])
        assert length - 2 * lm_eval_tasks.GEN_TOKENS <= n <= length - lm_eval_tasks.GEN_TOKENS
        assert f" {r['answer']}." in r["prompt"] and r["prompt"].endswith(" is")
    assert [r["depth"] for r in rows][:: len(rows) - 1] == [0.0, 1.0]


def test_shipped_task_names_cover_both_output_types():
    names = lm_eval_tasks.shipped_task_names()
    assert "attntemp_passkey_256" in names and "attntemp_needle_ll_1024" in names
    assert len(names) == 2 * len(lm_eval_tasks.FAMILIES) * len(lm_eval_tasks.LENGTHS)


# ----------------------------------------------------------------------------- the paired table
def fake(values: dict[str, list], reported: dict[str, float], task="t", filt="none", higher=None) -> dict:
    """lm-eval's results shape: aggregates, stderrs and per-document samples."""
    res = {f"{m},{filt}": v for m, v in reported.items()} | {f"{m}_stderr,{filt}": 0.1 for m in reported}
    n = len(next(iter(values.values())))
    samples = [{"doc_id": i, "filter": filt} | {m: v[i] for m, v in values.items()} for i in range(n)]
    hib = higher or dict.fromkeys(reported, True)
    return {"results": {task: res}, "samples": {task: samples}, "higher_is_better": {task: hib}}


def test_a_mean_of_outcomes_gets_wilson_and_the_paired_difference():
    a, b = [0, 0, 1, 0, 0, 1], [1, 1, 1, 0, 1, 1]
    (row,) = harness_table.compare(fake({"acc": a}, {"acc": 2 / 6}), fake({"acc": b}, {"acc": 5 / 6}))
    assert row["aggregation"] == "mean" and row["n"] == 6
    assert row["without_spec"]["interval"] == intervals.wilson(2, 6).to_dict()
    assert row["with_spec"]["stderr"] == 0.1
    want = intervals.paired_difference_interval(b, a)
    assert row["comparison"]["interval"] == want.to_dict()
    assert row["comparison"]["value"] == pytest.approx(0.5)
    assert row["comparison"]["verdict"] == intervals.verdict(want, 0.0, lower_is_better=False)


def test_lm_eval_perplexity_gets_the_paired_ratio():
    lla, llb = np.array([-3.0, -2.0, -4.0, -1.0]), np.array([-1.0, -1.5, -2.0, -1.0])
    ppl = {"perplexity": False}
    ra = fake({"perplexity": lla.tolist()}, {"perplexity": float(np.exp(-lla.mean()))}, higher=ppl)
    rb = fake({"perplexity": llb.tolist()}, {"perplexity": float(np.exp(-llb.mean()))}, higher=ppl)
    (row,) = harness_table.compare(ra, rb)
    assert row["aggregation"] == "perplexity" and row["comparison"]["kind"] == "ratio"
    want = intervals.paired_ratio_interval(-llb, -lla, np.ones(4))
    assert row["comparison"]["interval"] == want.to_dict()
    assert row["comparison"]["value"] == pytest.approx(np.exp(-(llb.mean() - lla.mean())))
    assert row["without_spec"]["interval"] == intervals.perplexity_interval(-lla, np.ones(4)).to_dict()
    assert row["comparison"]["verdict"] == "better"  # lower perplexity, interval below 1


def test_an_aggregate_that_is_not_a_mean_has_no_interval():
    (row,) = harness_table.compare(fake({"f1": [0.2, 0.4]}, {"f1": 0.9}), fake({"f1": [0.3, 0.1]}, {"f1": 0.7}))
    assert row["aggregation"] == "other" and row["comparison"]["interval"] is None
    assert row["comparison"]["value"] == pytest.approx(-0.2) and row["comparison"]["verdict"] == "no interval"
    assert "no interval" in harness_table.paired_table([row])


def test_runs_on_different_documents_are_refused():
    with pytest.raises(ValueError, match="different documents"):
        harness_table.compare(fake({"acc": [0, 1]}, {"acc": 0.5}), fake({"acc": [0, 1, 1]}, {"acc": 2 / 3}))


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def yarn2(tmp_path_factory):
    return str(TemperatureSpec.yarn(2, 256).save(tmp_path_factory.mktemp("spec") / "yarn2.json"))


@pytest.fixture(scope="module")
def eval_run(yarn2, tmp_path_factory):
    """``attntemp eval`` once: YaRN x2 against none at 512 tokens (2x the tiny model's 256)."""
    assert importlib.util.find_spec("lm_eval") is not None, "lm-eval is part of the dev extra: pip install -e '.[dev]'"
    out = tmp_path_factory.mktemp("eval") / "run"
    argv = [
        "eval",
        "--spec",
        yarn2,
        "--tasks",
        ",".join(TASKS),
        "--include-path",
        str(SHIPPED),
        "--limit",
        str(LIMIT),
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    code = main(argv)
    return code, out, argv


def test_attntemp_eval_prints_the_paired_table_and_writes_lm_eval_results(eval_run, capsys):
    code, out, _ = eval_run
    assert code == 0
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {(r["task"], r["metric"]): r for r in comparison["rows"]}
    assert set(rows) == {(TASKS[0], "exact_match"), (TASKS[1], "acc"), (TASKS[1], "perplexity")}
    for row in rows.values():
        assert row["n"] == LIMIT and row["comparison"]["interval"] is not None
        assert row["without_spec"]["interval"] and row["with_spec"]["stderr"] is not None
    # without a RoPE change the tiny model cannot read a key at 2x; YaRN x2 makes it likelier
    assert rows[(TASKS[1], "perplexity")]["comparison"]["value"] < 1
    assert rows[(TASKS[0], "exact_match")]["without_spec"]["value"] == 0.0
    for run in ("without_spec", "with_spec"):
        results = json.loads((out / run / "results.json").read_text())
        assert set(results["results"]) == set(TASKS) and "samples" not in results
        assert len((out / run / f"samples_{TASKS[0]}.jsonl").read_text().splitlines()) == LIMIT
    table = (out / "comparison.md").read_text()
    assert "| task | metric | n | without spec | with spec | with vs without (paired) | verdict |" in table
    assert f"| {TASKS[1]} | perplexity ↓ | {LIMIT} |" in table


def test_an_existing_out_is_kept_without_overwrite(eval_run, capsys):
    _, out, argv = eval_run
    before = (out / "comparison.json").read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds results (comparison.json, comparison.md, with_spec/, ...)" in err[0]
    assert (out / "comparison.json").read_bytes() == before


def test_overwrite_replaces_only_evals_own_files(eval_run, capsys):
    """Issue 32, case 3: --overwrite replaces eval's own outputs (also one this run does not write
    again: lm_eval_tasks/ of an earlier run with --lengths) and keeps everything else in --out."""
    _, out, argv = eval_run
    (out / "notes.txt").write_text("the user's")
    (out / "with_spec" / "mine.txt").write_text("the user's, inside eval's folder")
    assert main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds with_spec/mine.txt, not written by this command" in err[0], err
    (out / "with_spec" / "mine.txt").unlink()
    (out / "lm_eval_tasks").mkdir()
    (out / "lm_eval_tasks" / "passkey_512.yaml").write_text("an earlier run's remade task")
    (out / "comparison.md").write_text("stale, from an earlier attntemp eval")  # its signature: eval's own
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "the user's"
    assert not (out / "lm_eval_tasks").exists() and "stale" not in (out / "comparison.md").read_text()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no staging folder left


def test_lm_evals_git_hash_keeps_gits_stderr_off(tmp_path, monkeypatch, capfd):
    """Outside a repository, lm-eval's ``git describe`` made git print ``fatal: not a git
    repository`` on every successful run (issue 32)."""
    import lm_eval.evaluator as evaluator

    from attntemp.evaluate.harness.paired import lm_eval_logging

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # tmp_path is in no repository
    with lm_eval_logging(False):
        assert evaluator.get_git_commit_hash() is None
    assert "fatal" not in capfd.readouterr().err
    evaluator.get_git_commit_hash()  # lm-eval's own, restored: git's line reaches stderr (where git is)
    assert ("not a git repository" in capfd.readouterr().err) == (shutil.which("git") is not None)


@needs_lm_eval
def test_the_python_entry_point_with_an_identity_spec_changes_nothing(tiny, one_torch_thread):
    from attntemp.evaluate.harness import HarnessOptions, harness

    model, tok = tiny
    opts = HarnessOptions(limit=3)
    result = harness(model, tok, TemperatureSpec(), ["attntemp_passkey_ll_256"], opts)
    assert [(r["metric"], r["comparison"]["verdict"]) for r in result.rows] == [
        ("perplexity", "not distinguishable"),
        ("acc", "not distinguishable"),
    ]
    ppl = result.rows[0]["comparison"]
    assert ppl["value"] == 1.0 and ppl["interval"]["low"] == ppl["interval"]["high"] == 1.0
    assert result.out is None and "attntemp_passkey_ll_256" in result.table


@needs_lm_eval
def test_lengths_remake_the_tasks_in_the_models_tokens(yarn2, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "eval",
        "--spec",
        yarn2,
        "--tasks",
        "attntemp_passkey_ll_300",
        "--lengths",
        "300",
        "--limit",
        "2",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    assert (out / "lm_eval_tasks" / "passkey_300.jsonl").is_file()
    assert "| attntemp_passkey_ll_300 | acc ↑ | 2 |" in capsys.readouterr().out


def test_no_module_imports_lm_eval_at_import_time():
    """lm-eval is imported inside functions only: `import attntemp` works without the extra."""
    src = Path(attntemp.__file__).parent
    top = []
    for path in src.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                top += [f"{path.name}: {m}" for m in mods if m.split(".")[0] == "lm_eval"]
    assert top == []


@pytest.mark.slow
def test_lm_eval_cli_on_the_baked_checkpoint_gives_the_same_numbers(eval_run, yarn2, tmp_path):
    """`attntemp bake` then lm-eval's own CLI (`--model hf`): the with-spec run, number for number."""
    _, out, _ = eval_run
    baked, cli_out = tmp_path / "baked", tmp_path / "cli"
    assert main(["bake", "--spec", yarn2, "--out", str(baked)]) == 0
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        str(Path(sys.executable).with_name("lm_eval")),
        "--model",
        "hf",
        "--model_args",
        f"pretrained={baked},max_length=4096,dtype=float32",
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(SHIPPED),
        "--limit",
        str(LIMIT),
        "--device",
        "cpu",
        "--batch_size",
        "1",
        "--log_samples",
        "--output_path",
        str(cli_out),
    ]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    (cli,) = cli_out.rglob("results_*.json")
    theirs = json.loads(cli.read_text())["results"]
    ours = json.loads((out / "with_spec" / "results.json").read_text())["results"]
    for task in TASKS:
        keys = [k for k in ours[task] if "," in k]
        assert keys and sorted(keys) == sorted(k for k in theirs[task] if "," in k)
        for key in keys:
            assert theirs[task][key] == pytest.approx(ours[task][key], rel=1e-4), (task, key)


# ----------------------------------------------------------------------------- RULER
def test_ruler_lengths_pair_the_documents_made_at_each_length():
    """RULER logs every document under every length metric, -1 where it was not made at that length."""
    a = {"512": [1, 0, 1, -1, -1, -1], "1024": [-1, -1, -1, 0, 0, 1], "4096": [-1] * 6}
    b = {"512": [1, 1, 1, -1, -1, -1], "1024": [-1, -1, -1, 1, 0, 1], "4096": [-1] * 6}
    mean = {"512": 2 / 3, "1024": 1 / 3, "4096": -1}
    rows = harness_table.compare(fake(a, mean), fake(b, {"512": 1.0, "1024": 2 / 3, "4096": -1}))
    assert [(r["metric"], r["n"], r["aggregation"]) for r in rows] == [("512", 3, "mean"), ("1024", 3, "mean")]
    assert rows[0]["without_spec"]["interval"] == intervals.wilson(2, 3).to_dict()
    assert rows[1]["comparison"]["interval"] == intervals.paired_difference_interval([1, 0, 1], [0, 0, 1]).to_dict()
    assert "| t | 512 tokens ↑ | 3 |" in harness_table.paired_table(rows)


RULER_ARGV = ["--tasks", "niah_single_1", "--metadata", '{"max_seq_lengths":[768,1024]}', "--limit", "4"]


@pytest.mark.slow  # lm-eval's prepare_niah builds ~10^7 word pairs at import: 20-30 s of CPU before any work
def test_ruler_niah_single_1_offline_on_the_tiny_model(yarn2, tmp_path, capsys):
    """RULER's needle task made from the tiny model's tokenizer (its byte tokens leave no room for a
    prompt under ~640 tokens), 4 documents per length, without and with YaRN, paired."""
    out = tmp_path / "ruler"
    assert main(["eval", "--spec", yarn2, *RULER_ARGV, "--out", str(out), "--threads", "1"]) == 0
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    assert [(r["task"], r["metric"], r["n"]) for r in rows] == [
        ("niah_single_1", "768", 4),
        ("niah_single_1", "1024", 4),
    ]
    for r in rows:
        assert r["aggregation"] == "mean" and r["without_spec"]["interval"] and r["comparison"]["interval"]
    samples = [json.loads(x) for x in (out / "with_spec" / "samples_niah_single_1.jsonl").read_text().splitlines()]
    assert sorted(s["doc"]["max_length"] for s in samples) == [768] * 4 + [1024] * 4
    assert all(s["doc"]["length"] <= s["doc"]["max_length"] for s in samples)
    assert "| niah_single_1 | 1024 tokens ↑ | 4 |" in capsys.readouterr().out


@pytest.mark.slow
def test_ruler_niah_single_1_on_smollm2(tmp_path, capsys):
    spec = TemperatureSpec.yarn(2, 8192).save(tmp_path / "yarn2.json")
    out = tmp_path / "ruler"
    argv = ["eval", "--model", "smollm2", "--spec", str(spec), "--tasks", "niah_single_1", "--limit", "2"]
    assert main([*argv, "--metadata", '{"max_seq_lengths":[1024]}', "--out", str(out), "--threads", "1"]) == 0
    (row,) = json.loads((out / "comparison.json").read_text())["rows"]
    assert row["metric"] == "1024" and row["n"] == 2
    # within its trained length SmolLM2 finds the needle; YaRN x2 need not change that
    assert row["without_spec"]["value"] == 1.0


def test_a_ruler_task_that_needs_the_network_fails_at_once_in_one_line(yarn2, tmp_path, capsys, monkeypatch):
    import attntemp.hf.models.where

    monkeypatch.setattr(attntemp.hf.models.where, "hub_reachable", lambda timeout=3.0: False)  # as on a machine offline
    argv = ["eval", "--spec", yarn2, "--tasks", "ruler_qa_squad", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(
        "attntemp eval: error: --tasks 'ruler_qa_squad' could not be loaded without the network: it needs the SQuAD"
    )
    assert not (tmp_path / "out").exists()
