"""``attntemp demo``: the whole argument on one model, in one report.

1. attention entropy at the trained length L0 and at 4x and 8x (no RoPE change, then YaRN);
2. tail perplexity versus the multiplier m = 1/T with no extension and with YaRN, at 4x and 8x;
3. per-head entropy matching (and gradient) at 4x with YaRN, checked on held-out text;
4. passkey retrieval where it can move, at 2x: m = 1, YaRN and the
   tuned spec, accuracy with Wilson intervals and the answer's log-probability, paired against m = 1;
5. the tuned spec baked into q_proj, reloaded with plain transformers and checked.
Writes ``report.md`` and ``report.html`` (with PNGs) in the output folder.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..analysis.measure import AttentionStats, measure
from ..analysis.monitor_demo import monitor_section
from ..evaluate import limits
from ..evaluate.corpus import heldout_windows
from ..evaluate.store import LOCK_FILE
from ..evaluate.sweep import SweepConfig, check_resumable, run_sweep
from ..evaluate.tasks import EvalContext, EvalOptions, eval_context, get_task
from ..hf import introspect, preflight
from ..hf.loading import load_model, resolve
from ..hf.rope_scaling import rope_for
from ..ops.intervals import mean_interval
from ..ops.spec import TemperatureSpec
from ..ship.bake import save_baked
from ..tune.evidence import BASELINE, TUNED, YARN, candidates, evaluate_specs
from ..tune.resume import OUTPUTS as TUNE_OUTPUTS
from ..tune.runner import TuneConfig, run_tune
from ..utils import checks, options, outputs
from ..utils.options import option
from .build import best_table
from .figures import plot_entropy_by_position, plot_metric_vs_multiplier, plot_tuning_entropy
from .html import markdown_to_html

TUNE_FILES = TUNE_OUTPUTS.files  # tune's own, and the entropy_shift.png `attntemp report` draws there
FIGURES = ("entropy_by_position.png", "ppl_vs_multiplier.png", "entropy_shift.png", "monitor_passkey.png")
OUTPUTS = outputs.Outputs(
    ("report.md", "report.html", *FIGURES), {"baked": outputs.CHECKPOINT, "tune[0-9]": TUNE_FILES}
)  # demo's own, replaced with --overwrite; its sweep.db is resumed (check_resumable)


@dataclass(frozen=True, kw_only=True)
class DemoConfig(EvalOptions):
    """``attntemp demo`` and :func:`run_demo` (per-model defaults in :data:`MODEL_DEFAULTS`)."""

    out: str = option("attntemp-demo", "output folder (report.md, report.html, PNGs, the baked model)")
    overwrite: bool = option(False, "replace demo's own files already in --out (sweep.db is resumed)")
    scales: tuple[float, ...] = option((4.0, 8.0), "lengths as multiples of the trained length", parse=options.floats)
    retrieval_scale: float = option(2.0, "passkey retrieval and the monitor at this multiple of L0")
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
            if checks.positive(f"scales[{i}]", s) <= 1:
                raise ValueError(
                    f"scales[{i}]={s:g} is not allowed; expected a multiple > 1 of the trained length (steps 2 "
                    "and 3 score and tune the predictions past it)"
                )
        if not self.scales:
            raise ValueError("scales is empty; give at least one multiple of the trained length, e.g. 4")
        checks.at_least("retrieval_scale", self.retrieval_scale, 1.0)
        if self.key_evaluator is not None:
            raise ValueError(
                f"key_evaluator={self.key_evaluator!r} is not allowed: the demo runs no key_tokens task; "
                "use it with sweep or tune --tasks/--objective key_tokens"
            )
        outputs.check_out(self.out, OUTPUTS, self.overwrite)  # before the model loads
        check_resumable(self.out, self)  # step 2 sweeps into --out: its settings must match a sweep.db there

    def eval_options(self) -> dict[str, Any]:
        """The shared evaluation options, to hand to the sweep and tune configs of its steps."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(EvalOptions)}


# Per-model defaults the CLI starts from: SmolLM2 (trained to 8192) at 12k and 16k tokens, one
# forward of which takes one to two minutes on a 2-core CPU, so fewer documents, trials and m.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "out": "attntemp-demo-smollm2",
        "scales": (1.5, 2.0),
        "retrieval_scale": 1.5,
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
    own = {"out": default_out(model)}  # each model its own folder: a sweep.db holds one model's points
    return DemoConfig(model=model, **{**own, **MODEL_DEFAULTS.get(model, {}), **given})


def default_out(model: str) -> str:
    """The demo's default folder for ``model``: ``attntemp-demo`` for the tiny model, else
    ``attntemp-demo-<name>`` (a folder's or hub id's last part)."""
    if model == "tiny":
        return "attntemp-demo"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(model.rstrip("/")).name)
    return f"attntemp-demo-{name.strip('.') or 'model'}"


def _stage(cfg: DemoConfig, text: str) -> None:
    """One line on stderr as a stage starts (with progress on), so long work is never silent."""
    if cfg.progress:
        print(f"demo: {text}", file=sys.stderr, flush=True)


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
    settings = [
        (int(trained * s), rope) for s in (1, *cfg.scales) for rope in (("none", "yarn") if s > 1 else ("none",))
    ]
    with tqdm(total=len(settings) * len(ids), desc="entropy", disable=not cfg.progress, leave=False) as bar:
        for n, rope in settings:
            spec = TemperatureSpec(rope=rope_for(rope, n, trained))
            docs = []
            for i in range(len(ids)):
                bar.set_postfix(L=n, rope=rope)
                docs.append(measure(model, ids[i : i + 1, :n], spec, n_buckets=12, progress=False))
                bar.update(1)
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


def _tune_rows(length: int, tuned: dict[str, tuple[TemperatureSpec, dict]]) -> list[str]:
    """Tail perplexity at the tuning length: m = 1, YaRN's own m and each tune, from the tunes'
    own evidence (the same documents), with the paired ratio to m = 1."""
    ppl = get_task("perplexity")
    first = next(iter(tuned.values()))[1]["results"]
    res = {"m = 1": first[BASELINE], "YaRN's own m": first[YARN]}
    res |= {label: ev["results"][TUNED] for label, (_, ev) in tuned.items()}
    base = first[BASELINE]["perplexity"]
    lines = ["| length | spec | tail ppl | tail ppl / m = 1 (paired) |", "|---|---|---|---|"]
    for name, r in res.items():
        vs = "-" if name == "m = 1" else ppl.compare(r["perplexity"], base, "tail_ppl")
        lines.append(f"| {length} | {name} | {ppl.describe(r['perplexity'], 'tail_ppl')} | {vs} |")
    return lines


def step_tune(model, tok, cfg: DemoConfig, ctx: EvalContext, out: Path) -> tuple[list[str], Any]:
    trained = ctx.trained_length
    n = int(trained * cfg.scales[0])
    tuned: dict[str, tuple[TemperatureSpec, dict]] = {}
    for i, (label, kw) in enumerate(_tuners(cfg).items()):
        _stage(cfg, f"3/5 tuning at L={n} with YaRN: {label}")
        tcfg = TuneConfig(
            **cfg.eval_options(),
            out=str(out / f"tune{i}"),
            length=n,
            rope="yarn",
            tasks=("perplexity",),  # retrieval is step 4's, at a length where it can move
            check_lengths=(),
            overwrite=True,  # the demo rewrites its own folders (checked once, before the model loads)
            **kw,
        )
        ev = run_tune(tcfg, model, tok)
        tuned[label] = (TemperatureSpec.from_dict(ev["spec"]), ev)
    png = plot_tuning_entropy(
        out / "tune0",
        out / "entropy_shift.png",
        f"per-head entropy at L={n} (YaRN) vs L={trained}",
    )
    win = _winner(tuned)
    spec = tuned[win][0] if win else candidates(rope_for("yarn", n, trained), None)[YARN]
    heads = np.asarray(tuned[next(iter(tuned))][0].heads)
    verdict = (
        f"**{win}** beats m = 1 on held-out tail perplexity (paired interval below 1): it is the spec of steps 4 and 5."
        if win
        else "**No tuning beats m = 1** on held-out tail perplexity by its paired interval: steps 4 and 5 "
        "take YaRN's own temperature instead."
    )
    md = [
        f"## 3. Tuning at {cfg.scales[0]:g}x with YaRN, checked on documents no tuner saw",
        "",
        f"Each head's tail entropy at L={n} with YaRN was matched to its entropy at the trained length "
        f"(label-free; multipliers mean {heads.mean():.3f}, range {heads.min():.3f} to {heads.max():.3f})"
        + (
            f"; per-head multipliers were also trained by gradient ({cfg.gradient_steps} steps, every weight frozen)"
            if cfg.gradient_steps
            else ""
        )
        + f". {verdict} Intervals: 95%, bootstrap over documents; the ratio is paired (same documents).",
        "",
        *_tune_rows(n, tuned),
        "",
        f"![shift]({png.name})",
        "",
    ]
    return md, spec


def retrieval_tasks() -> tuple[str, ...]:
    """The retrieval tasks of step 4: passkey. The many-needle task (``needles``, 8 facts a
    forward) needs about 1168 tokens, more than the tiny model's 2x (512), so it is left out."""
    return ("passkey",)


def _retrieval_rows(length: int, res: dict[str, dict], tasks: tuple[str, ...]) -> list[str]:
    head = "| length | spec | " + " | ".join(f"{t} accuracy | {t} answer log-prob | {t} log-prob - m = 1 (paired)"
                                              for t in tasks) + " |"  # fmt: skip
    lines = [head, "|---|---|" + "---|---|---|" * len(tasks)]
    base = next(iter(res.values()))
    for i, (name, r) in enumerate(res.items()):
        cells = []
        for t in tasks:
            task = get_task(t)
            vs = "-" if i == 0 else task.compare(r[t], base[t], "logp")
            cells += [task.describe(r[t], "acc", 2), task.describe(r[t], "logp", 3), vs]
        lines.append(f"| {length} | {name} | " + " | ".join(cells) + " |")
    return lines


def step_retrieval(model, tok, cfg: DemoConfig, ctx: EvalContext, spec: TemperatureSpec) -> list[str]:
    """Retrieval at ``retrieval_scale`` x L0 (2x for the tiny model: at 4x every setting fails)."""
    trained = ctx.trained_length
    n = int(trained * cfg.retrieval_scale)
    tasks = retrieval_tasks()
    _stage(cfg, f"4/5 retrieval at L={n}: {', '.join(tasks)}")
    yarn = candidates(rope_for("yarn", n, trained), None).get(YARN, TemperatureSpec(rope=rope_for("yarn", n, trained)))
    specs = {
        "m = 1 (no RoPE change)": TemperatureSpec(),
        f"YaRN (s = {cfg.retrieval_scale:g}), its own m": yarn,
        "step 3's spec (its own RoPE)": spec,
    }
    res = evaluate_specs(model, tok, n, specs, tasks, ctx, cfg.progress)
    return [
        f"## 4. Retrieval at {cfg.retrieval_scale:g}x = {n} tokens",
        "",
        f"Where retrieval can move (on the tiny model every setting fails at 4x). {cfg.trials} passkey trials "
        "(the YaRN paper's prompt, greedy; accuracy with its Wilson 95% interval, and the mean log-probability "
        "of the key's tokens with a bootstrap 95% interval over trials)"
        + (
            " and the many-needle task (keyed facts in held-out text, scored per document)"
            if "needles" in tasks
            else ""
        )
        + "; the last column of each task is the paired difference in answer log-probability from m = 1 "
        "(same prompts). A verdict holds for this text and this length only.",
        "",
        *_retrieval_rows(n, res, tasks),
        "",
    ]


def step_bake(cfg: DemoConfig, spec: TemperatureSpec, out: Path) -> list[str]:
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))  # a fresh fp32 copy: bake checks in fp32
    res = save_baked(model, tok, spec, out / "baked", overwrite=True)
    return [
        "## 5. Baked into q_proj",
        "",
        f"The spec chosen in step 3 was folded into `q_proj` and the YaRN rope written into the config: "
        f"`{res.path}` is a plain transformers checkpoint. Reloaded without attntemp, its logits differ "
        f"from the patched model's by at most {res.max_abs_diff:.2e} (fp32, {res.tokens} tokens).",
        "",
    ]


def preflight_demo(cfg: DemoConfig) -> None:
    """Before the model loads: each length (``scales`` and ``retrieval_scale`` times L0) past L0 by
    a perplexity window, and its forwards (and passkey prompts) within the memory available."""
    config = preflight.source_config(cfg.model)
    trained = preflight.trained_length(config or {})
    if not trained:
        return
    text = config and preflight.text_part(config)
    rows = limits.forward_rows(cfg.batch_size, cfg.n_docs, cfg.trials, len(cfg.multipliers))
    for i, s in enumerate(cfg.scales):
        n = int(trained * s)
        if n - trained < limits.PERPLEXITY_MIN:
            raise ValueError(
                f"scales[{i}]={s:g} is not allowed: {n} tokens are fewer than {limits.PERPLEXITY_MIN} past the "
                f"trained length {trained}, too few to score the tail"
            )
        preflight.check_forward(f"scales[{i}]", s, text, rows, n)
    n = int(trained * cfg.retrieval_scale)
    preflight.check_forward(
        "retrieval_scale", cfg.retrieval_scale, text, limits.forward_rows(cfg.batch_size, 1, cfg.trials, 3), n
    )
    preflight.check_prompts("retrieval_scale", cfg.retrieval_scale, cfg.trials, n)


def run_demo(cfg: DemoConfig) -> Path:
    """Run every step; return the report's path. A run that fails leaves no empty ``out``."""
    t0 = time.perf_counter()
    resolve(cfg.model)  # a bad --model is one line, before any progress is printed
    preflight_demo(cfg)
    _stage(cfg, f"loading {cfg.model}")
    model, tok = load_model(cfg.model, **cfg.load_args())  # before --out is made: a bad model leaves none
    with outputs.output_folder(cfg.out, replace=OUTPUTS if cfg.overwrite else ()) as out:
        text = _run(cfg, model, tok, out, t0)
        (out / "report.md").write_text(text)
        (out / "report.html").write_text(markdown_to_html(text, f"attntemp demo: {cfg.model}"))
    return out / "report.html"


def _run(cfg: DemoConfig, model, tok, out: Path, t0: float) -> str:
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
        _stage(cfg, f"1/5 attention entropy at L0 and {lengths} tokens")
        md += step_entropy(model, tok, cfg, ctx, out)[0]
        _stage(cfg, f"2/5 tail perplexity over {len(cfg.multipliers)} multipliers at {lengths} tokens")
        md += step_sweep(model, tok, cfg, trained, out)[0]
        (out / LOCK_FILE).unlink(missing_ok=True)  # the sweep is over: no lock left in the report's folder
    part, spec = step_tune(model, tok, cfg, ctx, out)
    md += part + step_retrieval(model, tok, cfg, ctx, spec)
    if cfg.monitor_trials:
        _stage(cfg, f"4/5 watching {cfg.monitor_trials} passkey trials per setting with the monitor")
        trials = min(cfg.trials, cfg.monitor_trials)
        md += monitor_section(model, tok, out, cfg.retrieval_scale, trials, cfg.seed, {"step 3's spec": spec})
    _stage(cfg, "5/5 baking the spec into q_proj and reloading it")
    md += step_bake(cfg, spec, out)
    md += [f"Total time: {time.perf_counter() - t0:.0f} s ({torch.get_num_threads()} CPU threads)."]
    return "\n".join(md) + "\n"
