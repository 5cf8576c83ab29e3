"""Which tuning methods survive held-out documents and lengths, on the shipped tiny model.

Every method is tuned at one length (``--length``, 4x the trained length by default) on the tuning
pool of stdlib documents and scored, at that length and at held-out lengths (the trained length and
8x), on two texts: the stdlib's evaluation pool and a second text no tuner saw any of
(``--heldout-text``, default ``package:markdown``: Python code from outside the stdlib the tiny
model was trained on), against m = 1 with the same RoPE (and YaRN's own m with YaRN): paired ratios
of tail perplexity with 95% bootstrap intervals and a verdict in words.

    python scripts/trust_table.py --out runs/trust_tiny --threads 1   # ~35 min on 1 busy core; tables on stdout

Writes ``OUT/<rope>/<method>/`` (each tune's spec.json, evidence.json, evidence.md) and
``OUT/table.md`` (one table per text), ``OUT/table.json`` and ``OUT/trust.png``. A rerun reuses
every ``evidence.json`` already there (delete a folder to redo that method).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attntemp.evaluate import corpus
from attntemp.evaluate.sweep import SweepConfig
from attntemp.evaluate.tasks import EvalContext, EvalOptions, get_task
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.evidence import M_ONE, TUNED, YARN, comparisons, evaluate_specs, evidence_specs
from attntemp.tune.runner import TuneConfig, run_tune
from attntemp.utils.options import from_argv, option, reuse

METHODS = {  # folder: (label, TuneConfig fields)
    "global": ("best global m (search)", {"method": "search", "granularity": "global", "objective": "perplexity"}),
    "gradient": ("per head, gradient", {"method": "gradient", "granularity": "head", "steps": 60}),
    "log_length": (
        "length schedule log_length, gradient at L/2 and L",
        {"method": "gradient", "granularity": "head", "steps": 60, "schedule": "log_length", "lengths": "half"},
    ),
    "log_length_slope": (
        "length schedule, slope only (a = 0), gradient at L/2 and L",
        {"method": "gradient", "granularity": "head", "steps": 60, "schedule": "log_length_slope", "lengths": "half"},
    ),
    **{
        f"target_{t}": (
            f"per head, entropy target {t}",
            {"method": "search", "granularity": "head", "objective": "entropy", "target": t},
        )
        for t in ("entropy", "norm_entropy", "entropy_growth", "max_weight")
    },
}


TRAINED = 256  # the tiny model's trained length L0


@dataclass(frozen=True, kw_only=True)
class TrustTableConfig:
    """Where the tunes go, the length they are tuned at and checked at, the RoPE methods, the texts."""

    out: str = option("runs/trust_tiny", "output folder")
    length: int = reuse(TuneConfig, "length", 1024)
    checks: tuple[int, ...] = reuse(TuneConfig, "check_lengths", (256, 2048))
    rope: tuple[str, ...] = reuse(SweepConfig, "rope", ("none", "yarn"))
    docs: int = reuse(EvalOptions, "n_docs", 16)
    heldout_text: str = option("package:markdown", "the second text, scored whole")
    threads: int | None = reuse(ModelOptions, "threads")


RULES = {  # label-free published laws, applied as they are (no tuning): label: schedule
    "Qwen log-n, m = ln n / ln L0 (no tuning)": "logn",
    "sqrt law, m = sqrt(ln n / ln L0) (no tuning)": "sqrt_logn",
}


def _scored_lengths(model, tok, spec: TemperatureSpec, ctx: EvalContext, args: TrustTableConfig) -> dict:
    """``spec`` and its baselines at the tuning length and each held-out length, on ``ctx``'s text."""
    scored = {}
    for n in (args.length, *args.checks):
        res = evaluate_specs(model, tok, n, evidence_specs(dict(spec.rope) or None, spec), ("perplexity",), ctx)
        scored[n] = {"results": res, "comparisons": comparisons(res, ["perplexity"])}
    return {**scored[args.length], "checks": {n: scored[n] for n in args.checks}}


def _rule(model, tok, rope: str, schedule: str, args: TrustTableConfig) -> dict:
    """A fixed schedule scored like a tuned spec: at the length and the held-out lengths, on both texts."""
    spec = TemperatureSpec(
        schedule=schedule, schedule_params={"trained_len": TRAINED}, rope=rope_for(rope, args.length, TRAINED)
    )
    ctx = EvalContext(TRAINED, corpus.pool(corpus.load_text("stdlib"), "evaluation"), n_docs=args.docs)
    other = replace(ctx, docs=corpus.load_text(args.heldout_text, name="heldout_text"))
    second = {"text": args.heldout_text, "tasks": ["perplexity"], **_scored_lengths(model, tok, spec, other, args)}
    return {**_scored_lengths(model, tok, spec, ctx, args), "heldout": second, "spec": spec.to_dict()}


def _int_checks(scored: dict) -> dict:
    return {**scored, "checks": {int(n): c for n, c in scored["checks"].items()}}


def _load(path: Path) -> dict:
    """A saved evidence.json, its held-out lengths back as ints (JSON keys are strings)."""
    ev = _int_checks(json.loads(path.read_text()))
    return {**ev, "heldout": _int_checks(ev["heldout"])} if ev.get("heldout") else ev


def _at(ev: dict, n: int, text: int, args: TrustTableConfig) -> dict:
    """The scores of one evidence at length ``n`` on text 0 (the evaluation pool) or 1 (the second)."""
    scored = ev if text == 0 else ev["heldout"]
    return scored if n == args.length else scored["checks"][n]


def _cell(scored: dict, name: str) -> str:
    """``"0.6123 [0.5500, 0.6800] better"``: spec ``name`` against m = 1 on tail perplexity, paired."""
    res = scored["results"]
    return get_task("perplexity").compare(res[name]["perplexity"], res[M_ONE]["perplexity"], "tail_ppl")


def _ppl(scored: dict, name: str) -> float:
    return scored["results"][name]["perplexity"]["tail_ppl"]


def run(args: TrustTableConfig) -> tuple[str, list[dict]]:
    model, tok = load_model("tiny")
    rows, out = [], Path(args.out)
    for rope in args.rope:
        for folder, (label, given) in METHODS.items():
            kw = dict(given)
            if kw.get("lengths") == "half":
                kw["lengths"] = (args.length // 2,)
            done = out / rope / folder / "evidence.json"
            if done.is_file():
                rows.append({"rope": rope, "method": label, "seconds": None, "evidence": _load(done)})
                continue
            cfg = TuneConfig(
                out=str(out / rope / folder),
                length=args.length,
                rope=rope,
                tasks=("perplexity",),
                n_docs=args.docs,
                check_lengths=tuple(args.checks),
                overwrite=True,  # a folder without evidence.json is a run that stopped: redone
                heldout_text=args.heldout_text,
                progress=False,
                **kw,
            )
            t0 = time.perf_counter()
            ev = run_tune(cfg, model, tok).evidence
            rows.append({"rope": rope, "method": label, "seconds": time.perf_counter() - t0, "evidence": ev})
            print(f"{rope:5s} {label}: {time.perf_counter() - t0:.0f} s", flush=True)
        for label, schedule in RULES.items():
            t0 = time.perf_counter()
            done = out / rope / f"rule_{schedule}" / "evidence.json"
            if done.is_file():
                rows.append({"rope": rope, "method": label, "seconds": None, "evidence": _load(done)})
                continue
            ev = _rule(model, tok, rope, schedule, args)
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(ev, default=float))
            rows.append({"rope": rope, "method": label, "seconds": time.perf_counter() - t0, "evidence": ev})
            print(f"{rope:5s} {label}: {time.perf_counter() - t0:.0f} s", flush=True)
    return table(rows, args), rows


def text_labels(args: TrustTableConfig) -> tuple[str, str]:
    return (f"stdlib, evaluation pool ({args.docs} windows)", f"{args.heldout_text}, whole ({args.docs} windows)")


def _table(rows: list[dict], args: TrustTableConfig, text: int) -> str:
    lengths = [args.length, *args.checks]
    head = "| rope | spec | " + " | ".join(f"tail ppl at {n} / m = 1" for n in lengths) + " |"
    lines = [head, "|---|---|" + "---|" * len(lengths)]
    for rope in dict.fromkeys(r["rope"] for r in rows):
        first = next(r["evidence"] for r in rows if r["rope"] == rope)
        scored = {n: _at(first, n, text, args) for n in lengths}
        base = " | ".join(f"{_ppl(scored[n], M_ONE):.4g}" for n in lengths)
        lines.append(f"| {rope} | m = 1 (tail ppl) | {base} |")
        if YARN in first["results"]:
            lines.append(f"| {rope} | YaRN's own m | " + " | ".join(_cell(scored[n], YARN) for n in lengths) + " |")
        for r in (r for r in rows if r["rope"] == rope):
            cells = [_cell(_at(r["evidence"], n, text, args), TUNED) for n in lengths]
            lines.append(f"| {rope} | {r['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(rows: list[dict], args: TrustTableConfig) -> str:
    """One table per text: the stdlib's evaluation pool, then the second text."""
    return "\n\n".join(f"On {label}:\n\n" + _table(rows, args, i) for i, label in enumerate(text_labels(args)))


def _ratio(scored: dict, name: str) -> tuple[float, float, float] | None:
    res = scored["results"]
    ci = get_task("perplexity").paired(res[name]["perplexity"], res[M_ONE]["perplexity"], "tail_ppl")
    return None if ci is None else (ci.value, ci.low, ci.high)


LENGTH_MARKS = (("#B7A6D3", "o"), ("#7B5EA7", "s"), ("#3B1F66", "^"))  # light to dark: short to long


def _length_label(n: int, args: TrustTableConfig) -> str:
    scale = "trained length" if n == TRAINED else f"{n / TRAINED:g}x"
    return f"{n} tokens ({scale}" + (", tuned here)" if n == args.length else ")")


def _forest(ax, mine: list[dict], lengths: list[int], args: TrustTableConfig, text: int) -> None:
    """One RoPE's and text's panel: per spec (a row) and length (a marker), the paired ratio and its interval."""
    for j, n in enumerate(lengths):
        colour, marker = LENGTH_MARKS[j % len(LENGTH_MARKS)]
        for i, r in enumerate(mine):
            got = _ratio(_at(r["evidence"], n, text, args), TUNED)
            if got is not None:
                v, lo, hi = got
                ax.errorbar(
                    v,
                    i + (j - 1) * 0.24,
                    xerr=[[v - lo], [hi - v]],
                    fmt=marker,
                    ms=4,
                    capsize=2,
                    color=colour,
                    label=_length_label(n, args) if i == 0 else None,
                )
    ax.set_yticks(range(len(mine)), [r["method"].replace(", gradient at L/2 and L", "") for r in mine], fontsize=7)


def plot(rows: list[dict], args: TrustTableConfig, path: Path) -> Path:
    """A forest plot: each spec's paired tail-perplexity ratio to m = 1 with its 95% interval, one
    panel per RoPE (a column, titled in its palette colour) and text (a row), one marker per length,
    shortest to longest."""
    import matplotlib.pyplot as plt

    from attntemp.analysis import style

    lengths = sorted([args.length, *args.checks])
    ropes = list(dict.fromkeys(r["rope"] for r in rows))
    labels = text_labels(args)
    height = 2 * (0.42 * max(sum(r["rope"] == rope for r in rows) for rope in ropes) + 1.2) + 0.8
    fig, axes = plt.subplots(
        len(labels),
        len(ropes),
        figsize=(6 * len(ropes) + 2.5, height),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for row, label in enumerate(labels):
        for ax, rope in zip(axes[row], ropes, strict=True):
            _forest(ax, [r for r in rows if r["rope"] == rope], lengths, args, row)
            ax.axvline(1.0, **style.NULL, label="m = 1 (no change)" if (rope, row) == (ropes[0], 0) else None)
            ax.set_xlabel("tail perplexity / m = 1 (paired, 95% interval); < 1 is better", fontsize=8)
            ax.xaxis.set_major_formatter(style.plain)
            ax.set_title(f"rope {rope}, on {label}", fontsize=10, color=style.rope_color(rope))
    axes[0][0].invert_yaxis()  # the table's order, top down (the panels share the axis)
    fig.legend(
        *axes[0][0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=len(lengths) + 1,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"tuned at {args.length} tokens on the stdlib's tuning pool, scored on {args.docs} windows of each "
        "text at each length",
        fontsize=9,
    )
    return style.save(fig, path)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(TrustTableConfig, argv, __doc__.split("\n\n")[0])
    if args.threads:
        torch.set_num_threads(args.threads)
    md, rows = run(args)
    out = Path(args.out)
    (out / "table.md").write_text(md + "\n")
    plot(rows, args, out / "trust.png")
    (out / "table.json").write_text(
        json.dumps(
            [
                {k: v for k, v in r.items() if k != "evidence"}
                | {"spec": r["evidence"]["spec"], "checks": list(r["evidence"]["checks"]), "texts": text_labels(args)}
                for r in rows
            ],
            indent=1,
        )
    )
    print(md)


if __name__ == "__main__":
    main()
