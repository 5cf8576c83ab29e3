"""Does a tuned temperature add anything once the RoPE frequencies are tuned too? (issue 27)

The shipped tiny model (trained at 256 tokens), everything tuned at 4x (1024 tokens) on the stdlib's
tuning pool, scored at 1x (256), 4x (1024) and 8x (2048) on the stdlib's evaluation pool and on a
text it never saw (``package:markdown``, the sources of an installed package), 16 windows each:

* PI (linear, s = 4) at m = 1; YaRN (s = 4) with its own m = (0.1 ln s + 1)^2
* learned factors alone: LongRoPE's long_factor (one per rotary pair) by gradient, started from YaRN,
  attention_factor 1 (m = 1), every weight frozen
* learned factors with LongRoPE's fixed scale sqrt(1 + ln s / ln L0) on cos/sin, trained with it
* learned factors and a per-head temperature, jointly
* a per-head temperature on YaRN (gradient, the frequencies YaRN's)
* LongRoPE's evolutionary search (tune.rope_evolution) over the same factors with its fixed scale, the
  same objective and as many window forwards as one gradient run has steps

Figures: tail perplexity (predictions at positions >= 256; all tokens at 256) and key-token
perplexity (the n-gram rule of attntemp.evaluate's key_tokens task), each with its 95% bootstrap
interval, and paired ratios with their intervals. Every trained spec and every scored point is kept
as JSON under docs/results/tiny_rope_factors/ (a rerun resumes); prints and writes
docs/results/tiny_rope_factors_table.md and docs/results/tiny_rope_factors.png.

    python scripts/rope_factors_table.py            # --steps 60 --docs 16 --threads 1
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import attntemp
from attntemp.evaluate import corpus
from attntemp.evaluate.score import ScoreStore, score
from attntemp.evaluate.tasks import EvalContext, EvalOptions, get_task
from attntemp.hf.loading import ModelOptions
from attntemp.hf.rope_factors import factors_for
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.gradient import GradientOptions, run_gradient_tuning
from attntemp.tune.rope_evolution import evolve_rope_factors
from attntemp.tune.train import TrainOptions
from attntemp.utils.options import from_argv, option, reuse

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
OUT = RESULTS / "tiny_rope_factors"  # --out moves these three (a smoke run elsewhere)
TABLE = RESULTS / "tiny_rope_factors_table.md"
FIGURE = RESULTS / "tiny_rope_factors.png"
L0, TUNE_LENGTH, LENGTHS = 256, 1024, (256, 1024, 2048)
TEXTS = {"stdlib (evaluation pool)": "stdlib", "package:markdown (never seen)": "package:markdown"}
NAMES = {
    "pi": "PI, m = 1",
    "yarn_m": "YaRN, its m",
    "factors": "learned factors alone (m = 1)",
    "factors_scale": "learned factors + LongRoPE's fixed scale",
    "factors_head": "learned factors + per-head m, jointly",
    "yarn_head": "per-head m on YaRN",
    "evolution": "LongRoPE search + its fixed scale",
}
GRADIENT = {  # name: (rope_factors, rope_temperature, granularity)
    "factors": ("learn", "none", "global"),
    "factors_scale": ("learn", "longrope", "global"),
    "factors_head": ("learn", "learn", "head"),
    "yarn_head": ("off", "learn", "head"),
}
PAIRS = [  # (spec, against): the paired comparisons the verdict rests on
    ("factors_head", "factors"),
    ("factors_scale", "factors"),
    ("factors", "yarn_m"),
    ("yarn_head", "yarn_m"),
    ("factors_head", "yarn_head"),
    ("evolution", "factors_scale"),
]


def trained_specs(model, tok, steps: int) -> dict[str, TemperatureSpec]:
    """Every spec, trained once and kept under OUT/specs (a rerun loads them)."""
    folder = OUT / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    yarn = rope_for("yarn", TUNE_LENGTH, L0)  # s = 4, attention_factor 1
    specs = {"pi": TemperatureSpec(rope=rope_for("linear", TUNE_LENGTH, L0)), "yarn_m": TemperatureSpec.yarn(4.0, L0)}
    tuning = corpus.pool(corpus.load_text("stdlib"), "tuning")
    seconds = {}
    for name, (factors, temperature, granularity) in GRADIENT.items():
        path = folder / f"{name}.json"
        if not path.is_file():
            t0 = time.perf_counter()
            train = TrainOptions(steps=steps, granularity=granularity, rope=yarn, progress=False)
            opts = GradientOptions(
                lengths=(TUNE_LENGTH,), train=train, n_train=16, n_eval=2, rope_factors=factors,
                rope_temperature=temperature,
            )  # fmt: skip
            spec, _ = run_gradient_tuning(model, tok, opts, OUT / "runs" / name, docs=tuning)
            spec.save(path)
            seconds[name] = time.perf_counter() - t0
        specs[name] = TemperatureSpec.load(path)
    path = folder / "evolution.json"
    if not path.is_file():
        t0 = time.perf_counter()
        ids = corpus.heldout_windows(tok, TUNE_LENGTH, 18, docs=tuning)[:2]  # [2, 1024]: the gradient runs' first two
        f = factors_for(model, yarn, TUNE_LENGTH, longrope_scale=True)
        found = evolve_rope_factors(model, ids, f, budget=steps, population=8)
        TemperatureSpec(rope=f.to_rope()).save(path)
        (folder / "evolution_log.json").write_text(json.dumps({"loss": found.loss, "forwards": found.forwards}))
        seconds["evolution"] = time.perf_counter() - t0
    specs["evolution"] = TemperatureSpec.load(path)
    if seconds:
        print("trained:", {k: round(v, 1) for k, v in seconds.items()})
    return specs


def scored(model, tok, specs, n_docs: int) -> dict[tuple[str, int, str], dict]:
    """``{(text, length, spec): {task: result}}``, each scored once into ``OUT/scores.db`` (a rerun
    resumes; the ``points/`` JSON files beside it are the earlier runs' records of the same points)."""
    out = {}
    store = ScoreStore(OUT / "scores.db")
    for label, text in TEXTS.items():
        docs = corpus.load_text(text)
        docs = corpus.pool(docs, "evaluation") if text == "stdlib" else docs  # markdown: held out whole
        ctx = EvalContext(L0, docs, n_docs=n_docs, trials=20, batch_size=4)  # trials: its scores.db's keys
        for n in LENGTHS:
            for name, spec in specs.items():
                out[(label, n, name)] = {
                    t: score(model, tok, spec, t, n, ctx, store, "tiny").metrics for t in tasks_at(n)
                }
    store.close()
    return out


TASKS = ("perplexity", "key_tokens")


def tasks_at(n: int) -> tuple[str, ...]:
    """Key tokens (evidence more than L0 / 2 back) only past the trained length: at 256 a window has
    almost none."""
    return TASKS if n > L0 else TASKS[:1]


def metric(n: int, task: str) -> str:
    if task == "key_tokens":
        return "key_ppl"
    return "ppl" if n <= L0 else "tail_ppl"


def _ratio(points, label, n, task, a, b) -> str:
    t, m = get_task(task), metric(n, task)
    ci = t.paired(points[(label, n, a)][task], points[(label, n, b)][task], m)
    return "no interval" if ci is None else f"{ci.fixed()} {t.verdict(ci, m)}"


def table(points) -> str:
    lines = ["# Tiny model: learned RoPE factors and the temperature (tuned at 1024 = 4x)", ""]
    lines += ["Command: `python scripts/rope_factors_table.py` (see its docstring).", ""]
    for label in TEXTS:
        lines += [f"## {label}", ""]
        lines += ["| length | spec | perplexity (95%) | / PI, paired | key-token ppl (95%) | / PI, paired |"]
        lines += ["|---|---|---|---|---|---|"]
        for n in LENGTHS:
            for name in NAMES:
                cells = []
                for task in TASKS:
                    if task not in tasks_at(n):
                        cells += ["-", "-"]
                        continue
                    res, m = points[(label, n, name)][task], metric(n, task)
                    paired = "" if name == "pi" else _ratio(points, label, n, task, name, "pi")
                    cells += [get_task(task).describe(res, m), paired]
                lines.append(f"| {n} | {NAMES[name]} | " + " | ".join(cells) + " |")
        lines += ["", "| length | comparison | perplexity ratio, paired (95%) | key-token ppl ratio, paired (95%) |"]
        lines += ["|---|---|---|---|"]
        for n in LENGTHS:
            for a, b in PAIRS:
                ratios = [_ratio(points, label, n, task, a, b) if task in tasks_at(n) else "-" for task in TASKS]
                lines.append(f"| {n} | {NAMES[a]} / {NAMES[b]} | " + " | ".join(ratios) + " |")
        lines.append("")
    lines.append("perplexity: all tokens at 256 (no position is past the trained length), tail (>= 256) beyond.")
    return "\n".join(lines) + "\n"


def figure(points) -> None:
    """Forest plot: tail perplexity / PI, paired 95% intervals, at 1024 and 2048, both texts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    names = [n for n in NAMES if n != "pi"]
    task = get_task("perplexity")
    for ax, label in zip(axes, TEXTS, strict=True):
        for k, (n, colour) in enumerate(((1024, "#1f77b4"), (2048, "#d62728"))):
            for i, name in enumerate(names):
                a, b = points[(label, n, name)]["perplexity"], points[(label, n, "pi")]["perplexity"]
                ci = task.paired(a, b, "tail_ppl")
                y = i + 0.18 * (k * 2 - 1)
                ax.errorbar(ci.value, y, xerr=[[ci.value - ci.low], [ci.high - ci.value]], fmt="o", color=colour,
                            label=f"{n} tokens" if i == 0 else None, capsize=3)  # fmt: skip
        ax.axvline(1.0, color="grey", lw=1, ls="--")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("tail perplexity / PI at m = 1 (paired, 95%)")
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_yticks(range(len(names)), [NAMES[n] for n in names], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("tiny model, tuned at 1024 (4x): lower is better", fontsize=11)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=120)


@dataclass(frozen=True, kw_only=True)
class RopeFactorsConfig:
    """The training budget, the evaluation windows, threads and where the results go."""

    steps: int = option(60, "gradient steps; the search's budget of window forwards")
    docs: int = reuse(EvalOptions, "n_docs", 16)
    threads: int = reuse(ModelOptions, "threads", 1)
    out: str = option(str(RESULTS), "folder of the table, the figure and the JSON cache")


def main(argv: list[str] | None = None) -> None:
    args = from_argv(RopeFactorsConfig, argv, __doc__.splitlines()[0])
    global OUT, TABLE, FIGURE
    OUT, TABLE, FIGURE = (Path(args.out) / x.name for x in (OUT, TABLE, FIGURE))
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tok = attntemp.load_model("tiny")
    specs = trained_specs(model, tok, args.steps)
    points = scored(model, tok, specs, args.docs)
    text = table(points)
    TABLE.write_text(text)
    figure(points)
    print(text)
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
