"""``attntemp advise``'s report: the story in words and tables (``report.md``, ``report.html``)
and two figures: the short-context cost against the long-context gain of every candidate
confirmed (``tradeoff.png``: 95% intervals as bars, the recommendation marked) and the per-head
attention shift from the trained length to the serving length (``diagnosis.png``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..analysis.style import DPI, NULL, integer_ticks, plain_ticks, plt
from ..evaluate.task_base import get_task
from ..utils.tables import markdown_table
from .config import SHARED_WORDS
from .confirm import RETRIEVAL_LABELS
from .race import MULTIKEY_TASK, RETRIEVAL_TASK, RETRIEVAL_TASKS
from .race import PLAIN as PLAIN_OBJECTIVE
from .records.answers import RECOMMENDED, TRADE_OFF, Axis, BetterElsewhere, EngineAdvice, Headline, Route
from .records.comparisons import Confirmation, Paired, RetrievalRow
from .records.evidence import Evidence, Question


def engines_served(ev: Evidence) -> list[str]:
    """The engines advise recommended for (older evidence: its one engine)."""
    return list(ev.question.engines or [ev.question.engine])


def race_table(ev: Evidence) -> list[str]:
    engines = engines_served(ev)
    rows = [
        (
            c.name,
            "no" if c.gated else "yes",
            _found(c.retrieval),
            "yes" if c.kept else "no",
            c.reason or "-",
            *(_route(c.engines[e], ev) for e in engines),
        )
        for c in ev.candidates
    ]
    head = (
        "candidate",
        "changes below L0",
        f"{retrieval_words(ev.question)[0]} (race)",
        "stayed",
        "why it left",
        *engines,
    )
    return [markdown_table(head, rows)]


def retrieval_words(q: Question) -> tuple[str, str]:
    """The retrieval axis's name ("keys found" or "passkeys found") and its race trials in words
    ("6 haystacks of 8 keys" or "48 prompts")."""
    multikey = q.retrieval is not None and q.retrieval.task == MULTIKEY_TASK
    label = RETRIEVAL_LABELS[MULTIKEY_TASK if multikey else RETRIEVAL_TASK]
    n = q.retrieval_prompts.race if q.retrieval_prompts else 0
    keys = q.retrieval.keys if q.retrieval is not None else 1
    return label, (f"{n // keys} haystacks of {keys} keys" if multikey else f"{n} prompts")


def _route(how: Route, ev: Evidence) -> str:
    """An engine's route for a candidate as a cell: ``nearest`` names the raced candidate it reads as."""
    if how.how != "nearest":
        return how.how
    names = {c.key: c.name for c in ev.candidates}
    return f"nearest: {names[how.reads_as]}" if how.reads_as in names else "nearest (not raced)"


def _found(r: RetrievalRow | None) -> str:
    return "-" if not r else f"{r.found} of {r.prompts}"


def interval_cell(c: Paired | None) -> str:
    """A paired comparison as a table cell: value [low, high] verdict; "-" when there is none."""
    return "-" if c is None else f"{c.fixed()} {c.verdict}"


def confirm_table(conf: Confirmation) -> list[str]:
    """The confirmation as a table: a row per spec, a column per check, each cell the spec against
    no change (its own value for no change; a failed check's error)."""
    checks = list(conf.rows)
    names = next((list(r.cells) for r in conf.rows.values() if r.error is None), [])
    if not checks or not names:  # every check failed (or, for --status, none is stored yet): say each
        return ["(nothing confirmed)", ""] + [f"- {c}: {r.error}" for c, r in conf.rows.items()]
    rows = []
    for n in names:
        cells = []
        for c in checks:
            cell = conf.rows[c].cells.get(n)
            if cell is None:
                cells.append((conf.rows[c].error or "-")[:60])
                continue
            vs = cell.vs_no_change
            cells.append(cell.value if vs is None else interval_cell(vs))
        rows.append((n, *cells))
    return [markdown_table(("spec", *checks), rows)]


def temperature_lines(ev: Evidence) -> list[str]:
    """YaRN with a temperature against YaRN at m = 1, per check: what the temperature adds."""
    conf = {k: r for k, r in ev.confirmation.rows.items() if r.error is None}
    rows = sorted({n for r in conf.values() for n, c in r.cells.items() if c.vs_reference is not None})
    if not rows:
        return []
    checks = list(conf)
    table = []
    for n in rows:
        cells = []
        for c in checks:
            ref = conf[c].cells[n].vs_reference if n in conf[c].cells else None
            cells.append(interval_cell(ref.paired if ref else None))
        table.append((n, *cells))
    return [
        "## What a temperature adds on YaRN",
        "",
        markdown_table(("spec, against YaRN at m = 1", *checks), table),
        "",
    ]


def _vs(c: Paired | None, signed: bool = False) -> str:
    """A paired comparison in words: ``+0.42 [+0.27, +0.56], better``."""
    if c is None:
        return "not measured"
    return f"{c.signed() if signed else c.fixed()}, {c.verdict}"


def _signed(axis: Axis | BetterElsewhere) -> bool:
    """Whether ``axis``'s comparisons are differences (shown signed) rather than ratios."""
    return get_task(axis.task).metric(axis.metric).comparison == "difference"


def headline_lines(ev: Evidence) -> list[str]:
    """What to run, first: the pick, its gain at N, its passkeys against no change and YaRN's
    default, its cost below L0 (each with its interval), and every axis where another spec is better."""
    rec = ev.recommendation
    if rec.status == TRADE_OFF:
        return [f"**No setting {ev.question.engine} carries meets both limits**: {rec.why}", "",
                *per_engine_lines(ev)]  # fmt: skip
    if rec.name is None:
        return [
            f"**Undecided**: {rec.why}. Still in the race: {', '.join(rec.still_in or ())}. Give a larger --budget."
        ]
    said = "**Run: " + rec.name + "**" if rec.status == RECOMMENDED else "**Nothing beats the baseline**"
    lines = [f"{said} ({rec.why}). Checked on windows and prompts the race never saw:", ""]
    h = rec.headline or Headline()
    for a in h.axes:
        signed = _signed(a)
        default = a.vs_default
        against = f"; against YaRN's default ({default.against}): {_vs(default.paired, signed)}" if default else ""
        lines.append(f"- {a.label}: {a.value}; against no change: {_vs(a.vs_no_change, signed)}{against}")
    if h.cost:
        lines.append(
            f"- cost below the trained length (worst, at {h.cost.length} tokens): {_vs(h.cost.paired)} of no change"
        )
    if h.below_default_on_retrieval:
        lines += [
            "",
            "**It finds fewer keys than YaRN's default** (above): a lower cost or a better score bought it.",
        ]
    return [*lines, *_disagree(ev, h), "", *engine_lines(ev)]


def _disagree(ev: Evidence, h: Headline) -> list[str]:
    """Where the axes disagree: each confirmed spec better than the pick on an axis, and why it was not picked."""
    if not h.better_elsewhere:
        return []
    why_left = {c.name: c.reason for c in ev.candidates}
    lines = ["", "Where the axes disagree: better than the pick on one axis, and why each was not picked:", ""]
    for b in h.better_elsewhere:
        reason = why_left.get(b.name) or "it stayed in the race; the simpler pick came first"
        lines.append(f"- {b.name}, {b.label}: {_vs(b.vs, _signed(b))} against the pick ({reason})")
    return lines


def engine_lines(ev: Evidence) -> list[str]:
    rec, engine = ev.recommendation, ev.question.engine
    how = (rec.engines or {})[engine]
    lines = [f"For {engine}: {how.how}."]
    body = how.settings or how.command
    if body:
        lines += ["", "```", body, "```"]
    if how.spec:  # the equivalent spec the engine carries, to bake in place of the recommendation
        lines += ["", f"carried.json (what {engine} carries of it):", "", "```json", json.dumps(how.spec), "```"]
    if how.why and how.how != "settings":
        lines += ["", f"(why not settings: {how.why})"]
    return lines + _alternative(ev) + per_engine_lines(ev)


def _engine_row(engine: str, rec: EngineAdvice) -> tuple[str, ...]:
    """One engine's row of the per-engine table."""
    h = rec.headline or Headline()
    found = next((a for a in h.axes if a.task in RETRIEVAL_TASKS), None)
    first = h.axes[0] if h.axes else None
    run = rec.name if rec.status == RECOMMENDED else _not_run(rec)
    alt = rec.if_cost_allowed
    return (
        engine,
        run or "undecided",
        rec.engines[engine].how if rec.engines else "-",
        _vs(first.vs_no_change, _signed(first)) if first else "-",
        _vs(found.vs_no_change, True) if found else "-",
        _vs(found.vs_default.paired, True) if found and found.vs_default else "-",
        _vs(h.cost.paired) if h.cost else "-",
        f"{alt.name} (worst cost {_vs(alt.worst_cost)})" if alt else "-",
    )


def per_engine_lines(ev: Evidence) -> list[str]:
    """One recommendation per engine (advise without --engine): what each engine computes as meant,
    picked and confirmed the same way, with its passkeys and cost; and how each other engine reads
    the first engine's pick."""
    recs = ev.by_engine
    if len(recs) < 2:
        return []
    rows = [_engine_row(engine, rec) for engine, rec in recs.items()]
    label = retrieval_words(ev.question)[0]  # keys found, or passkeys found
    head = (
        "engine",
        "run",
        "how",
        "objective at N vs no change",
        f"{label} vs no change",
        f"{label} vs YaRN's default",
        "cost below L0",
        "best on the objective without the cost limit",
    )
    pick = ev.recommendation
    reads = [
        f"- {e}: {pick.name} is {_route(how, ev)}" + (f" ({how.why})" if how.why else "")
        for e, how in (pick.engines or {}).items()
        if e in recs and e != ev.question.engine and how.how not in ("nothing", "settings")
    ]
    said = ["", f"How the other engines read {pick.name}:", "", *reads] if reads and pick.name else []
    trades = [f"- {e}: {r.trade_off.sentence}" for e, r in recs.items() if r.trade_off is not None]
    said = ["", "Trade-offs:", "", *trades, *said] if trades else said
    return [
        "",
        "## Per engine",
        "",
        "Each engine is recommended only candidates it computes as the spec means (its readings by version, "
        "docs/readings.md), picked and confirmed as above:",
        "",
        markdown_table(head, rows),
        *said,
    ]


def _not_run(rec: EngineAdvice) -> str:
    """What an engine's row says when nothing is recommended: the trade-off's sentence, or no change."""
    if rec.status == TRADE_OFF:
        return "trade-off (below)"
    return f"no change ({rec.status})"


def recommendation_lines(ev: Evidence) -> list[str]:
    """The recommendation and its evidence line (``--status`` and the tests read it)."""
    rec = ev.recommendation
    if rec.name is None:
        return headline_lines(ev)
    said = "**Recommended**" if rec.status == RECOMMENDED else "**Nothing beats the baseline**"
    return [f"{said}: {rec.name} ({rec.why}). {rec.evidence}."]


def _alternative(ev: Evidence) -> list[str]:
    alt, q = ev.recommendation.if_cost_allowed, ev.question
    if not alt:
        return []
    cost = "no cost measured" if alt.worst_cost is None else alt.worst_cost.fixed()
    return [
        "",
        f"Best on {PLAIN_OBJECTIVE.get(q.objective, q.objective)} at {q.length} without the short-cost limit: "
        f"{alt.name}, {alt.gain.fixed()} against no change, at a worst cost "
        f"below the trained length of {cost} (all-token perplexity ratio).",
    ]


def advice_markdown(ev: Evidence) -> str:
    """The report: what to run first, then how it was decided, the diagnosis, the race, the
    confirmation and the recommendation with its evidence."""
    q, race = ev.question, ev.race
    label, trials = retrieval_words(q)
    axes = f"{PLAIN_OBJECTIVE.get(q.objective, q.objective)} at {q.length} tokens" + (
        f", {label} by greedy generation at {q.length} ({trials})" if q.retrieval_prompts else ""
    )
    lines = [
        f"# attntemp advise: {q.model} at {q.length} tokens (trained to {q.trained_length})",
        "",
        *headline_lines(ev),
        "",
        "## How this was decided",
        "",
        f"Engines: {', '.join(engines_served(ev))} (the headline is {q.engine}'s). The race judges {axes} on the "
        f"tuning pool of {q.text}, window block by window block{SHARED_WORDS if q.shared_prefill else ''}, and "
        f"all-token perplexity below the trained length (a candidate leaves when it costs more than "
        f"{q.max_short_cost:.0%} there, for certain, or "
        "when another is better on an axis, for certain). Every "
        "figure is paired on the same windows or prompts with its 95% interval.",
        "",
        "## Where the model breaks",
        "",
        ev.diagnosis.summary,
        "",
        "![per-head attention shift](diagnosis.png)",
        "",
        "## The race",
        "",
        f"Status: **{race.status}** after {race.windows} windows, {race.rows} forward rows.",
        "",
        *race_table(ev),
        "",
        "## Confirmed on windows the race never saw",
        "",
        "Each cell: the spec against no change on the same windows or prompts (a ratio for perplexities, a "
        "difference for passkeys found and log-probabilities), 95% paired interval, verdict.",
        "",
        *confirm_table(ev.confirmation),
        "",
        "![short-context cost against long-context gain](tradeoff.png)",
        "",
        *temperature_lines(ev),
        "## Recommendation",
        "",
        *recommendation_lines(ev),
        "",
        f"Forward rows in all: {ev.forwards} (race {race.rows}, tuning {ev.tuning_rows}, "
        f"diagnosis and confirmation the rest); the scores took {ev.scored_seconds:.0f} s to make, "
        f"this run {ev.seconds:.0f} s (the rest read from its store).",
    ]
    return "\n".join(lines) + "\n"


def _gain_and_cost(ev: Evidence) -> list[tuple[str, Paired | None, Paired | None]]:
    """Per confirmed spec: its objective ratio at N and its worst short-length cost against no change."""
    rows = ev.confirmation.rows
    first = next(iter(rows), None)
    if first is None or rows[first].error is not None:
        return []
    shorts = [c for c in rows if c.startswith("cost at") and rows[c].error is None]
    out = []
    for name, cell in rows[first].cells.items():
        costs = [v for c in shorts if (v := rows[c].cells[name].vs_no_change) is not None]
        worst = max(costs, key=lambda v: v.value) if costs else None
        out.append((name, cell.vs_no_change, worst))
    return out


def _bars(c: Paired | None) -> tuple[float, list[list[float]]]:
    """A comparison's point and its error bars (no change's 1 where there is none)."""
    v, lo, hi = (c.value, c.low, c.high) if c else (1.0, 1.0, 1.0)
    return v, [[v - lo], [hi - v]]


def tradeoff_figure(ev: Evidence, path: Path) -> Path:
    """x: cost below L0 (worst short length, ratio to no change); y: the objective at N against
    no change; 95% intervals as bars; no change at (1, 1); the recommendation ringed."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    rec = ev.recommendation.name
    for i, (name, gain, cost) in enumerate(_gain_and_cost(ev)):
        (x, xerr), (y, yerr) = _bars(cost), _bars(gain)
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", color=f"C{i % 10}", capsize=3, label=name)
        if name == rec:
            ax.plot(x, y, "o", ms=16, mfc="none", mec="black", mew=1.5)
            ax.annotate("recommended", (x, y), xytext=(12, 8), textcoords="offset points", fontsize=8)
    q = ev.question
    task = get_task(q.objective)
    if task.metric(task.objective).comparison == "ratio":
        ax.set_yscale("log")
        plain_ticks(ax, "y")
    ax.axhline(task.metric(task.objective).null, **NULL)
    ax.axvline(1.0, **NULL)
    ax.axvline(1.0 + q.max_short_cost, color="0.4", ls=":", lw=1.0, label=f"cost limit ({q.max_short_cost:.0%})")
    ax.set_xlabel(f"cost below the trained length: worst all-token ppl ratio to no change (L0 = {q.trained_length})")
    ax.set_ylabel(f"{PLAIN_OBJECTIVE.get(q.objective, q.objective)} at {q.length}: vs no change")
    ax.set_title(f"{q.model}: long-context gain vs short-context cost (ringed: the recommendation)", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def diagnosis_figure(ev: Evidence, path: Path) -> Path:
    """Per (layer, head): the shift of entropy / ln n and of recent-token mass from L0 to N."""
    heads = ev.diagnosis.heads
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, shift, title in (
        (axes[0], heads.norm_entropy_shift, "entropy / ln n: N minus L0 (up: diffuses)"),
        (axes[1], heads.recent_mass_shift, "recent-token mass: N minus L0 (up: collapses)"),
    ):
        v = np.asarray(shift, dtype=float)
        lim = max(float(np.nanmax(np.abs(v))), 1e-6)
        im = ax.imshow(v, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        integer_ticks(ax)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax)
    q = ev.question
    fig.suptitle(f"{q.model}: attention without a RoPE change, {q.trained_length} -> {q.length} tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
