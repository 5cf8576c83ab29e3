"""Which way each head of a model wants its temperature past the trained length, and whether the
attention diagnosis predicts it: the per-head gradient of the key-token loss in ln m at m = 1
(:mod:`attntemp.tune.direction`) on ``--docs`` windows of ``--length`` tokens of the tuning pool,
set beside each head's entropy and recent-token shift from the trained length to ``--length``
(:func:`attntemp.advise.diagnose.head_shift`, read from ``attntemp advise``'s diagnosis files in
``--diagnosis``: window 0 here is the window it measured). With ``--control`` (the default) the
same gradient on each window's first L0 tokens too: which heads want a change at the trained
length already, and what the length adds (the paired difference, per head, with its interval).

    python scripts/head_direction.py --threads 1 > runs/head_direction.log 2>&1 &

Resumable: each window's gradient is one JSON file under ``--out`` (``window_i.json``, ``control_i.json``;
``docs/results/smollm2_head_direction/``, committed as they come); a rerun skips the windows
there, and the table and figure are rewritten from the files once two windows are in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from attntemp.advise.diagnose import head_shift
from attntemp.analysis.measure import AttentionStats
from attntemp.evaluate import corpus
from attntemp.evaluate.key_tokens import key_mask
from attntemp.evaluate.tasks import EvalContext, EvalOptions, tuning_context
from attntemp.hf import introspect
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.ops.intervals import Interval, mean_interval
from attntemp.tune import direction as D
from attntemp.utils.options import from_argv, option, reuse
from attntemp.utils.tables import markdown_table

ROOT = Path(__file__).resolve().parents[1]
COLOURS = {"sharper": "tab:blue", "softer": "tab:red", "not distinguishable": "0.6"}


@dataclass(frozen=True, kw_only=True)
class DirectionConfig:
    """The model, the windows (tuning pool, key-token rule), the diagnosis to compare, the files."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    length: int = option(16384, "window length (tokens)")
    docs: int = reuse(EvalOptions, "n_docs", 4)
    text: str = reuse(EvalOptions, "text", "../shared/data/gutenberg")
    key_ngram: int = reuse(EvalOptions, "key_ngram", 4)
    threads: int = reuse(ModelOptions, "threads", 1)
    diagnosis: str = option(str(ROOT / "docs/results/smollm2_advise_16384"), "folder of advise's attention_N.json")
    out: str = option(str(ROOT / "docs/results/smollm2_head_direction"), "per-window JSON folder")
    table: str = option(str(ROOT / "docs/results/smollm2_head_direction.md"), "table file")
    figure: str = option(str(ROOT / "docs/img/smollm2_head_direction.png"), "figure file")
    checkpointing: bool = option(True, "checkpoint each decoder layer (memory bounded at long windows)")
    control: bool = option(True, "also each window's first L0 tokens (the trained length): what the length adds")


def windows(tok, trained: int, args: DirectionConfig) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The tuning pool's windows ``[n, L]``, their key tokens ``[n, L-1]`` and the rule."""
    text = corpus.load_text(args.text)
    ctx = EvalContext(trained, corpus.pool(text, "evaluation"), tuning_docs=corpus.pool(text, "tuning"),
                      n_docs=args.docs, key_ngram=args.key_ngram)  # fmt: skip
    tctx = tuning_context(ctx)
    ids = corpus.heldout_windows(tok, args.length, n=args.docs, docs=tctx.docs, n_name="docs")  # [n, L]
    mask, rule = key_mask(ids, tok, tctx)  # [n, L-1]
    return ids, mask, rule


def stored(out: Path, prefix: str = "window") -> dict[int, dict]:
    """The gradients on disk by window: ``window_i.json`` at the length, ``control_i.json`` at L0."""
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in sorted(out.glob(f"{prefix}_*.json"))}


def run(model, ids: torch.Tensor, mask: torch.Tensor, rule: str, args: DirectionConfig, out: Path, prefix: str) -> None:
    """Each window's gradient not yet in ``out``, written as it comes (windows without a key token
    are skipped: at the trained length a window's first L0 tokens may hold none)."""
    done = stored(out, prefix)
    for i, row in done.items():  # a rerun with other windows (text, model, length) must not mix with these
        if i >= len(ids) or row["windows_digest"] != corpus.windows_digest(ids[i : i + 1]):
            raise SystemExit(f"--out={out} holds {prefix}_{i}.json made on another window; give another --out")
    empty = tuple(i for i in range(len(ids)) if not bool(mask[i].any()))
    out.mkdir(parents=True, exist_ok=True)

    def keep(i: int, g: np.ndarray, loss: float) -> None:
        row = {"window": i, "length": ids.shape[1], "windows_digest": corpus.windows_digest(ids[i : i + 1]),
               "rule": rule, "key_tokens": int(mask[i].sum()), "key_loss": loss, "gradient": g.tolist()}  # fmt: skip
        (out / f"{prefix}_{i}.json").write_text(json.dumps(row) + "\n")
        print(f"{prefix} {i} at {ids.shape[1]}: {row['key_tokens']} key tokens, key NLL {loss:.4f}", flush=True)

    skip = tuple(sorted({*done, *empty}))
    D.head_gradients(model, ids, mask, checkpointing=args.checkpointing, done=keep, skip=skip)


def diagnosis(folder: Path, length: int, trained: int) -> dict:
    long = AttentionStats.load(folder / f"attention_{length}.json")
    short = AttentionStats.load(folder / f"attention_{trained}.json")
    return head_shift(long, short, trained).to_dict()  # the dict tune.direction reads


def counts(label: np.ndarray) -> list[int]:
    """How many heads of ``label`` go each way, in ``D.DIRECTIONS`` order."""
    return [int((label == d).sum()) for d in D.DIRECTIONS]


def total(grads: list) -> str:
    """The global m's gradient (every head's summed) with its 95% interval over windows."""
    ci = mean_interval([float(np.sum(g)) for g in grads])
    return f"{ci.value:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}]"


def write_table(
    found: dict, agree: dict, extra: dict, nulls: dict, sets: dict, args: DirectionConfig, trained: int, path: Path
) -> str:
    """Heads by direction (all, by the diagnosis' prediction, by layer), at L0 and what the length adds."""
    label, n = found["direction"], args.length
    heads = [
        (f"all, at {n}", *counts(label)),
        *((f"diagnosis says {p}, at {n}", *(r[d] for d in D.DIRECTIONS)) for p, r in agree["counts"].items()),
        *((f"all, {name} ({x['windows']} windows)", *counts(x["direction"])) for name, x in extra.items()),
    ]
    chance = [
        (name, x["found"], f"{x['null_mean']:.1f}", f"{x['null_95']:.0f}", x["patterns"]) for name, x in nulls.items()
    ]
    rho = {k: Interval(**agree[k]).fixed(3) for k in ("spearman_recent", "spearman_entropy")}  # value, low, high
    lines = [
        f"Per-head gradient of the key-token loss in ln m at m = 1, {args.model}, {n} tokens (trained to "
        f"{trained}), {found['windows']} windows of the tuning pool; 95% intervals over windows.",
        "",
        markdown_table(("heads", *D.DIRECTIONS), heads),
        "",
        markdown_table(("layer", *D.DIRECTIONS), [(layer, *counts(label[layer])) for layer in range(label.shape[0])]),
        "",
        f"Spearman over heads, against the gradient at {n}: recent-mass shift {rho['spearman_recent']}, "
        f"entropy shift {rho['spearman_entropy']} (intervals: windows resampled).",
        "",
        "One m for every head (the sum of the heads' gradients: d(key NLL)/d ln m of a global m), per set: "
        + "; ".join(f"{name}: {total(g)}" for name, g in sets.items()) + ".",
        "",
        "Heads labelled (sharper or softer) against what chance labels with this few windows (each window's "
        "gradient sign-flipped, all heads together, every pattern):",
        "",
        markdown_table(("gradient", "heads labelled", "by chance: mean", "by chance: 95th percentile", "patterns"),
                       chance),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def heatmap(fig, ax, found: dict, title: str) -> None:
    """``found``'s mean per (layer, head), + where it wants softer, - sharper (interval off 0)."""
    mean, label = found["mean"], found["direction"]
    lim = float(np.abs(mean).max())
    im = ax.imshow(mean.T, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    for (layer, head), d in np.ndenumerate(label):
        if d != "not distinguishable":
            ax.text(layer, head, "+" if d == "softer" else "-", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(0, mean.shape[0], max(1, mean.shape[0] // 10)))
    ax.set(xlabel="layer", ylabel="head", title=title)
    fig.colorbar(im, ax=ax)


def write_figure(found: dict, shift: dict, extra: dict, args: DirectionConfig, path: Path) -> None:
    """Maps of the gradient at N and of what the length adds; the gradient against the two shifts."""
    mean, label = found["mean"], found["direction"]
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    heatmap(fig, axes[0, 0], found, f"d(key NLL)/d ln m at m = 1, {args.length} tokens\n+ wants softer, - sharper")
    if extra:
        name, x = list(extra.items())[-1]
        heatmap(fig, axes[0, 1], x, f"{name}\n(+ / -: its interval off 0)")
    panels = ((axes[1, 0], "recent_mass_shift", "recent-token mass", 0.1, "collapses"),
              (axes[1, 1], "norm_entropy_shift", "entropy / ln n", 0.05, "diffuses"))  # fmt: skip
    for ax, key, name, cut, what in panels:
        x = np.asarray(shift[key], dtype=float)  # [layers, heads]
        for d, colour in COLOURS.items():
            sel = label == d
            err = np.stack([mean[sel] - found["low"][sel], found["high"][sel] - mean[sel]])  # [2, k]
            ax.errorbar(x[sel], mean[sel], yerr=err, fmt="o", ms=3, color=colour, label=d, alpha=0.8, elinewidth=0.6)
        ax.axhline(0, color="k", lw=0.6)
        line = ax.axvline(cut, color="k", lw=0.6, ls=":", label=f"past it the head {what}")
        ax.set(xlabel=f"{name} shift\n(queries past the trained length at {args.length}, minus at it)",
               ylabel=f"gradient at {args.length} (95% interval)")  # fmt: skip
    axes[1, 0].legend(title="at the long length the head wants", fontsize=8)
    axes[1, 1].legend(handles=[line], fontsize=8)  # the right panel's threshold
    fig.suptitle(f"{args.model}: which way each head wants its temperature at {args.length} tokens")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def publish(args: DirectionConfig, trained: int) -> str | None:
    """The table and the figure from the files, once two windows are in."""
    out = Path(args.out)
    rows, control = stored(out), stored(out, "control")
    if len(rows) < 2:
        return None
    at_n, at_l0 = ({i: np.asarray(r["gradient"]) for i, r in sorted(x.items())} for x in (rows, control))
    grads = list(at_n.values())  # [layers, heads] each
    found = D.direction(grads)
    sets = {f"at {args.length}": grads}
    if len(at_l0) >= 2:
        sets[f"at {trained} (the same windows' first {trained} tokens)"] = list(at_l0.values())
    both = sorted(set(at_n) & set(at_l0))
    if len(both) >= 2:
        sets[f"what the length adds: at {args.length} minus at {trained}, paired"] = [at_n[i] - at_l0[i] for i in both]
    extra = {name: D.direction(g) for name, g in list(sets.items())[1:]}
    nulls = {name: D.sign_flip_null(g) for name, g in sets.items()}
    shift = diagnosis(Path(args.diagnosis), args.length, trained)
    agree = D.agreement(found, shift, grads)
    write_figure(found, shift, extra, args, Path(args.figure))
    return write_table(found, agree, extra, nulls, sets, args, trained, Path(args.table))


def main(argv: list[str] | None = None) -> None:
    args = from_argv(DirectionConfig, argv, __doc__.split("\n\n")[0])
    found = {int(p.stem.split("_")[1]) for p in Path(args.diagnosis).glob("attention_*.json")}
    if args.length not in found or not any(n < args.length for n in found):
        raise SystemExit(f"--diagnosis={args.diagnosis} is not allowed: it needs attention_{args.length}.json and "
                         "the one at the trained length (attntemp advise --out writes them)")  # fmt: skip
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, dtype="float32")
    trained = introspect.trained_length(model)
    if trained not in found:
        raise SystemExit(f"--diagnosis={args.diagnosis} is not allowed: it holds no attention_{trained}.json")
    ids, mask, rule = windows(tok, trained, args)
    run(model, ids, mask, rule, args, Path(args.out), "window")
    if args.control:  # the same windows cut to L0; the causal key-token rule keeps their first L0-1 columns
        run(model, ids[:, :trained], mask[:, : trained - 1], rule, args, Path(args.out), "control")
    print(publish(args, trained))


if __name__ == "__main__":
    main()
