"""Key-token sanity check: does cutting each prediction's context to its last K tokens cost key
tokens more than all tokens? Tiny model (or --model), held-out windows of --text, both rules:
the n-gram rule (key_tokens' default) and LongPPL's rule with the model as its own evaluator.
Prints JSON: per rule, the truncated / full perplexity ratio on key tokens and on all tokens past
K, each with its paired bootstrap 95% interval over windows.

    python scripts/key_token_truncation.py [--length 256] [--distance 64] [--ngram 8] [--windows 16]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

import attntemp
from attntemp.evaluate import corpus
from attntemp.evaluate.key_tokens import key_mask, short_context_nll, token_nll_rows
from attntemp.evaluate.tasks import EvalContext
from attntemp.hf import introspect
from attntemp.ops import intervals


def ratio(short: torch.Tensor, full: torch.Tensor, mask: torch.Tensor) -> dict[str, object]:
    """Truncated / full perplexity over the predictions ``mask`` keeps, paired over windows."""
    counts = mask.sum(1)
    keep = counts > 0
    if int(keep.sum()) < 2:  # no interval from fewer than two windows with such tokens
        return {"ratio": None, "tokens": int(counts.sum()), "windows": int(keep.sum())}
    a, b = (short * mask).sum(1)[keep], (full * mask).sum(1)[keep]
    ci = intervals.paired_ratio_interval(a.tolist(), b.tolist(), counts[keep].tolist())
    return {"ratio": ci.to_dict(), "tokens": int(counts.sum()), "windows": int(keep.sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--text", default="stdlib")
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--distance", type=int, default=64, help="K: the truncated context")
    ap.add_argument("--ngram", type=int, default=8)
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
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
