"""Every label-free method and published rule against m = 1, YaRN's m and the best global m, on a
real model at one length: the SmolLM2 row of the trust table (the tiny model's is
``scripts/trust_table.py``).

Entropy-matching specs are tuned on windows of the tuning pool; every spec is then scored on the
same evaluation windows (documents no tuner saw) and compared, paired, with m = 1 and with YaRN's
own m: tail-perplexity ratio, 95% bootstrap interval, verdict in words.

    python scripts/trust_one_length.py --model smollm2 --text ../shared/data/gutenberg \\
        --length 12288 --rope yarn --docs 4 --tune-windows 1 \\
        --targets norm_entropy,entropy_growth,entropy,max_weight \\
        --global-spec docs/results/smollm2_tune12k_spec.json \\
        --global-evidence docs/results/smollm2_tune12k_evidence.json \\
        --out runs/smollm2_trust12k   # resumable; on 2 busy CPU cores ~10-25 min per scored spec

The untuned rules are scored first (scoring only), then each entropy target is matched (one forward
with a bisection per layer: ~25 min per target for SmolLM2 at 12k) and scored; the table is
rewritten after each row, so a partial run shows what it has.

Every spec is scored again on a second text no tuner saw any of, whole (``--heldout-text``,
default the stdlib: code beside the books; ``none`` to skip it), and the table has one part per text.

Writes ``OUT/specs/<name>.json``, ``OUT/results/<name>.json`` and ``OUT/results_heldout/<name>.json``
(per-window values, reused by a rerun), ``OUT/table.md`` and ``OUT/table.json``. The gradient spec
is left out: backpropagating through SmolLM2 at 12k tokens does not fit a 2-core CPU session (run
``attntemp tune --method gradient`` on a GPU for it).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from attntemp.evaluate import corpus
from attntemp.evaluate.score import ScoreStore, score
from attntemp.evaluate.tasks import EvalContext, EvalOptions, get_task
from attntemp.hf import introspect
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.entropy import TARGETS, EntropyOptions, tune_entropy
from attntemp.tune.evidence import M_ONE, YARN, evidence_specs
from attntemp.tune.runner import TuneConfig
from attntemp.utils.options import from_argv, option, reuse

RULES = {"rule logn": "logn", "rule sqrt_logn": "sqrt_logn"}  # label-free published laws, untuned


GLOBAL = "best global m (search)"


@dataclass(frozen=True, kw_only=True)
class TrustOneLengthConfig:
    """The model, its text and length, the entropy targets, the earlier global tune, the output."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    text: str = reuse(EvalOptions, "text", "../shared/data/gutenberg")
    length: int = option(12288, "the length every spec is scored at")
    rope: str = reuse(TuneConfig, "rope", "yarn")
    docs: int = reuse(EvalOptions, "n_docs", 4)
    tune_windows: int = option(2, "tuning-pool windows for entropy matching")
    targets: str = option(",".join(TARGETS), "entropy targets, comma list")
    global_spec: str | None = option(None, "spec.json of a global tune to include")
    global_evidence: str | None = option(None, "its evidence.json, reused if on the same windows")
    heldout_text: str = option("stdlib", "the second text, scored whole ('none': skip)")
    out: str = option("runs/smollm2_trust12k", "output folder (reused by a rerun)")


def fixed_specs(args: TrustOneLengthConfig, rope: dict | None, trained: int) -> dict[str, TemperatureSpec]:
    """m = 1, YaRN's m and the best global m of an earlier tune (``--global-spec``)."""
    specs = evidence_specs(rope, None)
    if args.global_spec:
        specs[GLOBAL] = TemperatureSpec(multiplier=TemperatureSpec.load(args.global_spec).multiplier, rope=rope)
    return specs


def rule_specs(rope: dict | None, trained: int) -> dict[str, TemperatureSpec]:
    return {
        label: TemperatureSpec(schedule=schedule, schedule_params={"trained_len": trained}, rope=rope)
        for label, schedule in RULES.items()
    }


def reuse_global(args: TrustOneLengthConfig, out: Path, baseline: dict) -> None:
    """Take the tuned spec's scores from the earlier tune's evidence (``--global-evidence``) when
    they were measured on exactly these windows (same digest as this run's m = 1)."""
    if not args.global_evidence:
        return
    tuned = json.loads(Path(args.global_evidence).read_text())["results"]["tuned"]["perplexity"]
    if tuned["windows_digest"] != baseline["windows_digest"]:
        raise SystemExit("--global-evidence was scored on other windows; drop it to rescore")
    path = out / "results" / f"{GLOBAL.replace(' ', '_')}.json"
    if not path.is_file():
        path.write_text(json.dumps({"source": args.global_evidence, **tuned}))


def entropy_spec(model, tok, args, rope, trained: int, tuning: list, target: str, out: Path) -> TemperatureSpec:
    """Per-head entropy matching with ``target`` on ``--tune-windows`` windows of the tuning pool."""
    path = out / "specs" / f"target_{target}.json"
    if path.is_file():
        return TemperatureSpec.load(path)
    ids = corpus.heldout_windows(tok, args.length, n=args.tune_windows, docs=tuning)  # [n, L]
    t0 = time.perf_counter()
    spec = tune_entropy(model, ids, trained, EntropyOptions(rope=rope, target=target)).spec
    path.parent.mkdir(parents=True, exist_ok=True)
    spec.save(path)
    print(f"matched {target} in {time.perf_counter() - t0:.0f} s", flush=True)
    return spec


def scored(
    model, tok, name: str, spec: TemperatureSpec, args, ctx: EvalContext, out: Path, folder: str = "results"
) -> dict:
    """Perplexity of ``spec`` on ``ctx``'s windows, scored once (``OUT/<folder>/scores.db``)."""
    store = ScoreStore(out / folder / "scores.db")
    try:
        res = score(model, tok, spec, "perplexity", args.length, ctx, store, args.model)
    finally:
        store.close()
    if not res.cached:
        print(f"scored {name}: tail ppl {res.metrics['tail_ppl']:.4g} in {res.seconds:.0f} s", flush=True)
    return {"spec": spec.to_dict(), "seconds": res.seconds, **res.metrics}


def table(results: dict[str, dict], args: TrustOneLengthConfig, text: str | None = None) -> str:
    task = get_task("perplexity")
    base = results[M_ONE]
    where = f"{args.text}, evaluation pool" if text is None else f"{text}, whole"
    lines = [
        f"| spec (rope {args.rope}, {args.length} tokens, {args.docs} windows of {where}) | tail ppl [95%] | "
        "/ m = 1, paired | / YaRN's m, paired |",
        "|---|---|---|---|",
    ]
    for name, res in results.items():
        vs_one = "-" if name == M_ONE else task.compare(res, base, "tail_ppl")
        skip = name in (M_ONE, YARN) or YARN not in results
        vs_yarn = "-" if skip else task.compare(res, results[YARN], "tail_ppl")
        lines.append(f"| {name} | {task.describe(res, 'tail_ppl')} | {vs_one} | {vs_yarn} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = from_argv(TrustOneLengthConfig, argv, __doc__.split("\n\n")[0])
    out = Path(args.out)
    model, tok = load_model(args.model)
    trained = introspect.trained_length(model)
    rope = rope_for(args.rope, args.length, trained)
    docs = corpus.load_text(args.text)
    evaluation, tuning = corpus.pool(docs, "evaluation"), corpus.pool(docs, "tuning")
    ctx = EvalContext(trained, evaluation, n_docs=args.docs, trials=20, batch_size=1)  # trials: scores.db's keys
    other = None if args.heldout_text == "none" else replace(ctx, docs=corpus.load_text(args.heldout_text))
    t_start = time.perf_counter()
    results: dict[str, dict] = {}
    second: dict[str, dict] = {}

    def both(name: str, spec: TemperatureSpec, key: str | None = None) -> None:
        results[key or name] = scored(model, tok, name, spec, args, ctx, out)
        if other is not None:
            second[key or name] = scored(model, tok, name, spec, args, other, out, "results_heldout")

    baseline = scored(model, tok, M_ONE, TemperatureSpec(rope=rope), args, ctx, out)
    reuse_global(args, out, baseline)
    for name, spec in fixed_specs(args, rope, trained).items():
        both(name, spec)
    for name, spec in rule_specs(rope, trained).items():  # untuned rules first: scoring only
        both(name, spec)
        write(results, args, out, time.perf_counter() - t_start, second)
    for target in filter(None, args.targets.split(",")):  # the table is rewritten after each row
        spec = entropy_spec(model, tok, args, rope, trained, tuning, target, out)
        both(f"target_{target}", spec, f"per head, entropy target {target}")
        write(results, args, out, time.perf_counter() - t_start, second)
    print(write(results, args, out, time.perf_counter() - t_start, second))


def write(
    results: dict[str, dict], args: TrustOneLengthConfig, out: Path, seconds: float, second: dict | None = None
) -> str:
    md = table(results, args)
    if second:
        md += "\n\n" + table(second, args, args.heldout_text)
    (out / "table.md").write_text(md + "\n")
    rows = {
        n: {"tail_ppl": r["tail_ppl"], "seconds": r.get("seconds"), "source": r.get("source")}
        for n, r in results.items()
    }
    summary = {"args": asdict(args), "seconds": seconds, "rows": rows}
    (out / "table.json").write_text(json.dumps(summary, indent=1, default=float))
    return md


if __name__ == "__main__":
    main()
