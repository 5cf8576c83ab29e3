"""Benchmark: ``attntemp advise``'s race against exhaustive evaluation (every candidate on every
window at the serving length and at every short length, one cut at the end), on the same
candidates, windows and store: the decision each reaches for every engine advise serves (the
survivors and the pick for each engine: from the race where the engine carries a survivor, else
from a race among the candidates it carries, as ``attntemp advise`` decides) and the forward rows
each used (a row: one window of one spec at one length, or one passkey prompt of the race's
retrieval axis; read from the results, so the same whether scored now or read from the store;
a row two races share counts once). One JSON line per length:

    {"length": ..., "forwards_racing": ..., "forwards_exhaustive": ..., "ratio": ..., "same_decision": ...,
     "same_pick": {engine: ...}, "racing": {...}, "exhaustive": {...}, "machine": {...}}

``same_decision``: the same survivors of the race of every candidate and the same pick for every
engine; ``racing`` and ``exhaustive`` hold each way's survivors, picks, the races of their own
(``own_races``, with why each candidate left) and, per survivor, the short lengths whose cost a
race left undecided when it ended (``cost_undecided_at``). Goal: the same decision with at most a
third of the exhaustive rows.

    python benchmarks/advise_racing.py [--model tiny] [--scales 2,4] [--race-windows 16] [--threads 2]
    python benchmarks/advise_racing.py --scales 2 --race-windows 4 --threads 1   # the smallest case (tests)
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from _harness import machine

from attntemp.advise.candidates import BASELINE_KEY
from attntemp.advise.carry import computes_as_meant
from attntemp.advise.config import AdviseConfig, served_by
from attntemp.advise.confirm import pick
from attntemp.advise.plan import preflight_advise
from attntemp.advise.race import RaceResult, RaceSettings, race
from attntemp.advise.run import setup
from attntemp.evaluate.score import ScoreStore
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.preflight import source_config, source_trained_length
from attntemp.utils.options import floats, from_argv, option, reuse

GOAL_RATIO = 1 / 3


@dataclass(frozen=True, kw_only=True)
class RacingBench:
    """The model, the lengths raced and the race's own settings (as ``attntemp advise`` takes them)."""

    model: str = reuse(ModelOptions, "model")
    scales: tuple[float, ...] = option(
        (2.0, 4.0), "lengths as multiples of the trained length, comma list", parse=floats
    )
    race_windows: int = reuse(AdviseConfig, "race_windows")
    objective: str = reuse(AdviseConfig, "objective")
    engine: str | None = reuse(AdviseConfig, "engine")
    threads: int = reuse(ModelOptions, "threads", 2)


@dataclass
class Decided:
    """One way of deciding (racing or exhaustive): the race of every candidate, the races among
    the candidates of the engines that carry none of its survivors, and each engine's pick."""

    main: RaceResult
    own: dict[tuple[str, ...], tuple[RaceResult, list[str]]]  # candidate keys -> (race, engines)
    picks: dict[str, str | None]
    rows: dict[tuple[str, str, int, int], int]  # (spec key, task, length, block) -> rows, over every race
    seconds: float

    def summary(self, short_lengths: tuple[int, ...]) -> dict[str, Any]:
        return {
            **outcome(self.main, short_lengths),
            "picks": self.picks,
            "own_races": [{"engines": e, **outcome(r, short_lengths, left=True)} for r, e in self.own.values()],
            "rows": sum(self.rows.values()),
            "rows_main_race": self.main.rows,
            "seconds": round(self.seconds, 1),
        }


def outcome(result: RaceResult, short_lengths: tuple[int, ...], left: bool = False) -> dict[str, Any]:
    """A race's status, windows and survivors, and each survivor's short lengths whose cost the
    race left undecided (it ended before an interval said within bounds); with ``left``, why each
    other candidate left."""
    reasons = {"left": {e.name: e.reason for e in result.entries if e.reason}} if left else {}
    return {
        "status": result.status,
        "windows": result.windows,
        "survivors": sorted(e.name for e in result.survivors),
        "cost_undecided_at": {
            e.name: [n for n in short_lengths if n not in e.short_ok]
            for e in result.survivors
            if e.key != BASELINE_KEY and set(short_lengths) - e.short_ok
        },
        **reasons,
    }


def row_keys(result: RaceResult) -> dict[tuple[str, str, int, int], int]:
    """The rows a race used, by (spec key, task, length, block): a candidate is scored on every block
    from the first until it leaves, so its i-th result at a (task, length) is block i."""
    return {
        (e.key, task, length, i): r.rows
        for e in result.entries
        for (task, length), results in e.parts.items()
        for i, r in enumerate(results)
    }


def decide(candidates: list, scorer: Any, settings: RaceSettings, engines: tuple[str, ...]) -> Decided:
    """Race ``candidates`` under ``settings``, then each engine's pick (as advise's ``_per_engine``)."""
    t0 = time.perf_counter()
    main = race(candidates, scorer, settings)
    rows, picks, own = row_keys(main), {}, {}
    for engine in engines:
        result = main
        if main.status != "undecided" and not any(computes_as_meant(e.candidate, engine) for e in main.survivors):
            mine = [c for c in candidates if computes_as_meant(c, engine)]
            key = tuple(c.key for c in mine)
            if key not in own:  # engines that carry the same candidates share one race
                own[key] = race(mine, scorer, settings), []
                rows.update(row_keys(own[key][0]))
            result = own[key][0]
            own[key][1].append(engine)
        chosen, _ = pick(result, engine)
        picks[engine] = None if chosen is None else chosen.name
    return Decided(main, own, picks, rows, time.perf_counter() - t0)


def one_length(cfg: AdviseConfig, model, store: ScoreStore) -> dict[str, Any]:
    plan = preflight_advise(cfg, model, None)
    s = setup(plan, model, store)
    engines = served_by(cfg)
    racing = decide(s.candidates, s.scorer, s.settings, engines)
    everything = replace(s.settings, block=s.settings.windows, min_windows=s.settings.windows)
    exhaustive = decide(s.candidates, s.scorer, everything, engines)
    a, b = racing.summary(s.settings.short_lengths), exhaustive.summary(s.settings.short_lengths)
    same = {e: a["picks"][e] == b["picks"][e] for e in engines}
    ratio = a["rows"] / b["rows"]
    same_decision = a["survivors"] == b["survivors"] and all(same.values())
    return {
        "benchmark": "advise_racing",
        "model": cfg.model,
        "length": cfg.length,
        "candidates": len(s.candidates),
        "windows": s.settings.windows,
        "engines": list(engines),
        "forwards_racing": a["rows"],
        "forwards_exhaustive": b["rows"],
        "ratio": round(ratio, 4),
        "same_decision": same_decision,
        "same_pick": same,
        "racing": a,
        "exhaustive": b,
        "tuning_rows": s.count.rows.get("tuning", 0),
        "goal": f"same decision with ratio <= {GOAL_RATIO:.4f}",
        "goal_met": same_decision and ratio <= GOAL_RATIO,
    }


def main(argv: list[str] | None = None) -> None:
    args = from_argv(RacingBench, argv, __doc__.split("\n\n")[0])
    model, _ = load_model(args.model, threads=args.threads)
    trained = source_trained_length(source_config(args.model)) or 256
    with tempfile.TemporaryDirectory() as tmp:
        store = ScoreStore(Path(tmp) / "scores.db")
        for scale in args.scales:
            cfg = AdviseConfig(
                model=args.model, length=int(scale * trained), out=str(Path(tmp) / "out"), objective=args.objective,
                race_windows=args.race_windows, engine=args.engine, progress=False, threads=args.threads,
            )  # fmt: skip
            row = one_length(cfg, model, store)
            print(json.dumps({**row, "threads": torch.get_num_threads(), "machine": machine()}), flush=True)


if __name__ == "__main__":
    main()
