"""Gemma 3 270M past its trained length (32768), judged by the use of distant context: the table of
``smollm2_distant.py`` (tail and key-token perplexity, needles; paired 95% intervals) on the model
whose 60 sliding-window heads (512 tokens) never see past their window and whose 12 global heads do.

Specs at each length L (s = L / 32768), every temperature on the global layers only (the sliding
ones keep m = 1, their window being far inside the trained length):

- no RoPE change at m = 1, and at a softening m = ``--soft`` on the global layers;
- softening gated past L0 (``gated_constant``: m = 1 up to 32768 keys, ``--soft`` past them);
- YaRN on the global layers (as Gemma 3's larger models ship their linear scaling) at m = 1;
- YaRN with the global layers' m tuned on key tokens at ``--tune-length`` on the tuning pool (the
  last row of its length; its search runs only when that row is due, so ``--only`` can leave it out).

At the trained length the gated row is left out: there it is no change.

    python scripts/gemma3_distant.py --plan                       # the forwards it needs, then stop
    nice -n 10 python scripts/gemma3_distant.py --threads 1 > runs/gemma3_distant.log 2>&1 &

Resumable as ``smollm2_distant.py`` is, window by window (``--per-window``, on by default here: a
bfloat16 forward costs 8 to 13 min of a core at 32768 to 49152, docs/scale.md): each window's
result one JSON under ``--out``
(``docs/results/gemma3_distant/<length>/<task>__<spec>/window_<i>.json``), merged into one JSON per
(length, spec, task) once its windows are in; the table and the figure rewritten after each result.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from attntemp.hf.patch import only_layer_types
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.spec import TemperatureSpec
from attntemp.utils.options import from_argv, option, reuse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script whose code this shares
import distant_figure as figure
import smollm2_distant as distant

ROOT = distant.ROOT
GLOBAL = ("full_attention",)
TABLE_LENGTHS = (32768, 49152)  # the table's lengths, whatever --lengths this run works on


@dataclass(frozen=True, kw_only=True)
class Gemma3DistantConfig(distant.DistantConfig):
    """``smollm2_distant.py``'s options with Gemma 3's model, files, lengths and threads."""

    model: str = reuse(distant.DistantConfig, "model", "gemma3-270m")
    table: str = reuse(distant.DistantConfig, "table", str(ROOT / "docs/results/gemma3_distant_table.md"))
    figure: str = reuse(distant.DistantConfig, "figure", str(ROOT / "docs/img/gemma3_distant.png"))
    out: str = reuse(distant.DistantConfig, "out", str(ROOT / "docs/results/gemma3_distant"))
    lengths: tuple[int, ...] = reuse(distant.DistantConfig, "lengths", TABLE_LENGTHS)  # 65536: 17.5 min of a core
    tune_length: int = reuse(distant.DistantConfig, "tune_length", 49152)
    threads: int = reuse(distant.DistantConfig, "threads", 1)
    per_window: bool = reuse(distant.DistantConfig, "per_window", True)  # a forward: 8 to 13 min of a core
    plan: bool = option(False, "print the results still to make and their forwards, then stop")


def specs(length: int, trained: int, soft: float, tuned_key: tuple[float, int] | None) -> dict[str, TemperatureSpec]:
    """The specs of one length, in table order; every multiplier on the global layers only."""
    s = length / trained
    gated = {"trained_len": trained, "multiplier": soft}
    out = {
        distant.BASE: TemperatureSpec(),
        f"no RoPE change, m = {soft:g} on global layers (softer)": TemperatureSpec(multiplier=soft, layer_types=GLOBAL),
    }
    if length > trained:  # at or below the trained length the gated spec is no change: not scored again
        out[f"no RoPE change, m = {soft:g} past {trained} on global layers (softer, gated)"] = TemperatureSpec(
            schedule="gated_constant", schedule_params=gated, layer_types=GLOBAL
        )
        yarn = rope_for("yarn", length, trained)
        out[f"YaRN s = {s:g}, m = 1"] = TemperatureSpec(rope=yarn)
        if tuned_key is not None:
            m, at = tuned_key
            name = f"YaRN s = {s:g}, global m = {m:.4g} (tuned at {at} on key tokens)"
            out[name] = TemperatureSpec(multiplier=m, rope=yarn, layer_types=GLOBAL)
    return out


def main(argv: list[str] | None = None) -> None:
    args = from_argv(Gemma3DistantConfig, argv, __doc__.split("\n\n")[0])
    model, tok, trained, ctx, settings, out = distant.setup(args)
    lengths = list(args.lengths)
    key_spec = out / f"tuned_key_tokens_{args.tune_length}_spec.json"
    m = TemperatureSpec.load(str(key_spec)).multiplier if key_spec.is_file() else 1.0  # 1: a stand-in, not searched yet
    of = {n: specs(n, trained, args.soft, (m, args.tune_length)) for n in lengths}
    todo = [(n, name, t) for n in lengths for t in args.tasks for name in of[n] if distant.wanted(name, args.only)]
    todo = [c for c in todo if not distant.result_path(out, *c).is_file()]  # the stand-in m's file is never there
    due = not key_spec.is_file() and any("tuned at" in name for _, name, _ in todo)  # the search: only when due
    search = distant.key_search_options(args, trained).most_points * args.tune_docs if due else 0
    print(f"{len(todo)} results to make, {len(todo) * args.docs} forwards, and up to {search} forwards of "
          f"the key-token search at {args.tune_length}", flush=True)  # fmt: skip
    if args.plan:
        return

    def tuned(at: list[int]) -> dict[int, dict[str, TemperatureSpec]]:  # the specs, the tuned m once stored
        m = TemperatureSpec.load(str(key_spec)).multiplier if key_spec.is_file() else None
        return {n: specs(n, trained, args.soft, None if m is None else (m, args.tune_length)) for n in at}

    def publish() -> str:  # the table and the figure from every result on disk, at every length of the table
        every = distant.table_lengths(out, lengths, TABLE_LENGTHS)
        found = distant.stored(out, {n: list(v) for n, v in tuned(every).items()})
        if args.figure:
            figure.write_figure(found, settings, Path(args.figure), figure.kind_by_name)
        return distant.write_table(found, settings, Path(args.table))

    publish()
    for n in lengths:
        for task in args.tasks:
            for i, name in enumerate(of[n]):  # the tuned spec last at each length: its search only when due
                if not distant.wanted(name, args.only):
                    continue
                if "tuned at" in name and not key_spec.is_file():
                    with only_layer_types(model, GLOBAL):  # the search's m on the global layers only
                        distant.tune_key_tokens(model, tok, ctx, trained, args, out, key_spec)
                name, spec = list(tuned([n])[n].items())[i]  # the same order, the stand-in m replaced
                distant.score(model, tok, n, name, spec, task, ctx, out, args.per_window)
                publish()
    print(publish())


if __name__ == "__main__":
    main()
