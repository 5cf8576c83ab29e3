"""Benchmark: ``attntemp advise``'s race against exhaustive evaluation (every candidate on every
window at the serving length and at every short length, one cut at the end), on the same
candidates, windows and store: the decision each reaches (the survivors and the pick for the
engine) and the forward rows each used (a row: one window of one spec at one length; read from
the results, so the same whether scored now or read from the store). One JSON line per length:

    {"length": ..., "forwards_racing": ..., "forwards_exhaustive": ..., "ratio": ..., "same_decision": ...}

Goal: the same decision with at most a third of the exhaustive rows.

    python benchmarks/advise_racing.py [--model tiny] [--scales 2,4] [--race-windows 16] [--threads 2]
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from _harness import machine

from attntemp.advise.config import AdviseConfig
from attntemp.advise.confirm import pick
from attntemp.advise.plan import preflight_advise
from attntemp.advise.race import race
from attntemp.advise.run import setup
from attntemp.evaluate.score import ScoreStore
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.preflight import source_config, source_trained_length
from attntemp.utils.options import floats, from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class RacingBench:
    """The model, the lengths raced and the race's own settings (as ``attntemp advise`` takes them)."""

    model: str = reuse(ModelOptions, "model")
    scales: tuple[float, ...] = option(
        (2.0, 4.0), "lengths as multiples of the trained length, comma list", parse=floats
    )
    race_windows: int = reuse(AdviseConfig, "race_windows")
    objective: str = reuse(AdviseConfig, "objective")
    threads: int = reuse(ModelOptions, "threads", 2)


def decision(result, engine: str) -> dict:
    chosen, _ = pick(result, engine)
    return {"survivors": sorted(e.name for e in result.survivors), "pick": None if chosen is None else chosen.name}


def one_length(cfg: AdviseConfig, model, store: ScoreStore) -> dict:
    plan = preflight_advise(cfg, model, None)
    s = setup(plan, model, store)
    t0 = time.perf_counter()
    racing = race(s.candidates, s.scorer, s.settings)
    t1 = time.perf_counter()
    everything = replace(s.settings, block=s.settings.windows, min_windows=s.settings.windows)
    exhaustive = race(s.candidates, s.scorer, everything)
    a, b = decision(racing, cfg.engine), decision(exhaustive, cfg.engine)
    return {
        "length": cfg.length,
        "candidates": len(s.candidates),
        "windows": s.settings.windows,
        "forwards_racing": racing.rows,
        "forwards_exhaustive": exhaustive.rows,
        "ratio": round(racing.rows / exhaustive.rows, 4),
        "same_decision": a == b,
        "racing": {**a, "status": racing.status, "seconds": round(t1 - t0, 1)},
        "exhaustive": {**b, "status": exhaustive.status},
        "tuning_rows": s.count.rows.get("tuning", 0),
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
                race_windows=args.race_windows, progress=False, threads=args.threads,
            )  # fmt: skip
            print(json.dumps({**one_length(cfg, model, store), "machine": machine()}), flush=True)


if __name__ == "__main__":
    main()
