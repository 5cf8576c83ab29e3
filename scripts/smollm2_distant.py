"""SmolLM2 past its trained length (8192), judged by the use of distant context: one table of
all-token tail perplexity, key-token perplexity and ``needles`` (accuracy and answer
log-probability), each with its 95% interval and paired against m = 1 at the same length.

Specs at each length L (s = L / 8192): no RoPE change at m = 1 and at a softening m < 1
(``--soft``, T = 1/m > 1); YaRN at m = 1; YaRN with YaRN's own m = (0.1 ln s + 1)^2; and YaRN with
the global m tuned at 12288 (``--tuned-spec``; tuned on all-token tail perplexity, said in its row).

    python scripts/smollm2_distant.py --lengths 12288,16384,8192 --docs 4 --threads 2

With ``--tune-key-tokens`` a sixth spec joins the YaRN rows: YaRN's global m tuned on key-token
perplexity at ``--tune-length`` (12288) by ``attntemp.tune.search.tune_global`` on ``--tune-docs``
documents of the tuning pool (none of the table's), its search cache stored beside the results so
the search resumes too. ``--only TEXT`` scores just the specs whose name holds TEXT, so two
processes (one thread each) can share the work; the table is read back from the files each time.

Resumable on any machine: each (length, spec, task) result, with its per-window values, is one
JSON file under ``--out`` (default ``docs/results/smollm2_distant/``, committed as they come);
a rerun skips what is there and rewrites ``docs/results/smollm2_distant_table.md`` after every
result. The settings (model, text, documents, key-token rule, needles per forward, dtype) are
recorded in ``settings.json`` and a rerun with others is refused. The dtype defaults to the one the
folder's results were made in (float32 for those from before it was recorded), and for a new folder
to the faster on this CPU (docs/scale.md: bfloat16 on an AMD EPYC with avx512_bf16). On 2 busy
CPU cores one 12288-token forward took 177 s and one 16384-token forward 204 s
(``--time-forward`` measures it again); each (length, spec) costs ``--docs`` forwards per task.

Key tokens by the n-gram rule with n = 4 (``--key-ngram``), K = 4096: on these 4 books' windows the
default n = 8 finds 0-5 key tokens per window (too few for an interval), n = 4 finds 5, 69, 2 and
15 past position 8192 at 12288 tokens and 30, 129, 9 and 44 at 16384.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attntemp.evaluate import corpus
from attntemp.evaluate.lm import token_nll
from attntemp.evaluate.score import score as scored
from attntemp.evaluate.sweep import SweepConfig
from attntemp.evaluate.tasks import EvalContext, EvalOptions, get_task, tuning_context
from attntemp.hf import introspect
from attntemp.hf.devices import long_run_cpu_dtype
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.schedules import yarn_multiplier
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.runner import TuneConfig
from attntemp.tune.search import SearchOptions, tune_global
from attntemp.utils import checks
from attntemp.utils.options import from_argv, names, option, reuse

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling module of its figure
from distant_figure import BASE, write_figure, yarn_base

TASKS = ("key_tokens", "needles")
ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True, kw_only=True)
class DistantConfig:
    """What this script and its siblings share: the model, the text and its documents, the key-token
    rule, the needles, threads, the output files, the key-token search of YaRN's m."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    table: str = option(str(ROOT / "docs/results/smollm2_distant_table.md"), "table file")
    figure: str = option(str(ROOT / "docs/img/smollm2_distant.png"), "figure file ('' for none)")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (12288, 16384, 8192))
    docs: int = reuse(EvalOptions, "n_docs", 4)
    text: str = reuse(EvalOptions, "text", "../shared/data/gutenberg")
    soft: float = option(0.9, "the softening multiplier m < 1 (T = 1/m)")
    needles: int = reuse(EvalOptions, "needles_per_forward", 8)
    key_ngram: int = reuse(EvalOptions, "key_ngram", 4)
    threads: int = reuse(ModelOptions, "threads", 2)
    dtype: str | None = option(
        None,
        "float32 or bfloat16 (default: the one --out's results were made in; for a new --out the faster on this "
        "CPU: attntemp.hf.devices.long_run_cpu_dtype, bfloat16 on an AMD CPU with avx512_bf16 or a CPU with AMX, "
        "else float32)",
    )
    out: str = option(str(ROOT / "docs/results/smollm2_distant"), "per-result JSON folder")
    time_forward: bool = option(False, "time one forward per length first")
    tune_length: int = reuse(TuneConfig, "length", 12288)
    tune_docs: int = option(3, "tuning-pool documents of the key-token searches")
    bracket: tuple[float, ...] = reuse(TuneConfig, "bracket", (0.9, 1.2))
    grid: int = reuse(TuneConfig, "grid", 3)
    iters: int = reuse(TuneConfig, "iters", 2)
    only: str = option("", "score only the specs whose name holds this text (A|B: either)")
    tasks: tuple[str, ...] = option(TASKS, "the tasks to score, comma list", parse=names)
    per_window: bool = option(
        False,
        "keep each window's result as it comes (a killed run loses one forward); such results pair only "
        "with each other, so --out records it",
    )

    def __post_init__(self) -> None:
        if self.dtype is not None:
            checks.choice("dtype", self.dtype, DTYPES)


@dataclass(frozen=True, kw_only=True)
class Smollm2DistantConfig(DistantConfig):
    """This script's own: the tuned global m's row, and the key-token search of it."""

    tuned_spec: str = option("docs/results/smollm2_tune12k_spec.json", "a tuned global m")
    tune_key_tokens: bool = option(False, "also tune YaRN's global m on key tokens at --tune-length")


def specs(
    length: int, trained: int, soft: float, tuned: float | None, tuned_key: tuple[float, int] | None = None
) -> dict[str, TemperatureSpec]:
    """The specs of one length, in table order (YaRN rows only past the trained length)."""
    out = {BASE: TemperatureSpec(), f"no RoPE change, m = {soft:g} (softer)": TemperatureSpec(multiplier=soft)}
    if length > trained:
        s = length / trained
        yarn = rope_for("yarn", length, trained)
        m_yarn = yarn_multiplier(s)
        out[f"YaRN s = {s:g}, m = 1"] = TemperatureSpec(rope=yarn)
        out[f"YaRN s = {s:g}, YaRN's m = {m_yarn:.4g}"] = TemperatureSpec(multiplier=m_yarn, rope=yarn)
        if tuned is not None:
            out[f"YaRN s = {s:g}, global m = {tuned:.4g} (tuned at 12288 on tail ppl)"] = TemperatureSpec(
                multiplier=tuned, rope=yarn
            )
        if tuned_key is not None:
            m, at = tuned_key
            out[f"YaRN s = {s:g}, global m = {m:.4g} (tuned at {at} on key tokens)"] = TemperatureSpec(
                multiplier=m, rope=yarn
            )
    return out


def result_path(out: Path, length: int, name: str, task: str) -> Path:
    slug = "".join(c if c.isalnum() or c in "=.-" else "_" for c in name)
    return out / f"{length}" / f"{task}__{slug}.json"


def wanted(name: str, only: str) -> bool:
    """Whether ``--only`` (parts joined by ``|``, each a piece of a spec's name) keeps the spec ``name``."""
    return any(part in name for part in only.split("|"))


def table_lengths(out: Path, lengths: list[int], table: tuple[int, ...]) -> list[int]:
    """This run's lengths and every length of the ``table`` with results under ``out``: two runs on
    different ``--lengths`` (one a core) write the same table."""
    return sorted({*lengths, *(n for n in table if (out / str(n)).is_dir())})


def score(
    model,
    tok,
    length: int,
    name: str,
    spec: TemperatureSpec,
    task: str,
    ctx: EvalContext,
    out: Path,
    per_window: bool = False,
) -> dict:
    """One (length, spec, task) result, read back if a run (here or elsewhere) already made it.
    ``per_window``: each window scored and kept on its own first (:func:`window_parts`)."""
    path = result_path(out, length, name, task)
    if path.is_file():
        return json.loads(path.read_text())
    if per_window:
        parts = window_parts(model, tok, (length, name, spec, task), ctx, path.with_suffix(""))
        metrics, seconds = get_task(task).merge([p["metrics"] for p in parts]), sum(p["seconds"] for p in parts)
    else:
        found = scored(model, tok, spec, task, length, ctx)  # the one way to score a spec; this file is its record
        metrics, seconds = found.metrics, found.seconds
    record = {"spec": spec.to_dict(), "seconds": round(seconds, 1), **metrics}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, default=float) + "\n")
    print(f"{length} {task} {name}: {record['seconds']:.0f} s", flush=True)
    return record


def window_parts(model, tok, cell: tuple[int, str, TemperatureSpec, str], ctx: EvalContext, folder: Path) -> list[dict]:
    """Each of ``ctx``'s windows scored as a block of its own (``window_range``), its result one
    JSON file in ``folder`` written as it comes: a run killed mid-result loses one window's forward,
    not the result's. Their merge pairs with results made the same way, not with whole ones (the
    digests differ), so a folder's settings record the choice."""
    length, name, spec, task = cell
    parts = []
    for i in range(ctx.n_docs):
        part = folder / f"window_{i}.json"
        if not part.is_file():
            found = scored(model, tok, spec, task, length, replace(ctx, window_range=(i, i + 1)))
            folder.mkdir(parents=True, exist_ok=True)
            part.write_text(json.dumps({"seconds": found.seconds, "metrics": found.metrics}, default=float) + "\n")
            print(f"{length} {task} {name}: window {i + 1} of {ctx.n_docs}, {found.seconds:.0f} s", flush=True)
        parts.append(json.loads(part.read_text()))
    return parts


def rows(length: int, results: dict[str, dict[str, dict]]) -> list[str]:
    """Table rows of one length: each metric with its interval and its paired ratio / difference to
    m = 1 without a RoPE change, and, for a temperature on YaRN, to YaRN at m = 1 too."""
    key, ndl = get_task("key_tokens"), get_task("needles")
    yarn1 = yarn_base(results)
    lines = []
    for name, by_task in results.items():
        cells = [str(length), name]
        for task, metric in ((key, "tail_ppl"), (key, "key_ppl"), (ndl, "acc"), (ndl, "logp")):
            res = by_task.get(task.name)
            if res is None:
                cells.append("not run yet")
                continue
            cell = task.describe(res, metric)
            refs = [("m = 1", BASE)] + ([("YaRN m = 1", yarn1)] if yarn1 and name.startswith("YaRN") else [])
            for label, ref in refs:
                other = results[ref].get(task.name)
                if ref != name and other is not None:
                    cell += f"; vs {label}: {task.compare(res, other, metric)}"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def stored(out: Path, names: dict[int, list[str]]) -> dict[int, dict[str, dict[str, dict]]]:
    """Every result on disk for these (length, spec) names: two runs (say, one per spec group)
    writing the same table each see the other's results."""
    found: dict[int, dict[str, dict[str, dict]]] = {}
    for length, specs_of in names.items():
        found[length] = {n: {} for n in specs_of}
        for name in specs_of:
            for task in TASKS:
                path = result_path(out, length, name, task)
                if path.is_file():
                    found[length][name][task] = json.loads(path.read_text())
    return found


def write_table(all_results: dict[int, dict[str, dict[str, dict]]], settings: dict, path: Path) -> str:
    head = [
        f"| length | spec | tail ppl (tokens past {settings['trained']}; at {settings['trained']}, the last quarter) "
        "| key-token ppl | needles accuracy | needles answer log-prob |",
        "|---|---|---|---|---|---|",
    ]
    body = [r for length, results in all_results.items() for r in rows(length, results)]
    rule = (
        f"Key tokens: the rule of `attntemp.evaluate.key_tokens` with n = {settings['key_ngram']}, "
        f"K = {settings['key_distance'] or 'trained length / 2'}; needles: {settings['needles_per_forward']} per "
        f"forward; {settings['docs']} documents of `{settings['text']}` (evaluation pool) per cell; intervals: "
        "95%, over documents; paired comparisons on the same windows."
    )
    md = "\n".join([*head, *body, "", rule])
    path.write_text(md + "\n")
    return md


def recorded(out: Path) -> dict:
    """The settings ``out`` holds results of (results made before the dtype was recorded: float32)."""
    path = out / "settings.json"
    return {"dtype": "float32", **json.loads(path.read_text())} if path.is_file() else {}


def check_settings(out: Path, settings: dict) -> None:
    path = out / "settings.json"
    if path.is_file():
        old = recorded(out)
        if old != settings:
            diff = {k: (old.get(k), v) for k, v in settings.items() if old.get(k) != v}
            raise SystemExit(f"--out {out} holds results made with other settings {diff}; give another --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=1) + "\n")


class StoredCache(dict):
    """The search's cache of m -> objective, written to ``path`` after each multiplier: a rerun
    (here or on another machine) resumes the search where it stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__({float(k): v for k, v in json.loads(path.read_text()).items()} if path.is_file() else {})
        self.path = path

    def __setitem__(self, key: float, value: float) -> None:
        super().__setitem__(key, value)
        self.path.write_text(json.dumps({repr(k): v for k, v in sorted(self.items())}, indent=1) + "\n")


def key_search_options(args: DistantConfig, trained: int) -> SearchOptions:
    """The options of the key-token search for a global m on YaRN at ``--tune-length``: the ones
    :func:`tune_key_tokens` runs and a plan counts its forwards from."""
    lo, hi = args.bracket
    rope = rope_for("yarn", args.tune_length, trained)
    return SearchOptions(
        length=args.tune_length, objective="key_tokens", rope=rope, bracket=(lo, hi), grid=args.grid,
        iters=args.iters, progress=True,
    )  # fmt: skip


def tune_key_tokens(
    model, tok, ctx: EvalContext, trained: int, args: DistantConfig, out: Path, spec_path: Path
) -> None:
    """A global m for YaRN at ``--tune-length`` by search on key-token perplexity, on the tuning
    pool (none of the table's windows), saved to ``spec_path``: ``attntemp.tune.search.tune_global``,
    resumable."""
    n = args.tune_length
    if spec_path.is_file():
        return
    tctx = replace(tuning_context(ctx), n_docs=args.tune_docs)
    opts = key_search_options(args, trained)
    cache = StoredCache(out / f"tuned_key_tokens_{n}_search.json")
    t0 = time.perf_counter()
    found = tune_global(model, tok, tctx, opts, cache)
    TemperatureSpec(multiplier=found["multiplier"], rope=opts.rope).save(str(spec_path))
    edge = " (at the searched grid's edge: the optimum may lie beyond)" if found["at_edge"] else ""
    print(f"tuned on key tokens at {n}: m = {found['multiplier']:.4g}{edge}, {time.perf_counter() - t0:.0f} s")


def time_forward(model, lengths: list[int]) -> None:
    for n in lengths:
        ids = torch.randint(100, 40000, (1, n))  # [1, n]
        t0 = time.perf_counter()
        with torch.no_grad():
            token_nll(model, ids)
        print(f"one forward at {n}: {time.perf_counter() - t0:.0f} s", flush=True)


def setup(args: DistantConfig) -> tuple:
    """Flags checked, then ``(model, tok, trained, ctx, settings, out)``: the model loaded, the
    evaluation context built and the settings checked against those of ``--out``'s results."""
    if not set(args.tasks) <= set(TASKS):
        raise SystemExit(f"--tasks={','.join(args.tasks)} is not allowed; expected a comma list of {', '.join(TASKS)}")
    if not 0 < args.soft < 1:
        raise SystemExit(f"--soft={args.soft} is not allowed; expected a softening multiplier in (0, 1)")
    torch.set_num_threads(args.threads)
    dtype = args.dtype or recorded(Path(args.out)).get("dtype") or long_run_cpu_dtype()
    model, tok = load_model(args.model, dtype=dtype)
    trained = introspect.trained_length(model)
    if args.time_forward:
        time_forward(model, list(args.lengths))
    text = corpus.load_text(args.text)
    docs, tuners = corpus.pool(text, "evaluation"), corpus.pool(text, "tuning")
    ctx = EvalContext(
        trained,
        docs,
        n_docs=args.docs,
        batch_size=1,
        tuning_docs=tuners,
        needles_per_forward=args.needles,
        key_ngram=args.key_ngram,
    )
    settings = {
        "model": args.model,
        "text": args.text,
        "docs": args.docs,
        "key_ngram": ctx.key_ngram,
        "key_distance": ctx.key_distance,
        "needles_per_forward": args.needles,
        "soft": args.soft,
        "trained": trained,
        "dtype": dtype,
    } | ({"per_window": True} if args.per_window else {})  # folders from before it hold whole results
    out = Path(args.out)
    check_settings(out, settings)
    return model, tok, trained, ctx, settings, out


def main(argv: list[str] | None = None) -> None:
    args = from_argv(Smollm2DistantConfig, argv, __doc__.split("\n\n")[0])
    model, tok, trained, ctx, settings, out = setup(args)
    lengths = list(args.lengths)
    tuned = TemperatureSpec.load(args.tuned_spec).multiplier if args.tuned_spec else None
    key_spec = out / f"tuned_key_tokens_{args.tune_length}_spec.json"
    if args.tune_key_tokens:
        tune_key_tokens(model, tok, ctx, trained, args, out, key_spec)
    tuned_key = (TemperatureSpec.load(str(key_spec)).multiplier, args.tune_length) if key_spec.is_file() else None
    of = {n: specs(n, trained, args.soft, tuned, tuned_key) for n in lengths}

    def publish() -> str:  # the table and the figure from every result on disk
        found = stored(out, {n: list(v) for n, v in of.items()})
        if args.figure:
            write_figure(found, settings, Path(args.figure))
        return write_table(found, settings, Path(args.table))

    publish()
    for length in lengths:
        for task in args.tasks:
            for name, spec in of[length].items():
                if wanted(name, args.only):
                    score(model, tok, length, name, spec, task, ctx, out, args.per_window)
                    publish()
    print(publish())


if __name__ == "__main__":
    main()
