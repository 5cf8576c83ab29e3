"""``attntemp demo``: the whole argument on one model, in one report.

1. attention entropy at the trained length L0 and at 4x and 8x (no RoPE change, then YaRN);
2. tail perplexity versus the multiplier m = 1/T with no extension and with YaRN, at 4x and 8x;
3. passkey retrieval at L0, 4x and 8x for m = 1, YaRN's temperature and the tuned spec;
4. per-head entropy matching at 4x (with YaRN), checked on held-out text;
5. the tuned spec baked into q_proj, reloaded with plain transformers and checked.
Writes ``report.md`` and ``report.html`` (with PNGs) in the output folder.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis.measure import AttentionStats, measure
from ..analysis.monitor_demo import monitor_section
from ..evaluate.corpus import heldout_windows
from ..evaluate.sweep import SweepConfig, check_resumable, run_sweep
from ..evaluate.tasks import EvalContext, EvalOptions, eval_context, get_task
from ..hf import introspect
from ..hf.loading import load_model
from ..hf.rope_scaling import rope_for
from ..ops.intervals import mean_interval
from ..ops.spec import TemperatureSpec
from ..ship.bake import save_baked
from ..tune.evidence import BASELINE, TUNED, YARN, candidates, evaluate_specs
from ..tune.runner import TuneConfig, run_tune
from ..utils import checks, options, outputs
from ..utils.options import option
from .build import best_table
from .figures import plot_entropy_by_position, plot_metric_vs_multiplier, plot_tuning_entropy
from .html import markdown_to_html


@dataclass(frozen=True, kw_only=True)
class DemoConfig(EvalOptions):
    """``attntemp demo`` and :func:`run_demo` (per-model defaults in :data:`MODEL_DEFAULTS`)."""

    out: str = option("attntemp-demo", "output folder (report.md, report.html, PNGs, the baked model)")
    scales: tuple[float, ...] = option((4.0, 8.0), "lengths as multiples of the trained length", parse=options.floats)
    multipliers: tuple[float, ...] = option(
        (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6),
        "m = 1/T to sweep: LO:HI:STEP or a comma list",
        parse=options.multipliers,
    )

    gradient_steps: int = option(60, "per-head gradient tuning steps in step 3 (0 skips it)")
    monitor_trials: int = option(8, "passkey prompts per setting watched by the generation monitor (0 skips it)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gradient_steps < 0:
            raise ValueError(f"gradient_steps={self.gradient_steps} is not allowed; expected an integer >= 0")
        if self.monitor_trials < 0:
            raise ValueError(f"monitor_trials={self.monitor_trials} is not allowed; expected an integer >= 0")
        for i, s in enumerate(self.scales):
            checks.at_least(f"scales[{i}]", s, 1.0)
        if not self.scales:
            raise ValueError("scales is empty; give at least one multiple of the trained length, e.g. 4")
        outputs.check_out(self.out, overwrite=True)  # a writable folder: checked before the model loads
        check_resumable(self.out, self)  # step 2 sweeps into --out: its settings must match a sweep.db there

    def eval_options(self) -> dict[str, Any]:
        """The shared evaluation options, to hand to the sweep and tune configs of its steps."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(EvalOptions)}


# Per-model defaults the CLI starts from: SmolLM2 (trained to 8192) at 12k and 16k tokens, one
# forward of which takes one to two minutes on a 2-core CPU, so fewer documents, trials and m.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "scales": (1.5, 2.0),
        "n_docs": 1,
        "trials": 3,
        "multipliers": (0.9, 1.0, 1.15, 1.3),
        "gradient_steps": 0,
        "monitor_trials": 0,  # 12 reference prompts at 8k and each setting at 12k: 30-50 min more
    },
}


def demo_config(model: str = "tiny", **overrides: Any) -> DemoConfig:
    """The demo's config for ``model``: its defaults (:data:`MODEL_DEFAULTS`), then ``overrides``
    (None values ignored)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return DemoConfig(model=model, **{**MODEL_DEFAULTS.get(model, {}), **given})


def _mean_ci(values: list[float]) -> str:
    """The mean over documents with its 95% bootstrap interval ("(no interval)" for one document)."""
    if len(values) < 2:
        return f"{values[0]:.3f} (no interval)"
    return mean_interval(values).format(4)


def step_entropy(model, tok, cfg: DemoConfig, ctx: EvalContext, out: Path) -> tuple[list[str], dict]:
    trained = ctx.trained_length
    longest = int(trained * max(cfg.scales))
    ids = heldout_windows(tok, longest, n=cfg.n_docs, docs=ctx.docs, n_name="n_docs")  # [n, L0 x max --scales]
    runs, rows = {}, []
    per_doc: dict[tuple[int, str], list[AttentionStats]] = {}  # what the figure's bands are made of
    for s in (1, *cfg.scales):
        n = int(trained * s)
        for rope in ("none", "yarn") if s > 1 else ("none",):
            spec = TemperatureSpec(rope=rope_for(rope, n, trained))
            docs = [measure(model, ids[i : i + 1, :n], spec, n_buckets=12, progress=False) for i in range(len(ids))]
            runs[f"L={n}, rope {rope}"] = AttentionStats.average(docs)
            per_doc[(n, rope)] = docs
            tail = [float(d.by_head("entropy", start=n * 3 // 4).mean()) for d in docs]  # per document
            recent = [float(d.by_head("recent_mass").mean()) for d in docs]
            rows.append(f"| {n} | {rope} | {_mean_ci(tail)} | {_mean_ci(recent)} |")
    png = plot_entropy_by_position(per_doc, trained, out / "entropy_by_position.png")
    md = [
        "## 1. Attention entropy past the trained length",
        "",
        "Means over documents with 95% bootstrap intervals over documents.",
        "",
        "| length | rope | entropy of the last quarter of queries (nats) | mass on the last 64 keys |",
        "|---|---|---|---|",
        *rows,
        "",
        f"![entropy]({png.name})",
        "",
    ]
    return md, {k: float(np.mean(v.by_head("entropy"))) for k, v in runs.items()}


def step_sweep(model, tok, cfg: DemoConfig, trained: int, out: Path) -> tuple[list[str], list]:
    lengths = tuple(int(trained * s) for s in cfg.scales)
    sweep = SweepConfig(
        **cfg.eval_options(),
        out=str(out),
        lengths=lengths,
        rope=("none", "yarn"),
        multipliers=cfg.multipliers,
        tasks=("perplexity",),
        trained_length=trained,
    )
    store = run_sweep(sweep, model, tok)
    rows = store.rows()
    store.close()
    png = plot_metric_vs_multiplier(rows, "perplexity", "tail_ppl", trained, out / "ppl_vs_multiplier.png")
    assert png is not None  # the sweep above gave perplexity rows
    md = [
        "## 2. Tail perplexity versus the multiplier m = 1/T",
        "",
        "Held-out documents; the tail is every prediction past the trained length. "
        "YaRN's own factor is set to 1, so its default temperature sits at m = (0.1 ln s + 1)^2 "
        "(dashed); the sqrt variant is dotted.",
        "",
        best_table(rows, trained),
        "",
        f"![ppl]({png.name})",
        "",
    ]
    return md, rows


def _tuners(cfg: DemoConfig) -> dict[str, dict[str, Any]]:
    """The tunings of step 3: label-free entropy matching, and per-head gradient (unless skipped)."""
    out: dict[str, dict[str, Any]] = {
        "entropy matching, per head (label-free)": {"granularity": "head", "objective": "entropy"}
    }
    if cfg.gradient_steps:
        out["gradient, per head"] = {"granularity": "head", "method": "gradient", "steps": cfg.gradient_steps}
    return out


def _winner(tuned: dict[str, tuple[TemperatureSpec, dict]]) -> str | None:
    """The tuning whose spec beats m = 1 on tail perplexity by the most, "better" by its paired
    interval on documents no tuner saw; None when none does."""
    best, ratio = None, 1.0
    for label, (_, ev) in tuned.items():
        c = next(c for c in ev["comparisons"] if c["against"] == BASELINE and c["metric"] == "tail_ppl")
        if c["verdict"] == "better" and c["interval"]["value"] < ratio:
            best, ratio = label, c["interval"]["value"]
    return best


def _passkey_rows(length: int, res: dict[str, dict], names: dict[str, str]) -> list[str]:
    passkey, ppl = get_task("passkey"), get_task("perplexity")
    base = res[BASELINE]["perplexity"]
    rows = []
    for key, r in res.items():
        vs = "-" if key == BASELINE else ppl.compare(r["perplexity"], base, "tail_ppl")
        rows.append(
            f"| {length} | {names.get(key, key)} | {passkey.describe(r['passkey'], 'acc', 2)} | "
            f"{passkey.describe(r['passkey'], 'logp', 3)} | {ppl.describe(r['perplexity'], 'tail_ppl')} | {vs} |"
        )
    return rows


def _passkey_table(
    model, tok, cfg: DemoConfig, ctx: EvalContext, n: int, tuned: dict[str, tuple[TemperatureSpec, dict]]
) -> list[str]:
    """Rows at every length: at the tuning length ``n`` the tunes' own evidence (the same documents
    and trials), elsewhere m = 1 and YaRN's own m with that length's YaRN scale."""
    trained = ctx.trained_length
    lines = [
        "| length | spec | passkey acc | key log-prob | tail ppl | tail ppl / m = 1 (paired) |",
        "|---|---|---|---|---|---|",
    ]
    for s in (1, *cfg.scales):
        length = int(trained * s)
        if length == n:
            first = next(iter(tuned.values()))[1]["results"]
            res = {BASELINE: first[BASELINE], YARN: first[YARN]}
            res |= {label: ev["results"][TUNED] for label, (_, ev) in tuned.items()}
        else:
            specs = candidates(rope_for("yarn", length, trained), None)
            res = evaluate_specs(model, tok, length, specs, ("passkey", "perplexity"), ctx, cfg.progress)
        lines += _passkey_rows(length, res, {BASELINE: "m = 1", YARN: "YaRN's own m"})
    return lines


def step_tune_and_passkey(model, tok, cfg: DemoConfig, ctx: EvalContext, out: Path) -> tuple[list[str], Any]:
    trained = ctx.trained_length
    n = int(trained * cfg.scales[0])
    tuned: dict[str, tuple[TemperatureSpec, dict]] = {}
    for i, (label, kw) in enumerate(_tuners(cfg).items()):
        tcfg = TuneConfig(
            **cfg.eval_options(),
            out=str(out / f"tune{i}"),
            length=n,
            rope="yarn",
            tasks=("perplexity", "passkey"),
            check_lengths=(),
            overwrite=True,  # the demo rewrites its own folders (checked once, before the model loads)
            **kw,
        )  # other lengths: below
        ev = run_tune(tcfg, model, tok)
        tuned[label] = (TemperatureSpec.from_dict(ev["spec"]), ev)
    png = plot_tuning_entropy(
        out / "tune0",
        out / "entropy_shift.png",
        f"per-head entropy at L={n} (YaRN) vs L={trained}",
    )
    lines = _passkey_table(model, tok, cfg, ctx, n, tuned)
    win = _winner(tuned)
    spec = tuned[win][0] if win else candidates(rope_for("yarn", n, trained), None)[YARN]
    heads = np.asarray(tuned[next(iter(tuned))][0].heads)
    verdict = (
        f"**{win}** beats m = 1 on held-out tail perplexity (paired interval below 1): it is baked in step 4."
        if win
        else "**No tuning beats m = 1** on held-out tail perplexity by its paired interval: step 4 "
        "bakes YaRN's own temperature instead."
    )
    md = [
        "## 3. Tuning at 4x with YaRN, checked on documents no tuner saw",
        "",
        f"Each head's tail entropy at L={n} with YaRN was matched to its entropy at the trained length "
        f"(label-free; multipliers mean {heads.mean():.3f}, range {heads.min():.3f} to {heads.max():.3f})"
        + (
            f"; per-head multipliers were also trained by gradient ({cfg.gradient_steps} steps, every weight frozen)"
            if cfg.gradient_steps
            else ""
        )
        + f". {verdict} The rows at other lengths are m = 1 and "
        "YaRN's own temperature with that length's YaRN scale. Intervals: 95%, bootstrap over documents "
        "(Wilson for passkey accuracy).",
        "",
        *lines,
        "",
        f"![shift]({png.name})",
        "",
    ]
    return md, spec


def step_bake(cfg: DemoConfig, spec: TemperatureSpec, out: Path) -> list[str]:
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))  # a fresh fp32 copy: bake checks in fp32
    res = save_baked(model, tok, spec, out / "baked", overwrite=True)
    return [
        "## 4. Baked into q_proj",
        "",
        f"The spec chosen in step 3 was folded into `q_proj` and the YaRN rope written into the config: "
        f"`{res.path}` is a plain transformers checkpoint. Reloaded without attntemp, its logits differ "
        f"from the patched model's by at most {res.max_abs_diff:.2e} (fp32, {res.tokens} tokens).",
        "",
    ]


def run_demo(cfg: DemoConfig) -> Path:
    """Run every step; return the report's path."""
    t0 = time.perf_counter()
    model, tok = load_model(cfg.model, **cfg.load_args())  # before --out is made: a bad model leaves none
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    trained = introspect.trained_length(model)
    ctx = eval_context(cfg, trained, tuning=True)
    lengths = ", ".join(str(int(trained * s)) for s in cfg.scales)
    md = [
        f"# attntemp demo: {cfg.model}",
        "",
        f"Trained length L0 = {trained}; lengths {trained}, {lengths}; {cfg.n_docs} held-out documents of {cfg.text}.",
        "",
    ]
    with torch.no_grad():
        part, _ = step_entropy(model, tok, cfg, ctx, out)
        md += part
        md += step_sweep(model, tok, cfg, trained, out)[0]
    part, spec = step_tune_and_passkey(model, tok, cfg, ctx, out)
    watch = []
    if cfg.monitor_trials:
        trials = min(cfg.trials, cfg.monitor_trials)
        watch = monitor_section(model, tok, out, cfg.scales[0], trials, cfg.seed, {"step 3's spec": spec})
    md += part + watch + step_bake(cfg, spec, out)
    md += [f"Total time: {time.perf_counter() - t0:.0f} s ({torch.get_num_threads()} CPU threads)."]
    text = "\n".join(md) + "\n"
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(markdown_to_html(text, f"attntemp demo: {cfg.model}"))
    return out / "report.html"
