"""The evidence of a tuned spec: it and its baselines scored on the evaluation pool (documents no
tuner saw), at the tuning length and at held-out lengths, every figure with its 95% interval and
the tuned spec against each baseline as a paired comparison (ratio or difference) with a verdict
in words: "better", "worse" or "not distinguishable".

Baselines: m = 1 with the same RoPE, and YaRN's own m = (0.1 ln s + 1)^2 when the RoPE is YaRN.
Every spec is scored on two texts when the tune has a second one (``heldout``: a text no tuner saw
any of, e.g. Python code outside the stdlib for the tiny model), and :func:`verdict_line` says on
which text and at which lengths the gain holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..evaluate.score import Kept, score
from ..evaluate.tasks import EvalContext, get_task
from ..ops.intervals import Interval
from ..ops.rope.params import Rope
from ..ops.schedules import yarn_multiplier
from ..ops.spec import TemperatureSpec
from ..utils.tables import markdown_table

M_ONE = "m=1"
YARN = "yarn (0.1 ln s + 1)^2"
TUNED = "tuned"


def evidence_specs(rope: dict[str, Any] | None, tuned: TemperatureSpec | None) -> dict[str, TemperatureSpec]:
    """The specs compared: m = 1 and YaRN's own temperature with ``rope``, and the tuned spec."""
    out = {M_ONE: TemperatureSpec(rope=rope)}
    typed = Rope(rope)
    if typed.kind == "yarn" and typed.factor > 1:
        out[YARN] = TemperatureSpec(multiplier=yarn_multiplier(typed.factor), rope=rope)
    if tuned is not None:
        out[TUNED] = tuned
    return out


def evaluate_specs(
    model: Any,
    tok: Any,
    length: int,
    specs: dict[str, TemperatureSpec],
    tasks: Any,
    ctx: EvalContext,
    progress: bool = False,
    kept: Kept | None = None,
) -> dict[str, dict[str, Any]]:
    """``{spec name: {task: metrics}}`` on the evaluation documents (per-window values kept), each
    scored by :func:`attntemp.evaluate.score.score` (read from ``kept``'s store when it holds it)."""
    store, model_id = (kept.store, kept.model_id) if kept else (None, "")
    result: dict[str, dict[str, Any]] = {}
    with tqdm(total=len(specs) * len(tasks), desc=f"evaluate L={length}", disable=not progress, leave=False) as bar:
        for name, spec in specs.items():
            result[name] = {}
            for t in tasks:
                bar.set_postfix(spec=name, task=t)
                result[name][t] = score(model, tok, spec, t, length, ctx, store, model_id).metrics
                bar.update(1)
    return result


SHORTEST_CHECK = 32  # tokens: a held-out window shorter than this has too few predictions to score


def pick_check_lengths(given: tuple[int, ...] | None, tuned: tuple[int, ...], trained: int) -> tuple[int, ...]:
    """The held-out lengths: ``given`` (each refused below :data:`SHORTEST_CHECK` tokens), else the
    trained length, half the shortest and twice the longest tuning length (those under
    :data:`SHORTEST_CHECK` left out); tuning lengths left out either way (the evidence scores them)."""
    for i, n in enumerate(given or ()):
        if n < SHORTEST_CHECK:
            raise ValueError(
                f"check_lengths[{i}]={n} is not allowed: a held-out length needs at least {SHORTEST_CHECK} tokens"
            )
    pick = given if given is not None else (trained, min(tuned) // 2, 2 * max(tuned))
    return tuple(sorted({n for n in pick if n not in tuned and n >= SHORTEST_CHECK}))


def _spec_table(results: dict[str, dict[str, Any]], tasks: list[str]) -> list[str]:
    cols = [(t, m.name) for t in tasks for m in get_task(t).metrics]
    rows = [[name, *(get_task(t).describe(res[t], m) for t, m in cols)] for name, res in results.items()]
    lines = [markdown_table(["spec", *(f"{t} {m}" for t, m in cols)], rows)]
    rules = sorted({(t, res[t]["rule"]) for res in results.values() for t in tasks if "rule" in res[t]})
    return lines + ([""] if rules else []) + [f"- {t} key tokens: {rule}" for t, rule in rules]


def comparisons(results: dict[str, dict[str, Any]], tasks: list[str]) -> list[dict[str, Any]]:
    """The tuned spec against each baseline, per task metric: the paired interval and the verdict."""
    out = []
    for base in (b for b in (M_ONE, YARN) if b in results and TUNED in results):
        for t in tasks:
            task = get_task(t)
            for m in task.metrics:
                ci = task.paired(results[TUNED][t], results[base][t], m.name)
                verdict = None if ci is None else task.verdict(ci, m.name)
                out.append(
                    {
                        "against": base,
                        "task": t,
                        "metric": m.name,
                        "comparison": m.comparison,
                        "interval": None if ci is None else ci.to_dict(),
                        "verdict": verdict,
                    }
                )
    return out


def _fixed(ci: dict[str, Any]) -> str:
    return Interval(ci["value"], ci["low"], ci["high"]).fixed()


def _comparison_lines(comps: list[dict[str, Any]]) -> list[str]:
    rows = []
    for c in comps:
        ci = c["interval"]
        shown = "no interval (fewer than 2 windows or trials)" if ci is None else f"{c['comparison']} {_fixed(ci)}"
        rows.append((c["against"], f"{c['task']} {c['metric']}", shown, c["verdict"] or "-"))
    head = ("tuned against", "task metric", "ratio or difference, 95% paired interval", "verdict")
    return [markdown_table(head, rows)]


def texts(ev: dict[str, Any]) -> list[tuple[str, list[str], dict[str, Any]]]:
    """``(label, tasks, scored)`` per text the evidence was scored on: the evaluation pool of
    ``--text``, then the second text (``heldout``) when there is one. ``scored`` holds
    ``results`` and ``comparisons`` at the tuning length and ``checks`` per held-out length."""
    cfg = ev["config"]
    out = [(f"{cfg['text']} (evaluation pool)", list(cfg["tasks"]), ev)]
    if ev.get("heldout"):
        out.append((ev["heldout"]["text"], list(ev["heldout"]["tasks"]), ev["heldout"]))
    return out


def _per_length(ev: dict[str, Any], scored: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(length, comparisons)``: the tuning length first, then each held-out length."""
    return [(int(ev["config"]["length"]), scored["comparisons"])] + [
        (int(n), c["comparisons"]) for n, c in scored["checks"].items()
    ]


def _headline(comps: list[dict[str, Any]], task: str) -> dict[str, Any] | None:
    metric = get_task(task).headline.name
    return next((c for c in comps if c["against"] == M_ONE and c["task"] == task and c["metric"] == metric), None)


def _lengths_words(lengths: list[int]) -> str:
    text = ", ".join(str(n) for n in lengths[:-1])
    return f"{text} and {lengths[-1]}" if text else str(lengths[-1])


def verdict_line(ev: dict[str, Any]) -> str:
    """On which text and at which lengths the tuned spec's headline gain over m = 1 holds, per
    task, e.g. "on stdlib (evaluation pool), perplexity tail_ppl: better at 1024 and 2048, worse at
    256; on package:markdown, ...": the verdicts of the paired intervals, lengths grouped by verdict."""
    parts = []
    for label, scored, task in ((a, c, t) for a, b, c in texts(ev) for t in b):
        groups: dict[str, list[int]] = {}
        for length, comps in _per_length(ev, scored):
            c = _headline(comps, task)
            if c and c["interval"]:
                groups.setdefault(c["verdict"], []).append(length)
        said = [f"{v} at {_lengths_words(sorted(ns))}" for v, ns in groups.items()]
        if said:
            metric = get_task(task).headline.name
            parts.append(f"on {label}, {task} {metric}: " + ", ".join(said))
    return "tuned against m = 1: " + ("; ".join(parts) if parts else "no paired interval") + "."


def _headline_summary(ev: dict[str, Any]) -> list[str]:
    """The verdict line, then one line per text and length with the paired interval."""
    lines = [verdict_line(ev), ""]
    for label, scored, task in ((a, c, t) for a, b, c in texts(ev) for t in b):
        metric = get_task(task).headline.name
        for length, comps in _per_length(ev, scored):
            c = _headline(comps, task)
            if c and c["interval"]:
                lines.append(
                    f"- on {label}, at {length} tokens, {task} {metric} tuned / m = 1: "
                    f"{_fixed(c['interval'])}: {c['verdict']}"
                )
    return lines


def _sections(ev: dict[str, Any], label: str, tasks: list[str], scored: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"## {label}, at the tuning length, {ev['config']['length']} tokens",
        "",
        *_spec_table(scored["results"], tasks),
        "",
        *_comparison_lines(scored["comparisons"]),
    ]
    for n, check in scored["checks"].items():
        lines += [
            "",
            f"## {label}, held-out length {n} tokens (same spec, same RoPE)",
            "",
            *_spec_table(check["results"], tasks),
            "",
            *_comparison_lines(check["comparisons"]),
        ]
    return lines


def evidence_markdown(ev: dict[str, Any]) -> str:
    """The evidence as markdown: the verdict line and a summary in words, then per text a table
    per length and the paired comparisons."""
    cfg = ev["config"]
    tasks = list(cfg["tasks"])
    second = f" and on {ev['heldout']['text']}, whole" if ev.get("heldout") else ""
    lines = [
        f"# tuning evidence: {cfg['model']}, length {cfg['length']}, rope {cfg['rope']}, "
        f"{cfg['granularity']} by {cfg['method']} ({cfg['objective']})",
        "",
        f"Scored on {cfg['n_docs']} evaluation documents of {cfg['text']} no tuner saw{second}"
        + (f" ({cfg['trials']} passkey / needle trials)" if {"passkey", "needle"} & set(tasks) else "")
        + "; each figure with its 95% interval (bootstrap over documents, Wilson for accuracies).",
        "",
        *_headline_summary(ev),
        *(f"- {note}" for note in ev.get("held_out_notes", ())),
    ]
    for label, text_tasks, scored in texts(ev):
        lines += _sections(ev, label, text_tasks, scored)
    spec = TemperatureSpec.from_dict(ev["spec"])
    if spec.heads:
        table = np.asarray(spec.heads)
        lines += ["", f"tuned multipliers: mean {table.mean():.3f}, min {table.min():.3f}, max {table.max():.3f}"]
    elif spec.multiplier != 1.0:
        lines += ["", f"tuned global multiplier m = {spec.multiplier:.4f} (T = {1 / spec.multiplier:.4f})"]
    return "\n".join(lines) + "\n"
