"""Make attntemp's lm-evaluation-harness task folder: passkey and needle prompts at a few lengths
as ``generate_until`` and ``loglikelihood`` tasks (YAML + JSONL; see
``attntemp.evaluate.lm_eval_tasks``). Deterministic: the same arguments give the same bytes.

    python scripts/make_lm_eval_tasks.py                      # the shipped folder (tiny model)
    python scripts/make_lm_eval_tasks.py --model PATH --lengths 4096,8192 --out DIR   # your model's tokens
"""

from __future__ import annotations

import argparse

from transformers import AutoTokenizer

from attntemp.evaluate import lm_eval_tasks
from attntemp.hf.loading import resolve
from attntemp.utils.options import ints


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="whose tokenizer counts the tokens (default: tiny)")
    p.add_argument("--lengths", type=ints, default=lm_eval_tasks.LENGTHS, help="comma-separated lengths in tokens")
    p.add_argument("--docs", type=int, default=lm_eval_tasks.DOCS, help="prompts per task and length")
    p.add_argument("--seed", type=int, default=lm_eval_tasks.SEED, help="seed of the keys and haystacks")
    p.add_argument("--out", default=str(lm_eval_tasks.lm_eval_tasks_path()), help="folder (default: the shipped one)")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(resolve(args.model))
    out = lm_eval_tasks.write_folder(args.out, tok, args.lengths, args.docs, args.seed)
    print(f"wrote {len(list(out.glob('*.yaml')))} tasks to {out}")


if __name__ == "__main__":
    main()
