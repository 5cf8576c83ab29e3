"""Every runnable script in ``scripts/`` runs its smallest case somewhere in the tests, or says here
why only its ``--help`` is checked (``tests/test_rules_scripts.py``: every entry, and every shell
script, answers ``--help``; every command line the docs show parses).

- Run here, as ``python scripts/NAME.py ARGS`` in a fresh interpreter on the shipped tiny model
  (one length, the fewest windows, steps and trials each allows), their JSON (or files) checked:
  :data:`SMALLEST`. ``slow`` (5-60 s each on 2 busy cores); ``.ci/run`` runs them.
- Run by their own test modules, in-process on the tiny model: :data:`ELSEWHERE` (the SmolLM2 and
  Gemma 3 scripts at the tiny model's lengths; ``gpu_check.py`` through ``--dry-run``, the same
  code paths on the CPU, since no GPU exists here).
- ``--help`` only: :data:`HELP_ONLY`, each with why (vLLM's own environment, the engine builds, the
  20-minute tiny experiments).

``scripts/distant_figure.py`` is a module the distant-context scripts import (no ``__main__``);
``tests/scripts/test_distant_figure.py`` draws its panels."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from runnable import ROOT, entries, json_values, run_entry


def _one(stdout: str) -> dict:
    (value,) = json_values(stdout)
    return value


def bake_check(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert all(row["reload_max_abs_diff"] < 1e-4 for row in out["bake"].values())  # baked = patched
    assert all(row["effect"] > 1e-3 for k, row in out["bake"].items() if k != "llama_yarn_4_32")
    assert set(out["refusals"]) == {"qwen3_per_head", "gemma2_m_1.3", "logn", "export_m_without_yarn"}


def calibration_figures(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert [r["t_true"] for r in out["recovery"]] == [0.5, 1.0, 2.5]
    assert all(r["rel_err"] < 0.1 for r in out["recovery"]) and out["max_abs_diff_vs_torchmetrics"] < 1e-4
    assert (tmp / "reliability.png").stat().st_size > 0


def key_token_truncation(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert (out["model"], out["length"], out["windows"]) == ("tiny", 256, 2)
    for rule in ("ngram", "longppl_self"):  # a rule that finds no key token in 2 windows says null
        assert math.isfinite(out[rule]["all"]["ratio"]["value"]) and out[rule]["all"]["tokens"] > 0
        key = out[rule]["key"]
        assert (key["ratio"] is None) == (key["tokens"] == 0) and (key["tokens"] > 0 or rule == "longppl_self")


def learn_tiny(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert (out["length"], out["steps"]) == (512, 2) and math.isfinite(out["tail_ppl_after"])
    assert (tmp / "learned_spec.json").is_file()


def make_lm_eval_tasks(stdout: str, tmp: Path) -> None:
    assert stdout.strip() == f"wrote 4 tasks to {tmp}"
    for name in ("passkey_256", "needle_256"):
        rows = [json.loads(line) for line in (tmp / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(r["prompt"] and r["answer"] for r in rows)


def monitor_figure(stdout: str, tmp: Path) -> None:
    assert stdout.startswith("## Watching attention") and "| 4x = 1024, YaRN |" in stdout
    assert (tmp / "tiny_monitor_passkey.png").stat().st_size > 0


def rope_factors_table(stdout: str, tmp: Path) -> None:
    table = (tmp / "tiny_rope_factors_table.md").read_text()
    assert table in stdout and "LongRoPE search + its fixed scale" in table
    assert (tmp / "tiny_rope_factors.png").stat().st_size > 0


def train_tiny(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert out["smoke"] is True and math.isfinite(out["final_train_loss"])
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in tmp.iterdir()}


def trust_one_length(stdout: str, tmp: Path) -> None:
    rows = json.loads((tmp / "table.json").read_text())["rows"]
    assert {"m=1", "rule logn", "per head, entropy target norm_entropy"} <= set(rows)
    assert all(math.isfinite(r["tail_ppl"]) for r in rows.values())


def trust_table(stdout: str, tmp: Path) -> None:
    rows = json.loads((tmp / "table.json").read_text())
    assert len(rows) >= 8 and all(r["spec"] for r in rows)
    assert (tmp / "table.md").read_text() in stdout + "\n"


def walk_counts(stdout: str, tmp: Path) -> None:
    out = _one(stdout)
    assert (out["value"], out["exit"]) == ("model", 0) and out["functions"] > 0 and out["calls"] >= out["functions"]


TINY = ["--model", "tiny"]
TRUST_ONE = [*TINY, "--text", "stdlib", "--length", "512", "--docs", "2", "--tune-windows", "1", "--targets",
             "norm_entropy", "--heldout-text", "none"]  # fmt: skip
# path: (the smallest case's flags, given the output folder; the check of what it printed and wrote)
SMALLEST: dict[str, tuple[Callable[[str], list[str]], Callable[[str, Path], None]]] = {
    "scripts/bake_check.py": (lambda out: [], bake_check),
    "scripts/calibration_figures.py": (lambda out: ["--png", f"{out}/reliability.png"], calibration_figures),
    "scripts/key_token_truncation.py": (lambda out: ["--length", "256", "--windows", "2"], key_token_truncation),
    "scripts/learn_tiny.py": (
        lambda out: ["--length", "512", "--steps", "2", "--n-train", "1", "--n-eval", "1", "--out", out],
        learn_tiny,
    ),
    "scripts/make_lm_eval_tasks.py": (
        lambda out: ["--lengths", "256", "--docs", "2", "--out", out],
        make_lm_eval_tasks,
    ),
    "scripts/monitor_figure.py": (lambda out: [*TINY, "--trials", "2", "--out", out], monitor_figure),
    "scripts/rope_factors_table.py": (  # 8 steps: the evolution's least budget over 2 windows
        lambda out: ["--steps", "8", "--docs", "2", "--out", out],
        rope_factors_table,
    ),
    "scripts/train_tiny.py": (lambda out: ["--smoke", "--threads", "1", "--out", out], train_tiny),
    "scripts/trust_one_length.py": (lambda out: [*TRUST_ONE, "--out", out], trust_one_length),
    "scripts/trust_table.py": (  # 1024: the length schedules train at L / 2, which must pass L0 = 256
        lambda out: ["--length", "1024", "--checks", "256", "--rope", "none", "--docs", "2", "--out", out],
        trust_table,
    ),
    "scripts/walk_counts.py": (lambda out: ["--value", "model", "--out", out], walk_counts),
}
ELSEWHERE = {  # script: the test module that runs it on the tiny model
    "scripts/gemma3_distant.py": "test_gemma3_distant.py",
    "scripts/gpu_check.py": "test_gpu_check.py",
    "scripts/head_direction.py": "test_head_direction.py",
    "scripts/head_learned.py": "test_head_learned.py",
    "scripts/readings_page.py": "test_readings_page.py",
    "scripts/smollm2_breakdown.py": "test_smollm2_breakdown.py",
    "scripts/smollm2_distant.py": "test_smollm2_distant.py",
}
HELP_ONLY = {
    "scripts/vllm_logprobs.py": "runs in vLLM's own virtual environment (scripts/build_vllm_cpu.sh), not built here",
    "scripts/build_llama_cpp.sh": "downloads and compiles llama.cpp: about half an hour on 2 cores",
    "scripts/build_vllm_cpu.sh": "installs vLLM's CPU build in a virtual environment of its own",
    "scripts/experiments_tiny.sh": "about 20 minutes; its trust_table.py runs here in its smallest case",
}


def test_every_script_runs_somewhere_or_says_why_not():
    shell = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "scripts").glob("*.sh"))]
    groups = (set(SMALLEST), set(ELSEWHERE), set(HELP_ONLY))
    assert sorted(set().union(*groups)) == sorted([*entries(("scripts",)), *shell])
    assert sum(map(len, groups)) == len(set().union(*groups)), "a script is in two groups"


@pytest.mark.parametrize("path", sorted(ELSEWHERE))
def test_the_modules_that_run_a_script_load_it(path):
    module = Path(__file__).parent / ELSEWHERE[path]
    assert f'load_script("{Path(path).stem}")' in module.read_text() and ".main(" in module.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(SMALLEST))
def test_smallest_case_runs(path, tmp_path):
    argv, check = SMALLEST[path]
    out = tmp_path / "out"
    out.mkdir()
    check(run_entry(path, argv(str(out))).stdout, out)
