"""Make attntemp's lm-evaluation-harness task folder: passkey and needle prompts at a few lengths
as ``generate_until`` and ``loglikelihood`` tasks (YAML + JSONL; see
``attntemp.evaluate.harness.task_folder``). Deterministic: the same arguments give the same bytes.

    python scripts/make_lm_eval_tasks.py                      # the shipped folder (tiny model)
    python scripts/make_lm_eval_tasks.py --model PATH --lengths 4096,8192 --out DIR   # your model's tokens
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoTokenizer

from attntemp.evaluate.harness import task_folder as lm_eval_tasks
from attntemp.evaluate.sweep import SweepConfig
from attntemp.evaluate.tasks import EvalOptions
from attntemp.hf.loading import ModelOptions, resolve
from attntemp.utils.options import from_argv, option, reuse


@dataclass(frozen=True, kw_only=True)
class LmEvalTasksConfig:
    """Whose tokens, which lengths, how many prompts, which seed, where."""

    model: str = reuse(ModelOptions, "model")
    lengths: tuple[int, ...] = reuse(SweepConfig, "lengths", lm_eval_tasks.LENGTHS)
    docs: int = option(lm_eval_tasks.DOCS, "prompts per task and length")
    seed: int = reuse(EvalOptions, "seed", lm_eval_tasks.SEED)
    out: str = option(str(lm_eval_tasks.lm_eval_tasks_path()), "folder of the tasks (the default: the shipped one)")


def main(argv: list[str] | None = None) -> None:
    args = from_argv(LmEvalTasksConfig, argv, __doc__.split("\n\n")[0])
    tok = AutoTokenizer.from_pretrained(resolve(args.model))
    out = lm_eval_tasks.write_folder(args.out, tok, args.lengths, args.docs, args.seed)
    print(f"wrote {len(list(out.glob('*.yaml')))} tasks to {out}")


if __name__ == "__main__":
    main()
