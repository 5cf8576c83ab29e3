"""Benchmark: where one real-model scoring forward's time goes, fp32 against bf16, on the CPU.

One ``token_nll`` pass (the decoder, then the LM head and cross entropy in chunks, as perplexity,
key-token and tail scoring run it) over one window of a book per length, timed by module hooks:
attention (the attention modules less their linear layers: RoPE, the q-fold and SDPA), the linear
layers (q, k, v, o and the MLP's), the LM head with its cross entropy, and the rest (embeddings,
norms, activations, residuals). Each part's GFLOP/s (linear: 2 * tokens * in * out; attention,
causal: 4 * heads * L(L+1)/2 * head_dim per layer; head: 2 * positions * d * V) beside the
machine's matmul rate (a 2048 x 2048 matmul in each dtype, best of 3), measured in the same run. Beside it,
the head only at the positions a key-token metric reads (the tail and the key tokens:
``token_nll(..., keep=...)``) against every position. Prints JSON with the CPU and its load.

    python benchmarks/forward_breakdown.py [--model smollm2] [--lengths 4096,16384] [--dtypes float32,bfloat16]
        [--repeats N] [--threads N]
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from _harness import BenchOptions, machine, median_interval

from attntemp.evaluate.corpus import heldout_windows
from attntemp.evaluate.key_tokens import key_positions
from attntemp.evaluate.lm import head_nll
from attntemp.evaluate.sweep import SweepConfig
from attntemp.evaluate.task_base import tail_start
from attntemp.hf.introspect import trained_length
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.utils.options import from_argv, names, option, reuse


@dataclass(frozen=True, kw_only=True)
class BreakdownBench(BenchOptions):
    """The model, the lengths and the dtypes whose forwards are broken down."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", (4096, 16384))
    dtypes: tuple[str, ...] = option(("float32", "bfloat16"), "dtypes compared, comma list", parse=names)
    repeats: int = reuse(BenchOptions, "repeats", 1)
    threads: int | None = reuse(ModelOptions, "threads")


def matmul_gflops(dtype: torch.dtype, n: int = 2048, repeats: int = 3) -> float:
    """GFLOP/s of an n x n matmul in ``dtype`` (best of ``repeats`` after a warm-up)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)  # [n, n]
    a @ b
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Clock:
    """Seconds and FLOPs per part from forward hooks on the attention modules and linear layers."""

    def __init__(self, model) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.flops: dict[str, float] = defaultdict(float)
        self.cfg = model.config
        self.handles = []
        for name, mod in model.get_decoder().named_modules():
            if isinstance(mod, torch.nn.Linear):
                self._watch(mod, "linear_in_attention" if "self_attn." in name else "linear_mlp")
            elif name.endswith("self_attn"):
                self._watch(mod, "attention_module")

    def _watch(self, mod, part: str) -> None:
        start: list[float] = []

        def pre(m, args, kwargs):
            start.append(time.perf_counter())

        def post(m, args, kwargs, out):
            self.seconds[part] += time.perf_counter() - start.pop()
            x = args[0] if args else kwargs["hidden_states"]  # [b, L, in]
            tokens = x.shape[0] * x.shape[1]
            if part.startswith("linear"):
                self.flops["linear"] += 2 * tokens * m.in_features * m.out_features
            else:
                heads, dim = self.cfg.num_attention_heads, self.cfg.hidden_size // self.cfg.num_attention_heads
                length = x.shape[1]
                self.flops["attention"] += 4 * x.shape[0] * heads * length * (length + 1) / 2 * dim

        self.handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self.handles.append(mod.register_forward_hook(post, with_kwargs=True))

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def breakdown(model, ids: torch.Tensor, keep: torch.Tensor) -> dict:
    """One decoder forward with every part timed, then the LM head with its cross entropy on its
    hidden states: at every position, and at the kept ones only."""
    clock = Clock(model)
    with torch.no_grad():
        t0 = time.perf_counter()
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state  # [1, L, d]
        decoder = time.perf_counter() - t0
        clock.close()
        head_all = _seconds(lambda: head_nll(model, hidden, ids))
        head_kept = _seconds(lambda: head_nll(model, hidden, ids, keep=keep))
    linear = clock.seconds["linear_in_attention"] + clock.seconds["linear_mlp"]
    attention = clock.seconds["attention_module"] - clock.seconds["linear_in_attention"]
    d, v = model.config.hidden_size, model.config.vocab_size
    parts = {
        "attention": (attention, clock.flops["attention"]),
        "linear": (linear, clock.flops["linear"]),
        "lm_head": (head_all, 2 * (ids.shape[1] - 1) * d * v),
        "rest": (decoder - attention - linear, 0.0),
    }
    total = decoder + head_all
    return {
        "seconds_total": total,
        "parts": {
            k: {"seconds": t, "share": t / total, "gflops": f / t / 1e9 if f else None} for k, (t, f) in parts.items()
        },
        "head_kept_positions_s": head_kept,
        "kept_positions": int(keep.sum()),
        "head_kept_over_all": head_kept / head_all,
        "scoring_kept_over_all": (decoder + head_kept) / total,
    }


def kept_positions(ids: torch.Tensor, trained: int) -> torch.Tensor:
    """``[L-1]`` bool: what the key-token task reads, the tail past the trained length and the
    key tokens by the n-gram rule (n 4, distance half the trained length)."""
    length = ids.shape[1]
    keep = key_positions(ids[0], 4, trained // 2)[1:]  # [L-1]: prediction at p scores ids[p + 1]
    keep[tail_start(length, trained) :] = True
    return keep


def summary(rows: list[dict]) -> dict:
    """Median with its bootstrap 95% interval over repeats: the total, each part's seconds and
    GFLOP/s, the kept-positions gain, and the matmul rates."""
    parts = rows[0]["parts"]
    out: dict = {"seconds_total": median_interval([r["seconds_total"] for r in rows])}
    for name in parts:
        out[name] = {
            "seconds": median_interval([r["parts"][name]["seconds"] for r in rows]),
            "share": median_interval([r["parts"][name]["share"] for r in rows]),
        }
        if parts[name]["gflops"]:
            out[name]["gflops"] = median_interval([r["parts"][name]["gflops"] for r in rows])
    for key in ("head_kept_over_all", "scoring_kept_over_all", "matmul_gflops"):
        out[key] = median_interval([r[key] for r in rows])
    out["kept_positions"] = rows[0]["kept_positions"]
    return out


def main(argv: list[str] | None = None) -> None:
    args = from_argv(BreakdownBench, argv, __doc__.split("\n\n")[0])
    dtypes = list(args.dtypes)
    models = {d: load_model(args.model, dtype=d, threads=args.threads) for d in dtypes}  # both held: interleaved
    tok = models[dtypes[0]][1]
    trained = trained_length(models[dtypes[0]][0])
    for model, _ in models.values():
        with torch.no_grad():  # warm-up: one-time kernel and thread-pool set-up is not a part's time
            model(input_ids=heldout_windows(tok, 256, n=1), use_cache=False)
    results = []
    for length in args.lengths:
        ids = heldout_windows(tok, length, n=1)  # [1, L]
        keep = kept_positions(ids, trained)
        runs: dict[str, list[dict]] = {d: [] for d in dtypes}
        for _ in range(args.repeats):
            for d in dtypes:  # round-robin, so load drifts hit both dtypes alike
                rate = matmul_gflops(getattr(torch, d))
                runs[d].append({**breakdown(models[d][0], ids, keep), "matmul_gflops": rate})
                print(json.dumps({"dtype": d, "L": length, **runs[d][-1]}), flush=True)
        row = {"L": length, **{d: summary(v) for d, v in runs.items()}}
        if len(dtypes) == 2:
            a, b = (runs[d] for d in dtypes)
            ratio = [x["seconds_total"] / y["seconds_total"] for x, y in zip(b, a, strict=True)]
            row[f"{dtypes[1]}_over_{dtypes[0]}_total"] = median_interval(ratio)
        results.append(row)
    print(
        json.dumps(
            {
                "benchmark": "forward_breakdown",
                "model": args.model,
                "threads": torch.get_num_threads(),
                "repeats": args.repeats,
                "results": results,
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
