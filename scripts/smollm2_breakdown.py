"""SmolLM2 where it breaks (16384 and 24576 tokens, trained to 8192): softening and sharpening
without a RoPE change, against no change at m = 1 and beside YaRN, judged by key-token
perplexity (with all-token tail perplexity) and needles, each with its 95% interval and paired.

Specs at each length L (m multiplies the logits, T = 1/m):

- no RoPE change at m = 1; a constant softening m = 0.9, 0.8, 0.7 on every query;
- softening gated past L0 = 8192 (``gated_constant``: m = 1 for a query that sees at most L0 keys,
  m = 0.9, 0.8, 0.7 past it);
- sharpening gated past L0: Qwen's log-n (``logn``: m = log_L0(p)) and the power law
  ``log_length`` with a = 0 (m = 1 up to L0, (n / L0)^b past it: the ``log_length_slope`` form),
  its slope b searched on key-token perplexity at ``--tune-length`` (12288) on ``--tune-docs``
  documents of the tuning pool (none of the table's), between ``--slope-bracket``;
- YaRN at m = 1 and with the global m tuned on key tokens at 12288 (``smollm2_distant.py
  --tune-key-tokens``, m = 1.075);
- per-head multipliers learned on key tokens at 16384 on the tuning pool (``head_learned.py``'s
  ``--learned`` spec), once that run has written it.

    nice -n 10 python scripts/smollm2_breakdown.py --threads 1 > runs/breakdown.log 2>&1 &

The results share ``smollm2_distant.py``'s folder, names and settings (``--out``): a cell either
script made is read back, never recomputed, and each new (length, spec, task) result is one JSON
file with its per-window values. Cells run most informative first (``ORDER``); the table
(``docs/results/smollm2_breakdown_table.md``) and the figure are rewritten after each result.
``--plan`` prints the cells still to run and their forwards, then stops.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from attntemp.evaluate.score import score
from attntemp.evaluate.tasks import get_task, tuning_context
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.search import best_at_edge, grid_then_golden
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.search import SearchOptions
from attntemp.utils.options import floats, from_argv, option, reuse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script whose code this shares
import distant_figure as figure
import smollm2_distant as distant

ROOT = distant.ROOT
WIDEN = SearchOptions.widen  # grid steps past --slope-bracket while the best b is at its edge, as the m search
TABLE_LENGTHS = (16384, 24576)  # the table's lengths, whatever --lengths this run works on


@dataclass(frozen=True, kw_only=True)
class BreakdownConfig(distant.DistantConfig):
    """``smollm2_distant.py``'s options with this script's files and lengths, and the slope search."""

    table: str = reuse(distant.DistantConfig, "table", str(ROOT / "docs/results/smollm2_breakdown_table.md"))
    figure: str = reuse(distant.DistantConfig, "figure", str(ROOT / "docs/img/smollm2_breakdown.png"))
    lengths: tuple[int, ...] = reuse(distant.DistantConfig, "lengths", TABLE_LENGTHS)
    slope_bracket: tuple[float, ...] = option((0.02, 0.4), "the slope b's search range, LO,HI", parse=floats)
    learned: str = option(
        str(ROOT / "docs/results/smollm2_head_learned/learned_spec.json"),
        "head_learned.py's per-head spec: its row runs once the file is there",
    )
    plan: bool = option(False, "print the cells still to run and their forwards, then stop")


SOFT = (0.9, 0.8, 0.7)
# (index in --lengths, kind) in the order they run: the cells that decide the direction at the first
# length (16384) first, then the references at the second (24576); every other cell after them.
ORDER = (
    (0, "gated 0.9"),
    (0, "gated 0.8"),
    (0, "logn"),
    (0, "slope"),
    (0, "constant 0.8"),
    (1, "base"),
    (1, "yarn"),
    (1, "yarn tuned"),
    (0, "gated 0.7"),
    (0, "constant 0.9"),
    (0, "constant 0.7"),
    (1, "gated 0.9"),
    (1, "gated 0.8"),
    (1, "logn"),
    (1, "slope"),
    (1, "constant 0.8"),
)
KINDS = ("base", *(f"{g} {m:g}" for g in ("constant", "gated") for m in SOFT), "logn", "slope", "yarn", "yarn tuned",
         "learned")  # fmt: skip


def cells(lengths: list[int]) -> list[tuple[int, str]]:
    """Every (length, kind), ``ORDER``'s first, the rest by length."""
    first = [(lengths[i], kind) for i, kind in ORDER if i < len(lengths)]
    return first + [(n, kind) for n in lengths for kind in KINDS if (n, kind) not in first]


def slope_spec(trained: int, b: float) -> TemperatureSpec:
    """m = 1 up to the trained length, ``(n / L0)^b`` past it (``log_length`` with a = 0)."""
    return TemperatureSpec(schedule="log_length", schedule_params={"trained_len": trained, "a": 0.0, "b": b})


def specs(
    length: int, trained: int, slope: float | None, tuned_key: tuple[float, int], learned: TemperatureSpec | None = None
) -> dict[str, tuple]:
    """kind -> (table name, spec) at one length; the names of m = 1, m = 0.9 and the YaRN rows are
    ``smollm2_distant``'s, so its results are reused. ``learned``: ``head_learned.py``'s per-head spec."""
    s = length / trained
    yarn = rope_for("yarn", length, trained)
    m_key, at = tuned_key
    out = {"base": (distant.BASE, TemperatureSpec())}
    for m in SOFT:
        out[f"constant {m:g}"] = (f"no RoPE change, m = {m:g} (softer)", TemperatureSpec(multiplier=m))
        gated = TemperatureSpec(schedule="gated_constant", schedule_params={"trained_len": trained, "multiplier": m})
        out[f"gated {m:g}"] = (f"no RoPE change, m = {m:g} past {trained} (softer, gated)", gated)
    logn = TemperatureSpec(schedule="logn", schedule_params={"trained_len": trained})
    out["logn"] = (f"no RoPE change, log-n past {trained} (sharper, gated)", logn)
    if slope is not None:
        name = f"no RoPE change, (n / {trained})^b past it, b = {slope:.3g} (sharper, tuned at {at} on key tokens)"
        out["slope"] = (name, slope_spec(trained, slope))
    out["yarn"] = (f"YaRN s = {s:g}, m = 1", TemperatureSpec(rope=yarn))
    out["yarn tuned"] = (
        f"YaRN s = {s:g}, global m = {m_key:.4g} (tuned at {at} on key tokens)",
        TemperatureSpec(multiplier=m_key, rope=yarn),
    )
    if learned is not None:
        out["learned"] = ("no RoPE change, per head, learned on key tokens (head_learned.py)", learned)
    return out


def tune_slope(model, tok, ctx, trained: int, args, out: Path) -> float:
    """The slope b of ``slope_spec`` with the lowest key-token perplexity at ``--tune-length`` on the
    tuning pool: a log grid over ``--slope-bracket``, then golden-section steps in ln b around its
    best point; every b's value is stored as it comes (the search resumes), the result too."""
    n = args.tune_length
    path = out / f"tuned_slope_key_tokens_{n}_spec.json"
    if path.is_file():
        return float(dict(TemperatureSpec.load(path).schedule_params)["b"])
    tctx = replace(tuning_context(ctx), n_docs=args.tune_docs)
    task, cache = get_task("key_tokens"), distant.StoredCache(out / f"tuned_slope_key_tokens_{n}_search.json")

    def loss(log_b: float) -> float:
        b = round(math.exp(log_b), 6)
        if b not in cache:
            found = score(model, tok, slope_spec(trained, b), task.name, n, tctx)  # the one way to score a spec
            cache[b] = found.metrics[task.objective]
            print(f"slope b = {b:g} at {n}: key ppl {cache[b]:.4g}, {found.seconds:.0f} s", flush=True)
        return cache[b]

    lo, hi = (math.log(x) for x in args.slope_bracket)
    best, _, ys = grid_then_golden(lambda xs: [loss(x) for x in xs], lo, hi, args.grid, args.iters, WIDEN)
    if best_at_edge(ys):
        print(f"slope b = {math.exp(best):g}: at the grid's edge after {WIDEN} steps past --slope-bracket")
    b = math.exp(best)
    slope_spec(trained, round(b, 6)).save(path)
    return round(b, 6)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(BreakdownConfig, argv, __doc__.split("\n\n")[0])
    lengths = list(args.lengths)
    if not (0 < args.slope_bracket[0] < args.slope_bracket[-1]) or len(args.slope_bracket) != 2:
        raise SystemExit(f"--slope-bracket={list(args.slope_bracket)} is not allowed; expected LO,HI with 0 < LO < HI")
    model, tok, trained, ctx, settings, out = distant.setup(args)
    key_spec = TemperatureSpec.load(out / f"tuned_key_tokens_{args.tune_length}_spec.json")
    slope_file = out / f"tuned_slope_key_tokens_{args.tune_length}_spec.json"
    slope = float(dict(TemperatureSpec.load(slope_file).schedule_params)["b"]) if slope_file.is_file() else None
    learned = TemperatureSpec.load(args.learned) if args.learned and Path(args.learned).is_file() else None

    def of(slope: float | None, at: list[int] | None = None) -> dict[int, dict[str, tuple]]:
        return {n: specs(n, trained, slope, (key_spec.multiplier, args.tune_length), learned) for n in at or lengths}

    def publish() -> str:  # the table and the figure from every result on disk, at every length of the table
        every = distant.table_lengths(out, lengths, TABLE_LENGTHS)
        found = distant.stored(out, {n: [name for name, _ in v.values()] for n, v in of(slope, every).items()})
        if args.figure:
            figure.write_figure(found, settings, Path(args.figure), figure.kind_by_name)
        return distant.write_table(found, settings, Path(args.table))

    now, named = of(slope), of(slope or 0.0)  # named: the slope's name with a stand-in b, for --only, so a
    todo = [  # cell --only leaves out never starts the slope search
        (n, kind, task)
        for n, kind in cells(lengths)
        for task in args.tasks
        if kind in named[n]  # the learned row only once its spec is there
        if kind not in now[n] or not distant.result_path(out, n, now[n][kind][0], task).is_file()
        if distant.wanted(named[n][kind][0], args.only)
    ]
    print(f"{len(todo)} results to make, {len(todo) * args.docs} forwards (+ the slope search if not done):")
    print("\n".join(f"  {n} {kind} {task}" for n, kind, task in todo), flush=True)
    if args.plan:
        return
    publish()
    for n, kind, task in todo:
        if kind == "slope" and slope is None:
            slope = tune_slope(model, tok, ctx, trained, args, out)
        name, spec = of(slope)[n][kind]
        distant.score(model, tok, n, name, spec, task, ctx, out, args.per_window)
        publish()
    print(publish())


if __name__ == "__main__":
    main()
