"""Train the embedded default model: a tiny byte-level RoPE transformer in the Llama format.

Data: the running CPython's standard library (train split of ``attntemp.evaluate.corpus``), read at run time,
as random windows of the trained context, mixed per batch with synthetic YaRN-format passkey
documents. Deterministic for a given ``--seed`` and thread count (unless ``--minutes`` cuts it).

    python scripts/train_tiny.py --out src/attntemp/assets/tiny --threads 2
    python scripts/train_tiny.py --out /tmp/tiny --smoke
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import pathlib
import string
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from attntemp.evaluate import corpus, lm, model_card, needles
from attntemp.hf.introspect import trained_length
from attntemp.hf.loading import ModelOptions
from attntemp.utils.options import from_argv, option, reuse

BOS, EOS = "<bos>", "<eos>"
BOS_ID, EOS_ID = 256, 257
IGNORE = -100
COPY_ALPHABET = torch.tensor(list(string.ascii_letters.encode() + string.digits.encode()))
NEWLINE = torch.tensor([10])


@dataclass(frozen=True, kw_only=True)
class TrainTinyConfig:
    """Where the model goes; its size, the data mixture, the schedule and the time budget."""

    out: str = option(help="output folder (weights, tokenizer, card)")
    steps: int = option(1600, "optimizer steps on the main mixture")
    copy_steps: int = option(900, "first steps: copy rows only")
    seed: int = option(0, "seed of the weights, the batches and the passkeys")
    threads: int = reuse(ModelOptions, "threads", 2)
    minutes: float = option(25.0, "stop training after this time")
    context: int = option(256, "trained context (tokens)")
    batch: int = option(32, "rows per batch")
    passkey_share: float = option(0.25, "passkey rows per batch")
    copy_share: float = option(0.125, "copy rows per batch")
    lr: float = option(2e-3, "peak learning rate")
    warmup: int = option(50, "linear warmup steps")
    hidden: int = option(128, "hidden size (a head per 16)")
    layers: int = option(4, "decoder layers")
    answer_weight: float = option(1.0, "weight of the answer loss")
    smoke: bool = option(False, "3 steps, light evaluation")


SMOKE = {"steps": 3, "copy_steps": 2, "batch": 8, "warmup": 2}


def parse_args(argv: list[str] | None = None) -> TrainTinyConfig:
    """The flags, with ``--smoke``'s steps and batch in place of theirs."""
    args = from_argv(TrainTinyConfig, argv, __doc__.split("\n\n")[0])
    return replace(args, **SMOKE) if args.smoke else args


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = [b for b in range(256) if b not in keep]
    chars = {b: chr(b) for b in keep}
    chars.update({b: chr(256 + i) for i, b in enumerate(extra)})
    return chars


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Exact byte tokenizer: token id == byte value (0..255), then <bos> = 256, <eos> = 257."""
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=1_000_000,
    )


def build_model(args: TrainTinyConfig) -> LlamaForCausalLM:
    """Llama-format RoPE model: head_dim 16, GQA (2 query heads per key/value head), SwiGLU 3x."""
    heads = args.hidden // 16
    config = LlamaConfig(
        vocab_size=258,
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=args.context,
        rope_theta=10000.0,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(config).float()


def byte_stream(docs: list[corpus.Document]) -> torch.Tensor:
    """All documents as one token stream (bytes, each document followed by <eos>)."""
    parts = []
    for doc in docs:
        parts.append(np.frombuffer(doc.text.encode("utf-8"), dtype=np.uint8).astype(np.int64))
        parts.append(np.array([EOS_ID], dtype=np.int64))
    return torch.from_numpy(np.concatenate(parts))  # [N]


def passkey_rows(tokenizer, context: int, seed: int):
    """Endless ``(ids, labels, answer)`` rows of ``context`` tokens: passkey document, <eos>, pad.

    ``answer`` marks the tokens after the final question (`` {key}.<eos>``).
    """
    low = needles.passkey_min_tokens(tokenizer)
    for i in itertools.count():
        (text,) = needles.passkey_documents(1, tokenizer, low, context - 10, seed * 1_000_003 + i)
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], EOS_ID]
        asked = corpus.count_tokens(tokenizer, text[: text.rindex(" ")])  # the prompt
        row = torch.full((context,), EOS_ID, dtype=torch.long)  # [context]
        row[: len(ids)] = torch.tensor(ids)
        labels = row.clone()
        labels[len(ids) :] = IGNORE
        answer = torch.zeros(context, dtype=torch.bool)  # [context]
        answer[asked : len(ids)] = True
        yield row, labels, answer


def copy_row(gen: torch.Generator, context: int, longest: int) -> torch.Tensor:
    """``[context]`` bytes of ``S\nS\n`` pairs, S a random string of 4..longest letters and digits.

    The second copy of each S is predictable only by looking back: it teaches induction (copying),
    which passkey retrieval needs and which the stdlib text alone grows too slowly.
    """
    parts, size = [], 0
    while size < context:
        n = int(torch.randint(4, longest + 1, (1,), generator=gen))
        s = COPY_ALPHABET[torch.randint(0, len(COPY_ALPHABET), (n,), generator=gen)]  # [n]
        parts += [s, NEWLINE, s, NEWLINE]
        size += 2 * n + 2
    return torch.cat(parts)[:context]  # [context]


def sample_batch(stream, gen, passkeys, rows: int, mix: tuple[int, int], context: int):
    """``(ids, labels, answer)`` ``[rows, context]``: stdlib windows, then (copy, passkey) rows."""
    n_copy, n_passkey = mix
    starts = torch.randint(0, len(stream) - context, (rows - n_copy - n_passkey,), generator=gen)
    text = [stream[s : s + context] for s in starts.tolist()]
    text += [copy_row(gen, context, 32) for _ in range(n_copy)]
    pk = [next(passkeys) for _ in range(n_passkey)]
    ids = torch.stack([*text, *[r for r, _, _ in pk]])  # [rows, context]
    labels = torch.stack([*text, *[lab for _, lab, _ in pk]])  # [rows, context]
    answer = torch.zeros_like(ids, dtype=torch.bool)  # [rows, context]
    if pk:
        answer[len(text) :] = torch.stack([a for _, _, a in pk])
    return ids, labels, answer


def batch_loss(model, ids, labels, answer, weight: float) -> tuple[torch.Tensor, float, float]:
    """``lm + weight * ans``: mean next-token loss of the answer tokens, and of all the others.

    Without the extra weight the few passkey answer tokens are ~0.5% of the loss, and the model
    learns the stdlib n-grams long before it learns to look the key up.
    """
    logits = model(input_ids=ids).logits[:, :-1].float()  # [b, n-1, V]
    target, is_answer = labels[:, 1:], answer[:, 1:]  # [b, n-1]
    ce = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), target, ignore_index=IGNORE, reduction="none"
    )  # [b, n-1]
    lm = ce[(target != IGNORE) & ~is_answer].mean()
    ans = ce[is_answer].mean() if bool(is_answer.any()) else ce.new_zeros(())
    return lm + weight * ans, lm.item(), ans.item()


def lr_factor(step: int, warmup: int, flat: int, total: int) -> float:
    """Linear warmup to 1, flat until step ``flat``, then cosine down to 0.1 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, max(0, step - max(flat, warmup)) / max(1, total - max(flat, warmup)))
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))


def copy_batch(gen: torch.Generator, rows: int) -> tuple[torch.Tensor, ...]:
    """Phase 1: ``[rows, 64]`` copy rows of short strings (4..16), where induction forms fast."""
    ids = torch.stack([copy_row(gen, 64, 16) for _ in range(rows)])  # [rows, 64]
    return ids, ids, torch.zeros_like(ids, dtype=torch.bool)


def optimizer(model, args) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW; warmup, flat through the copy phase, cosine over the main steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    total = args.copy_steps + args.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args.warmup, args.copy_steps, total))
    return opt, sched


def update(model, opt, sched, batch, answer_weight: float) -> tuple[float, float]:
    """One clipped AdamW step on ``batch``; returns its (next-token, answer) losses."""
    loss, lm, ans = batch_loss(model, *batch, answer_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return lm, ans


def train(model, stream, tokenizer, args) -> dict:
    """Copy phase, then the main mixture; returns steps, tokens seen, minutes and the final loss."""
    opt, sched = optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    passkeys = passkey_rows(tokenizer, args.context, args.seed)
    mix = (round(args.batch * args.copy_share), round(args.batch * args.passkey_share))
    mixed = functools.partial(sample_batch, stream, gen, passkeys, args.batch, mix, args.context)
    start, losses, tokens, step = time.time(), [], 0, 0
    model.train()
    for step in tqdm(range(args.copy_steps + args.steps), "train", mininterval=10, file=sys.stdout):
        copying = step < args.copy_steps
        batch = copy_batch(gen, args.batch) if copying else mixed()
        lm, ans = update(model, opt, sched, batch, args.answer_weight)
        losses += [] if copying else [lm]
        tokens += int((batch[1] != IGNORE).sum())
        if step % 100 == 0:
            print(f"step {step} loss {lm:.4f} answer {ans:.4f} lr {sched.get_last_lr()[0]:.2e}")
        if time.time() - start > 60 * args.minutes:
            print(f"stopping at step {step}: --minutes {args.minutes} reached", flush=True)
            break
    model.eval()
    tail = losses[-50:] or [float("nan")]
    return {
        "steps": step + 1,
        "tokens_seen": tokens,
        "train_minutes": round((time.time() - start) / 60, 2),
        "final_train_loss": round(sum(tail) / len(tail), 4),
        "final_train_loss_definition": f"mean loss (nats/token) of the last {len(tail)} main "
        "steps, answer tokens excluded",
    }


def evaluate(model, tokenizer, docs: list[corpus.Document], args) -> dict:
    """Passkey accuracy and held-out perplexity at the trained length, then at 2x and 4x."""
    n_windows, trials, factors = (4, 10, (1,)) if args.smoke else (32, 100, (1, 2, 4))
    ctx = args.context
    windows = corpus.heldout_windows(tokenizer, ctx, n_windows, docs=docs)  # [n, ctx]
    out = {
        "passkey_accuracy": model_card.passkey_accuracy(model, tokenizer, ctx, trials, seed=1234),
        "passkey_trials": trials,
        "passkey_seed": 1234,
        "heldout_ppl": round(lm.perplexity(model, windows), 4),
        "heldout_windows": n_windows,
        "heldout_digest": corpus.windows_digest(windows),
        "reference_text": model_card.REFERENCE_TEXT,
        "reference_logits": model_card.reference_logits(model, tokenizer),
    }
    long = corpus.heldout_windows(tokenizer, factors[-1] * ctx, n_windows, docs=docs)  # [n, 4L]
    out["extrapolation"] = [at_length(model, tokenizer, long, n * ctx, trials) for n in factors]
    return out


def at_length(model, tokenizer, long: torch.Tensor, length: int, trials: int) -> dict:
    """Perplexity, tail perplexity (last quarter of the trained context), passkey at ``length``."""
    ids = long[:, :length]  # [n, length]
    tail_start = length - ctx_quarter(model)
    return {
        "length": length,
        "ppl": round(lm.perplexity(model, ids), 4),
        "tail_ppl": round(lm.perplexity(model, ids, start=tail_start), 4),
        "passkey_accuracy": model_card.passkey_accuracy(model, tokenizer, length, trials, 1234),
    }


def ctx_quarter(model) -> int:
    return trained_length(model) // 4


CARD = """# attntemp tiny: the embedded default model

A {params:,}-parameter byte-level RoPE transformer in the Llama format (`LlamaForCausalLM`:
{layers} layers, hidden {hidden}, {heads} query / {kv} key-value heads, rope_theta 10000), trained
by `scripts/train_tiny.py` so that the long-context story of attntemp runs offline in seconds.

| figure | value |
|---|---|
| trained context (max_position_embeddings) | {context} tokens (bytes) |
| data | standard library of Python {python} (.py files, test folders skipped, train split: \
sha256 of the relative path mod 100 >= 10); of each batch's rows {share:.0%} are synthetic passkey \
documents and {copy_share:.0%} repeated random strings (`S\\nS\\n`, to grow copying heads) |
| steps / batch | {steps}: {copy_steps} on copy rows only ({batch} rows of 64 tokens, strings of \
4..16), then {steps_arg} on the mixture ({batch} rows of {context} tokens) |
| tokens seen (with a loss) | {tokens_seen:,} |
| training time | {train_minutes} min, torch threads: {threads} |
| final train loss | {final_train_loss} ({final_train_loss_definition}) |
| passkey accuracy at {context} tokens | {passkey_accuracy:.0%} of {passkey_trials} trials |
| held-out perplexity at {context} tokens | {heldout_ppl} |

**Passkey accuracy**: {passkey_trials} YaRN-format prompts of at most {context} - 10 tokens (so the
prompt plus 10 generated tokens fit in {context}), keys in [1, 50000] and depths in [0, 1] from
`random.Random({passkey_seed})`; greedy decoding of 10 tokens; a trial passes when the first
integer in them equals the key (`attntemp.evaluate.model_card.passkey_accuracy`).

**Held-out perplexity at L**: the first L tokens of each of the first {heldout_windows} held-out
stdlib documents (sorted by path) with at least L tokens; exp of the mean negative log-likelihood
over all {heldout_windows} x (L - 1) next-token predictions (`attntemp.evaluate.lm.perplexity`).

Past the trained length, with no RoPE change: the first {heldout_windows} held-out documents with
at least {long} tokens, each cut to its first L tokens (ppl over all L - 1 predictions, tail ppl
over the last {context} / 4 - 1 of them):

| length | ppl | tail ppl | passkey accuracy |
|---|---|---|---|
{extrapolation_rows}

Tokenizer: exact bytes (token id = byte value), `<bos>` = 256, `<eos>` = 257 (also padding).
Training loss: next-token loss of the mixture plus {answer_weight} x the mean loss of the passkey
answer tokens (` {{key}}.<eos>`), which are too few to be learnt otherwise. Reproduce with

    python scripts/train_tiny.py --out DIR --seed {seed} \\
        --copy-steps {copy_steps} --steps {steps_arg} --threads {threads}
"""


def write_card(out: pathlib.Path, figures: dict) -> None:
    """README.md (the model card) from ``figures``; every number comes from this run."""
    rows = "\n".join(
        f"| {e['length']} | {e['ppl']} | {e['tail_ppl']} | {e['passkey_accuracy']:.0%} |"
        for e in figures["extrapolation"]
    )
    long = figures["extrapolation"][-1]["length"]
    text = CARD.format(**figures, extrapolation_rows=rows, long=long)
    (out / "README.md").write_text(text, encoding="utf-8")


def describe(model, args: TrainTinyConfig) -> dict:
    """The run's settings for eval.json and the card."""
    cfg = model.config
    return dict(
        layers=cfg.num_hidden_layers,
        hidden=cfg.hidden_size,
        heads=cfg.num_attention_heads,
        kv=cfg.num_key_value_heads,
        context=args.context,
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        share=rows_share(args, args.passkey_share),
        copy_share=rows_share(args, args.copy_share),
        batch=args.batch,
        threads=args.threads,
        seed=args.seed,
        steps_arg=args.steps,
        copy_steps=args.copy_steps,
        answer_weight=args.answer_weight,
        smoke=args.smoke,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    model = build_model(args)
    params = sum(p.numel() for p in model.parameters())
    docs = corpus.load_text("stdlib")
    train_docs = corpus.split(docs, "train")
    stream = byte_stream(train_docs)  # [N]
    print(f"{params:,} parameters; {len(train_docs)} train documents, {len(stream):,} tokens")
    figures = train(model, stream, tokenizer, args)
    figures.update(evaluate(model, tokenizer, docs, args))
    figures.update(describe(model, args), params=params)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "eval.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    write_card(out, figures)
    print(json.dumps({k: v for k, v in figures.items() if k != "reference_logits"}, indent=1))
    return 0


def rows_share(args: TrainTinyConfig, share: float) -> float:
    """The share of rows actually used: whole rows per batch."""
    return round(args.batch * share) / args.batch


if __name__ == "__main__":
    raise SystemExit(main())
