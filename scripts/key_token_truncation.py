"""Key-token sanity check: does cutting each prediction's context to its last K tokens cost key
tokens more than all tokens? Tiny model (or --model), held-out windows of --text, both rules:
the n-gram rule (key_tokens' default) and LongPPL's rule with the model as its own evaluator.
Prints JSON: per rule, the truncated / full perplexity ratio on key tokens and on all tokens past
K, each with its paired bootstrap 95% interval over windows.

    python scripts/key_token_truncation.py [--length 256] [--distance 64] [--ngram 8] [--windows 16]
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass

import torch

import attntemp
from attntemp.analysis.run import MeasureConfig
from attntemp.evaluate import corpus
from attntemp.evaluate.key_tokens import key_mask, short_context_nll, token_nll_rows
from attntemp.evaluate.tasks import EvalContext, EvalOptions
from attntemp.hf import introspect
from attntemp.hf.loading import ModelOptions
from attntemp.ops import intervals
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class TruncationConfig:
    """The model, its windows of a text, and the key-token rule's n-gram and distance K."""

    model: str = reuse(ModelOptions, "model")
    text: str = reuse(EvalOptions, "text")
    length: int = reuse(MeasureConfig, "length", 256)
    distance: int = option(64, "K: the truncated context")
    ngram: int = reuse(EvalOptions, "key_ngram", 8)
    windows: int = option(16, "held-out windows")
    threads: int = reuse(ModelOptions, "threads", 1)


def ratio(short: torch.Tensor, full: torch.Tensor, mask: torch.Tensor) -> dict[str, object]:
    """Truncated / full perplexity over the predictions ``mask`` keeps, paired over windows."""
    counts = mask.sum(1)
    keep = counts > 0
    if int(keep.sum()) < 2:  # no interval from fewer than two windows with such tokens
        return {"ratio": None, "tokens": int(counts.sum()), "windows": int(keep.sum())}
    a, b = (short * mask).sum(1)[keep], (full * mask).sum(1)[keep]
    ci = intervals.paired_ratio_interval(a.tolist(), b.tolist(), counts[keep].tolist())
    return {"ratio": ci.to_dict(), "tokens": int(counts.sum()), "windows": int(keep.sum())}


def main(argv: list[str] | None = None) -> None:
    args = from_argv(TruncationConfig, argv, __doc__.split("\n\n")[0])
    torch.set_num_threads(args.threads)
    model, tok = attntemp.load_model(args.model)
    trained = introspect.trained_length(model)
    docs = corpus.load_text(args.text)
    ids = corpus.heldout_windows(tok, args.length, n=args.windows, docs=docs)  # [n, L]
    k, stride = args.distance, max(1, args.distance // 4)
    full = token_nll_rows(model, ids, 4).double()  # [n, L-1]
    # every prediction sees K - S .. K - 1 tokens: never the occurrence a key token copies from
    short = short_context_nll(model, ids, k - stride, stride, 4).double()  # [n, L-1]
    tail = torch.zeros_like(full, dtype=torch.bool)
    tail[:, k:] = True
    out = {"model": args.model, "text": args.text, "length": args.length, "K": k, "windows": args.windows}
    os.environ.setdefault("ATTNTEMP_CACHE", tempfile.mkdtemp())
    for name, extra in (("ngram", {}), ("longppl_self", {"key_evaluator": args.model})):
        ctx = EvalContext(trained, docs, n_docs=args.windows, key_ngram=args.ngram, key_distance=k, **extra)
        mask, rule = key_mask(ids, tok, ctx)
        if name == "longppl_self":  # its short context is K .. K + S - 1 tokens (LongPPL's); the same is used here
            short_rule = short_context_nll(model, ids, k, stride, 4).double()
        else:
            short_rule = short
        out[name] = {"rule": rule, "key": ratio(short_rule, full, mask), "all": ratio(short_rule, full, tail)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
