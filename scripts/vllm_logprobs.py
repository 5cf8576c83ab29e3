"""Prompt log-probabilities from vLLM on given token ids: the engine side of `attntemp verify --engine vllm`.

Runs inside vLLM's own virtual environment (scripts/build_vllm_cpu.sh; it cannot import attntemp):

    VENV/bin/python scripts/vllm_logprobs.py --model DIR --ids ids.json --out out.json \
        [--hf-overrides JSON] [--max-model-len N] [--top K]

ids.json: a list of token-id rows. out.json: per row, per position p >= 1, the log-probability of
token p given tokens < p ("token"), and the top-K log-probabilities as [[id, logprob], ...] ("top").
float32 weights; --top -1 asks for the whole vocabulary (exact KL on a small vocabulary).
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--hf-overrides", default=None, help="JSON object, as `vllm serve --hf-overrides`")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--top", type=int, default=20, help="top-K log-probabilities per position (-1: all)")
    p.add_argument("--memory", type=float, default=0.1, help="fraction of CPU memory vLLM reserves")
    args = p.parse_args()

    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    rows = json.load(open(args.ids))
    extra = {"hf_overrides": json.loads(args.hf_overrides)} if args.hf_overrides else {}
    llm = LLM(
        model=args.model,
        dtype="float32",
        max_model_len=args.max_model_len or max(len(r) for r in rows) + 1,  # + the one generated token
        max_logprobs=args.top,
        enforce_eager=True,
        trust_remote_code=True,
        gpu_memory_utilization=args.memory,  # on the CPU backend: the fraction of CPU memory reserved
        **extra,
    )
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=args.top)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows], params)
    result = []
    for row, out in zip(rows, outputs, strict=True):
        token, top = [], []
        for p, entry in enumerate(out.prompt_logprobs[1:], start=1):
            token.append(entry[row[p]].logprob)
            top.append([[int(k), float(v.logprob)] for k, v in entry.items()])
        result.append({"token": token, "top": top})
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"vllm": vllm.__version__, "rows": result}, f)
    os.replace(tmp, args.out)  # complete or absent: vLLM 0.32's CPU engine can abort while it tears
    # down at exit ("terminate called without an active exception", once in about a dozen runs),
    # after this; attntemp reads the file whatever the exit status
    del llm


if __name__ == "__main__":
    main()
