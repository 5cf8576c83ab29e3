"""Per-head multipliers *learned* on key tokens past the trained length, set beside the per-head
gradient at m = 1 (``head_direction.py``): does training go where the first step points, and how
far? AdamW on each head's ln m (:func:`attntemp.tune.train.train_temperatures`, every weight
frozen, each decoder layer checkpointed) on the key-token loss of ``head_direction.py``'s windows
(the tuning pool, ``--docs`` windows of ``--length`` tokens, one window a step, cyclic).

    python scripts/head_learned.py --threads 1 > runs/head_learned.log 2>&1 &

Resumable across sessions and machines: ``checkpoint.pt`` under ``--out``
(``docs/results/smollm2_head_learned/``) is written after every step (commit it as it comes), with
``log.json`` (each step's window, key-token loss and seconds). Once the steps are done:
``learned_spec.json`` (a per-head table, no RoPE change; ``smollm2_breakdown.py`` scores it on the
evaluation pool as its "learned" row), the table ``--table`` and the figure ``--figure``: the
learned ln m per head, and against the gradient's mean with its direction label.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from attntemp.hf import introspect
from attntemp.hf.learnable import learnable
from attntemp.hf.loading import load_model
from attntemp.ops.intervals import Interval, mean_interval
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune import direction as D
from attntemp.tune.train import TrainOptions, train_temperatures
from attntemp.utils.options import from_argv, option, reuse
from attntemp.utils.tables import markdown_table

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script whose windows this trains on
import head_direction as hd

ROOT = hd.ROOT
SPEC = "learned_spec.json"


@dataclass(frozen=True, kw_only=True)
class LearnedConfig:
    """``head_direction.py``'s model and windows, the training, and this script's files."""

    model: str = reuse(hd.DirectionConfig, "model", "smollm2")
    length: int = reuse(hd.DirectionConfig, "length", 16384)
    docs: int = reuse(hd.DirectionConfig, "docs", 8)
    text: str = reuse(hd.DirectionConfig, "text")
    key_ngram: int = reuse(hd.DirectionConfig, "key_ngram")
    threads: int = reuse(hd.DirectionConfig, "threads")
    checkpointing: bool = reuse(hd.DirectionConfig, "checkpointing")
    steps: int = option(16, "AdamW steps, one window each (cyclic over the windows with key tokens)")
    lr: float = option(0.05, "peak learning rate on ln m (warmup over a tenth of the steps, then cosine decay)")
    direction: str = option(str(ROOT / "docs/results/smollm2_head_direction"), "head_direction.py's --out")
    out: str = option(str(ROOT / "docs/results/smollm2_head_learned"), "checkpoint, log and spec folder")
    table: str = option(str(ROOT / "docs/results/smollm2_head_learned.md"), "table file")
    figure: str = option(str(ROOT / "docs/img/smollm2_head_learned.png"), "figure file")


def train(model, ids: torch.Tensor, mask: torch.Tensor, args: LearnedConfig, out: Path) -> TemperatureSpec:
    """The per-head spec learned on ``ids`` ``[n, L]``'s key tokens ``mask`` ``[n, L-1]``,
    resumed from ``out/checkpoint.pt``; each step logged to ``out/log.json`` as it comes."""
    keep = mask.any(1)  # [n]: a window without a key token adds nothing
    ids, mask = ids[keep], mask[keep]  # [k, L], [k, L-1]
    log_path = out / "log.json"
    log = json.loads(log_path.read_text()) if log_path.is_file() else []
    settings = {k: v for k, v in asdict(args).items() if k in ("model", "length", "docs", "text", "key_ngram")}
    opts = TrainOptions(steps=args.steps, lr=args.lr, granularity="head", checkpoint_every=1,
                        gradient_checkpointing=args.checkpointing, progress=False, settings=settings)  # fmt: skip
    t0 = [time.perf_counter()]

    def logged(step: int, loss: float) -> None:
        log[step - 1 :] = [{"step": step, "window": (step - 1) % len(ids), "key_loss": loss,
                            "seconds": round(time.perf_counter() - t0[0], 1)}]  # fmt: skip
        log_path.write_text(json.dumps(log, indent=1) + "\n")
        print(f"step {step} of {args.steps}: key NLL {loss:.4f}, {log[-1]['seconds']:.0f} s", flush=True)
        t0[0] = time.perf_counter()

    out.mkdir(parents=True, exist_ok=True)
    with learnable(model, None, "head"):
        found = train_temperatures(model, ids, opts, out / "checkpoint.pt", mask, logged)
    found.spec.save(out / SPEC)
    return found.spec


def log_m(spec: TemperatureSpec, layers: int, heads: int) -> np.ndarray:
    """ln m per (layer, head) ``[layers, heads]`` of a per-head spec."""
    return np.log(spec.heads_table(layers, heads).double().numpy())  # [layers, heads]


def compare(learned: np.ndarray, found: dict, grads: list[np.ndarray]) -> dict:
    """How the learned ln m meets the gradient at m = 1: Spearman over heads of ln m with minus the
    mean gradient (the first step's direction), its 95% interval from resampling the gradient's
    windows (:func:`attntemp.tune.direction.rank_correlation`), and, per gradient label, how many
    heads the training moved each way."""
    label = found["direction"]
    moved = {d: {"softer (m < 1)": int((learned[label == d] < 0).sum()),
                 "sharper (m > 1)": int((learned[label == d] > 0).sum())} for d in D.DIRECTIONS}  # fmt: skip
    rho = D.rank_correlation(learned, [-g for g in grads])
    return {"spearman": Interval(**rho), "moved": moved}


def trend(log: list[dict]) -> str:
    """Each window's training loss at its first step and at its last, paired over the windows."""
    first, last = {}, {}
    for r in log:
        first.setdefault(r["window"], r["key_loss"])
        last[r["window"]] = r["key_loss"]
    again = [w for w in first if any(r["window"] == w for r in log[len(first) :])]
    if len(again) < 2:
        steps = ", ".join(f"{r['key_loss']:.4f}" for r in log)
        return f"the training key-token NLL per step: {steps}"
    ci = mean_interval([last[w] - first[w] for w in again])
    return (f"each window's training key-token NLL from its first step to its last: {ci.value:+.4f} "
            f"[{ci.low:+.4f}, {ci.high:+.4f}] over {len(again)} windows")  # fmt: skip


def write_table(learned: np.ndarray, found: dict, cmp: dict, args: LearnedConfig, log: list, path: Path) -> str:
    m = np.exp(learned)
    rows = [(d, x["softer (m < 1)"], x["sharper (m > 1)"]) for d, x in cmp["moved"].items()]
    lines = [
        f"Per-head multipliers learned on key tokens at {args.length} tokens, {args.model}: {len(log)} AdamW steps "
        f"(lr {args.lr:g}, one window a step) on {found['windows']} windows of the tuning pool; {trend(log)} "
        '(the held-out evaluation: the breakdown\'s "learned" row).',
        "",
        f"m over the heads: median {np.median(m):.3f}, range {m.min():.3f} to {m.max():.3f}; "
        f"{int((m < 1).sum())} heads softer, {int((m > 1).sum())} sharper.",
        "",
        "Spearman over heads of the learned ln m with minus the gradient at m = 1 (the first step's direction): "
        f"{cmp['spearman'].fixed(3)} (interval: the gradient's windows resampled).",
        "",
        markdown_table(("gradient at m = 1 says", "learned softer (m < 1)", "learned sharper (m > 1)"), rows),
    ]
    path.write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def write_figure(learned: np.ndarray, found: dict, args: LearnedConfig, path: Path) -> None:
    """The learned ln m per (layer, head), and against the gradient's mean (its 95% interval and label)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    lim = float(np.abs(learned).max()) or 1.0
    im = left.imshow(learned.T, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    left.set(xlabel="layer", ylabel="head", title=f"learned ln m at {args.length} tokens (blue: sharper, red: softer)")
    fig.colorbar(im, ax=left)
    mean, label = found["mean"], found["direction"]
    for d, colour in hd.COLOURS.items():
        sel = label == d
        err = np.stack([mean[sel] - found["low"][sel], found["high"][sel] - mean[sel]])  # [2, k]
        right.errorbar(mean[sel], learned[sel], xerr=err, fmt="o", ms=3, color=colour, label=d, alpha=0.8,
                       elinewidth=0.6)  # fmt: skip
    right.axhline(0, color="k", lw=0.6)
    right.axvline(0, color="k", lw=0.6)
    right.set(xlabel=f"d(key NLL)/d ln m at m = 1 (95% interval over {found['windows']} windows)",
              ylabel="learned ln m")  # fmt: skip
    right.set_title("learned against the first step (agreeing: top left, bottom right)")
    right.legend(title="the gradient says", fontsize=8)
    fig.suptitle(f"{args.model}: per-head multipliers learned on key tokens at {args.length} tokens")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def publish(spec: TemperatureSpec, args: LearnedConfig, layers: int, heads: int) -> str:
    """The table and the figure from the learned spec, the log and ``head_direction.py``'s gradients."""
    grads = [np.asarray(r["gradient"]) for _, r in sorted(hd.stored(Path(args.direction)).items())]
    found = D.direction(grads)
    learned = log_m(spec, layers, heads)
    cmp = compare(learned, found, grads)
    write_figure(learned, found, args, Path(args.figure))
    log = json.loads((Path(args.out) / "log.json").read_text())
    return write_table(learned, found, cmp, args, log, Path(args.table))


def main(argv: list[str] | None = None) -> None:
    args = from_argv(LearnedConfig, argv, __doc__.split("\n\n")[0])
    if len(hd.stored(Path(args.direction))) < 2:
        raise SystemExit(f"--direction={args.direction} is not allowed: it needs head_direction.py's window files")
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, dtype="float32")
    trained = introspect.trained_length(model)
    ids, mask, _ = hd.windows(tok, trained, args)
    spec = train(model, ids, mask, args, Path(args.out))
    geometry = introspect.model_geometry(model)
    print(publish(spec, args, geometry.num_layers, geometry.num_heads))


if __name__ == "__main__":
    main()
