"""Every benchmark in ``benchmarks/`` runs its smallest case (the shipped tiny model or the smallest
shape, one length, one repeat, one thread), as ``python benchmarks/NAME.py ARGS`` in a fresh
interpreter, and prints the JSON its docstring describes: each value parsed and checked for what
the benchmark measures (the same decision, the same scores, the lengths asked for), so a benchmark
that stops running, or runs something else, fails the day it does. The modules without a
``__main__`` (``_harness.py``, the plumbing they share; ``retrieval_cost.py``, advise_cost's
retrieval case) run through the benchmarks that import them (:data:`HELPERS`).

The runs are ``slow`` (5-60 s each on 2 busy cores: a fresh interpreter imports torch, several
spawn children or start Ray); ``.ci/run`` runs them (``pytest -m slow tests/benchmarks``). The
rule that every benchmark has a case here is in the default suite."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from runnable import ROOT, entries, run_json, sources

from attntemp.ship.engines import ENGINE_NAMES


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def advise_cost(values: list[dict]) -> None:
    row, retrieval, shared = values  # the scoring row's case, the retrieval case, the shared-prefill case
    assert (row["benchmark"], row["model"], row["length"]) == ("advise_cost", "tiny", 512)
    assert row["kept_positions"] > 0 and all(_positive(row["key_ppl"][k]) for k in ("old", "new"))
    assert row["goals"]["scores_within_tolerance"] == (row["key_ppl_rel_diff"] <= row["tolerance"])
    assert set(row["peak_extra_bytes"]) == {"old", "new"}
    for kernel in ("probe", "blocked"):  # --attention: the new row patched, its kernel by probe or forced
        assert row["attention_kernel"][kernel]["scores_within_tolerance"] and _positive(
            row["attention_kernel"][kernel]["over_new"]["median"]
        )
    assert (retrieval["case"], retrieval["length"], retrieval["keys_per_haystack"]) == ("retrieval", 512, 4)
    assert retrieval["same_answers"] == 4 and all(_positive(v) for v in retrieval["trials_per_second"].values())
    assert (shared["case"], shared["length"], shared["keys_per_haystack"]) == ("shared_prefill", 512, 4)
    assert set(shared["seconds_per_row"]) == {"key_tokens", "multikey", "shared"} and shared["same_answers"] is True
    ratio = shared["shared_over_two_rows"]  # one multikey_keys row over a key_tokens row and a multikey row
    assert _positive(ratio["median"]) and ratio["low"] <= ratio["median"] <= ratio["high"]


def advise_racing(values: list[dict]) -> None:
    (row,) = values  # one length: 2x the tiny model's 256
    assert (row["benchmark"], row["length"], row["windows"]) == ("advise_racing", 512, 4)
    racing, exhaustive = row["racing"], row["exhaustive"]
    assert set(racing["picks"]) == set(exhaustive["picks"]) == set(row["engines"]) == set(ENGINE_NAMES)
    assert all(racing["picks"].values()) and all(exhaustive["picks"].values())
    assert 0 < row["forwards_racing"] <= row["forwards_exhaustive"]
    assert row["ratio"] == round(row["forwards_racing"] / row["forwards_exhaustive"], 4)
    same = racing["survivors"] == exhaustive["survivors"] and racing["picks"] == exhaustive["picks"]
    assert row["same_decision"] is same
    assert row["machine"]["cores"] >= 1


def attention(values: list[dict]) -> None:
    (out,) = values
    (res,) = out["results"]
    assert res["L"] == 256 and all(_positive(t) for t in res["seconds"].values())
    assert set(res["seconds"]) == {"plain_sdpa", "tempered_sdpa", "reference"}


def attention_rate(values: list[dict]) -> None:
    (out,) = values
    (res,) = out["results"]  # --quick: 256 tokens, SmolLM2's heads, float32
    assert (res["shape"], res["L"], res["dtype"]) == ("smollm2", 256, "float32")
    assert set(res["candidates"]) == {"sdpa_gqa", "sdpa_repeat_kv", "sdpa_compiled", "flex_compiled", "blocked"}
    for row in res["candidates"].values():
        assert _positive(row["gflops"]["median"]) and _positive(row["over_mm"]["median"])
        assert row["max_abs_diff_to_sdpa"] < 1e-4  # float32: every candidate computes the same attention
    assert res["probe_picks"] in ("sdpa", "blocked") and res["fastest"] in res["candidates"]
    ceiling = res["softmax_ceiling"]  # 1 / (1 + e R / (4 D)): strictly inside (0, 1)
    assert _positive(ceiling["exp_ns"]["median"]) and 0 < ceiling["over_mm"]["median"] < 1
    assert set(out["machine"]) >= {"cpu", "amx_bf16", "load_average"}


def exp_rate(values: list[dict]) -> None:
    (row,) = values
    assert row["benchmark"] == "exp_rate"
    if "skipped" in row:  # no C++ compiler or no ninja here: the JSON says why instead of a figure
        assert row["skipped"].startswith("could not build the C++ loops:")
        return
    assert row["lanes"] in (8, 16) and row["tile"] == [256, 512]
    assert set(row["ns_per_element"]) == {"torch_exp", "vec_exp_u10", "vec_exp_u20"}
    assert all(_positive(v["median"]) for v in row["ns_per_element"].values())
    assert 0 <= row["u20_max_rel_error"] < 1e-5  # exp_u20 is exp: 20 ULP at most, not another function


def omp_wait_policy(values: list[dict]) -> None:
    (row,) = values
    assert (row["benchmark"], row["model"], row["length"], row["batch"]) == ("omp_wait_policy", "tiny", 64, 1)
    for cond in ("idle", "shared"):  # both policies timed in both conditions, paired
        assert all(_positive(row["seconds_per_forward"][cond][p]["median"]) for p in ("spin", "passive"))
        ratio = row["passive_over_spin"][cond]
        assert _positive(ratio["median"]) and ratio["low"] <= ratio["median"] <= ratio["high"]


def cli_help(values: list[dict]) -> None:
    (out,) = values
    (res,) = out["results"]
    assert res["command"] == "top" and out["repeats"] == 1
    assert all(_positive(res["seconds"][k]["median"]) for k in ("cli_help", "bare_python", "import_torch"))


def huge_pages(values: list[dict]) -> None:
    (out,) = values
    assert out["L"] == 512 and out["repeats"] == 1 and set(out["seconds"]) == {"none", "huge_pages"}
    assert _positive(out["huge_pages_over_none"]["median"]) and out["faults"]["none"]["median"] >= 0  # 0: all small


def forward_breakdown(values: list[dict]) -> None:
    *runs, out = values  # a line per timed forward, then the summary
    assert [(r["dtype"], r["L"]) for r in runs] == [("float32", 512), ("bfloat16", 512)]
    for r in runs:
        assert math.isclose(sum(p["share"] for p in r["parts"].values()), 1.0, rel_tol=1e-6)
    (res,) = out["results"]
    assert out["benchmark"] == "forward_breakdown" and res["L"] == 512 and "bfloat16_over_float32_total" in res


def gradient_step(values: list[dict]) -> None:
    (out,) = values
    assert out["model"] == "tiny" and set(out["512"]) >= {"forward_s", "step_s", "step_peak_extra_gib"}


def long_context(values: list[dict]) -> None:
    (out,) = values
    assert out["model"] == "tiny" and out["dtype"] == "float32" and _positive(out["512"]["peak_rss_gib"])


def measure(values: list[dict]) -> None:
    (out,) = values
    assert out["L"] == 512 and all(_positive(t) for t in out["seconds"].values())
    assert _positive(out["stats_over_sdpa"]["median"]) and set(out["peak_extra_MiB"]) == {"plain_sdpa", "stats"}


def model_overhead(values: list[dict]) -> None:
    (out,) = values
    assert out["model"] == "tiny" and out["tokens"] == 512 and _positive(out["patched_over_unpatched"])


def monitor(values: list[dict]) -> None:
    (out,) = values
    (res,) = out["results"]
    assert "skipped" not in res and (res["model"], res["context"], res["new_tokens"]) == ("tiny", 512, 8)
    assert set(res["ratios"]) == {"every_1_over_plain", "every_8_over_plain"}


def needles_cost(values: list[dict]) -> None:
    (out,) = values
    assert (out["length"], out["needles_per_forward"], out["passkey_trials"]) == (512, 2, 1)
    assert all(0 <= a <= 1 for a in out["accuracy"].values()) and _positive(out["passkey_over_needles"])


def ray_sweep(values: list[dict]) -> None:
    (out,) = values  # 1 length x 2 RoPE methods x 1 multiplier, three ways
    assert out["same_rows"] is True
    assert {k: r["points"] for k, r in out["runs"].items()} == dict.fromkeys(
        ("one_process", "ray_1_worker", "ray_2_workers"), 2
    )


def sweep_batching(values: list[dict]) -> None:
    (out,) = values
    assert (out["length"], out["k"]) == (512, 2) and out["max_abs_tail_ppl_diff"] < 1e-3  # batched = one by one


# path: (the smallest case's flags, the check of what it prints)
SMALLEST: dict[str, tuple[list[str], Callable[[list[Any]], None]]] = {
    "benchmarks/advise_cost.py": (
        [
            *"--cases tiny:512 --retrieval tiny:512:4 --shared tiny:512:4".split(),
            *"--repeats 1 --threads 1 --attention probe,blocked".split(),
        ],
        advise_cost,
    ),
    "benchmarks/advise_racing.py": (["--scales", "2", "--race-windows", "4", "--threads", "1"], advise_racing),
    "benchmarks/attention.py": (["--lengths", "256", "--repeats", "1"], attention),
    "benchmarks/attention_rate.py": (["--quick"], attention_rate),
    "benchmarks/cli_help.py": (["--commands", "top", "--repeats", "1"], cli_help),
    "benchmarks/exp_rate.py": (["--repeats", "1", "--calls", "2"], exp_rate),
    "benchmarks/omp_wait_policy.py": (
        ["--model", "tiny", "--length", "64", "--batch", "1", "--forwards", "1", "--repeats", "1", "--threads", "1"],
        omp_wait_policy,
    ),
    "benchmarks/huge_pages.py": (
        ["--model", "tiny", "--length", "512", "--dtype", "float32", "--repeats", "1", "--threads", "1"],
        huge_pages,
    ),
    "benchmarks/forward_breakdown.py": (
        ["--model", "tiny", "--lengths", "512", "--repeats", "1", "--threads", "1"],
        forward_breakdown,
    ),
    "benchmarks/gradient_step.py": (
        ["--model", "tiny", "--lengths", "512", "--repeats", "1", "--threads", "1"],
        gradient_step,
    ),
    "benchmarks/long_context.py": (["--model", "tiny", "--lengths", "512", "--threads", "1"], long_context),
    "benchmarks/measure.py": (["--length", "512", "--repeats", "1"], measure),
    "benchmarks/model_overhead.py": (["--model", "tiny", "--length", "512", "--repeats", "1"], model_overhead),
    "benchmarks/monitor.py": (
        ["--models", "tiny", "--new-tokens", "8", "--repeats", "1", "--threads", "1"],
        monitor,
    ),
    "benchmarks/needles_cost.py": (
        ["--model", "tiny", "--length", "512", "--k", "2", "--docs", "1", "--trials", "1", "--repeats", "1"],
        needles_cost,
    ),
    "benchmarks/ray_sweep.py": (["--lengths", "256", "--docs", "1", "--multipliers", "1.0"], ray_sweep),
    "benchmarks/sweep_batching.py": (["--length", "512", "--k", "2", "--repeats", "1"], sweep_batching),
}


# the modules benchmarks import (no ``__main__``), and the smallest case that runs each
HELPERS = {
    "benchmarks/_harness.py": "every benchmark",
    "benchmarks/retrieval_cost.py": "benchmarks/advise_cost.py (--retrieval)",
    "benchmarks/shared_prefill_cost.py": "benchmarks/advise_cost.py (--shared)",
}


def test_every_benchmark_has_a_smallest_case():
    assert set(SMALLEST) == set(entries(("benchmarks",)))
    modules = {str(p.relative_to(ROOT)) for p in sources(("benchmarks",))} - set(SMALLEST)
    assert set(HELPERS) == modules, "a module of benchmarks/ without __main__: say which smallest case runs it"


def test_the_json_checks_catch_a_wrong_result():
    with pytest.raises(AssertionError):
        sweep_batching([{"length": 512, "k": 2, "max_abs_tail_ppl_diff": 0.5}])
    with pytest.raises(ValueError):  # a benchmark that printed two results where one was asked
        advise_racing([{}, {}])


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(SMALLEST))
def test_smallest_case_runs_and_prints_its_json(path):
    argv, check = SMALLEST[path]
    check(run_json(path, argv))
