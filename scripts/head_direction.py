"""Which way each head of a model wants its temperature past the trained length, and whether the
attention diagnosis predicts it: the per-head gradient of the key-token loss in ln m at m = 1
(:mod:`attntemp.tune.direction`) on ``--docs`` windows of ``--length`` tokens of the tuning pool,
set beside each head's entropy and recent-token shift from the trained length to ``--length``
(:func:`attntemp.advise.diagnose.head_shift`, read from ``attntemp advise``'s diagnosis files in
``--diagnosis``: window 0 here is the window it measured).

    python scripts/head_direction.py --threads 1 > runs/head_direction.log 2>&1 &

Resumable: each window's gradient is one JSON file under ``--out``
(``docs/results/smollm2_head_direction/``, committed as they come); a rerun skips the windows
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
from attntemp.tune import direction as D
from attntemp.utils.options import from_argv, option, reuse

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


def windows(tok, trained: int, args: DirectionConfig) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The tuning pool's windows ``[n, L]``, their key tokens ``[n, L-1]`` and the rule."""
    text = corpus.load_text(args.text)
    ctx = EvalContext(trained, corpus.pool(text, "evaluation"), tuning_docs=corpus.pool(text, "tuning"),
                      n_docs=args.docs, key_ngram=args.key_ngram)  # fmt: skip
    tctx = tuning_context(ctx)
    ids = corpus.heldout_windows(tok, args.length, n=args.docs, docs=tctx.docs, n_name="docs")  # [n, L]
    mask, rule = key_mask(ids, tok, tctx)  # [n, L-1]
    return ids, mask, rule


def stored(out: Path) -> dict[int, dict]:
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in sorted(out.glob("window_*.json"))}


def run(model, ids: torch.Tensor, mask: torch.Tensor, rule: str, args: DirectionConfig, out: Path) -> None:
    """Each window's gradient not yet in ``out``, written as it comes."""
    done = stored(out)
    out.mkdir(parents=True, exist_ok=True)

    def keep(i: int, g: np.ndarray, loss: float) -> None:
        row = {"window": i, "windows_digest": corpus.windows_digest(ids[i : i + 1]), "rule": rule,
               "key_tokens": int(mask[i].sum()), "key_loss": loss, "gradient": g.tolist()}  # fmt: skip
        (out / f"window_{i}.json").write_text(json.dumps(row) + "\n")
        print(f"window {i}: {row['key_tokens']} key tokens, key NLL {loss:.4f}", flush=True)

    D.head_gradients(model, ids, mask, checkpointing=args.checkpointing, done=keep, skip=tuple(done))


def diagnosis(folder: Path, length: int, trained: int) -> dict:
    long = AttentionStats.load(folder / f"attention_{length}.json")
    short = AttentionStats.load(folder / f"attention_{trained}.json")
    return head_shift(long, short, trained)


def write_table(found: dict, agree: dict, args: DirectionConfig, trained: int, path: Path) -> str:
    label = found["direction"]
    lines = [
        f"Per-head gradient of the key-token loss in ln m at m = 1, {args.model}, {args.length} tokens "
        f"(trained to {trained}), {found['windows']} windows of the tuning pool; 95% intervals over windows.",
        "",
        "| | " + " | ".join(D.DIRECTIONS) + " |",
        "|---|---|---|---|",
        "| all heads | " + " | ".join(str(int((label == d).sum())) for d in D.DIRECTIONS) + " |",
    ]
    for p, row in agree["counts"].items():
        lines.append(f"| diagnosis: {p} | " + " | ".join(str(row[d]) for d in D.DIRECTIONS) + " |")
    lines += ["", "| layer | " + " | ".join(D.DIRECTIONS) + " |", "|---|---|---|---|"]
    for layer in range(label.shape[0]):
        lines.append(f"| {layer} | " + " | ".join(str(int((label[layer] == d).sum())) for d in D.DIRECTIONS) + " |")
    rho = agree["spearman_recent"]
    lines += ["", f"Spearman, recent-mass shift against the gradient over heads: {rho['value']:.3f} "
              f"[{rho['low']:.3f}, {rho['high']:.3f}]; entropy shift: {agree['spearman_entropy']['value']:.3f} "
              f"[{agree['spearman_entropy']['low']:.3f}, {agree['spearman_entropy']['high']:.3f}] "
              "(intervals: windows resampled)."]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def write_figure(found: dict, shift: dict, args: DirectionConfig, path: Path) -> None:
    """The gradient per head as a map (direction marked), and against the two diagnosis shifts."""
    mean, label = found["mean"], found["direction"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    lim = float(np.abs(mean).max())
    im = axes[0].imshow(mean.T, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    for (layer, head), d in np.ndenumerate(label):
        if d != "not distinguishable":
            axes[0].text(layer, head, "+" if d == "softer" else "-", ha="center", va="center", fontsize=8)
    axes[0].set_xticks(range(0, mean.shape[0], max(1, mean.shape[0] // 10)))
    axes[0].set(xlabel="layer", ylabel="head", title="d(key NLL)/d ln m at m = 1\n+ wants softer, - wants sharper")
    fig.colorbar(im, ax=axes[0])
    panels = ((axes[1], "recent_mass_shift", "recent-token mass", 0.1, "collapses"),
              (axes[2], "norm_entropy_shift", "entropy / ln n", 0.05, "diffuses"))  # fmt: skip
    for ax, key, name, cut, what in panels:
        x = np.asarray(shift[key], dtype=float)  # [layers, heads]
        for d, colour in COLOURS.items():
            sel = label == d
            err = np.stack([mean[sel] - found["low"][sel], found["high"][sel] - mean[sel]])  # [2, k]
            ax.errorbar(x[sel], mean[sel], yerr=err, fmt="o", ms=3, color=colour, label=d, alpha=0.8, elinewidth=0.6)
        ax.axhline(0, color="k", lw=0.6)
        ax.axvline(cut, color="k", lw=0.6, ls=":", label=f"past it the head {what}")
        ax.set(xlabel=f"{name} shift\n(queries past the trained length at {args.length}, minus at it)",
               ylabel="gradient (95% interval)")  # fmt: skip
    axes[1].legend(title="the head wants", fontsize=8)
    fig.suptitle(f"{args.model}: which way each head wants its temperature at {args.length} tokens")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def publish(args: DirectionConfig, trained: int) -> str | None:
    rows = stored(Path(args.out))
    if len(rows) < 2:
        return None
    grads = [np.asarray(r["gradient"]) for _, r in sorted(rows.items())]
    found = D.direction(grads)
    shift = diagnosis(Path(args.diagnosis), args.length, trained)
    agree = D.agreement(found, shift, grads)
    write_figure(found, shift, args, Path(args.figure))
    return write_table(found, agree, args, trained, Path(args.table))


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
    run(model, ids, mask, rule, args, Path(args.out))
    print(publish(args, trained))


if __name__ == "__main__":
    main()
