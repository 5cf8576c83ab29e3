"""``attntemp eval``'s config: its flags, help and checks, importable without torch or lm-eval
(``--help`` builds from it). The run is :mod:`.run`; the paired evaluation :mod:`.paired`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...hf.model_options import ModelOptions
from ...utils import checks
from ...utils.options import ints, names, option
from .lookup import task_metadata

MAX_LENGTH = 4096


@dataclass(frozen=True, kw_only=True)
class EvalHarnessConfig(ModelOptions):
    """``attntemp eval`` and :func:`~.harness_run.run_eval`."""

    spec: str = option(help="a TemperatureSpec JSON file (multipliers m = 1/T, RoPE extension)")
    tasks: tuple[str, ...] = option(
        help="lm-eval task, group or tag names, comma-separated (globs allowed), e.g. attntemp_passkey_1024",
        parse=names,
    )
    out: str = option("attntemp-eval", "output folder: lm-eval's results per run, comparison.json and .md")
    include_path: tuple[str, ...] = option(
        (), "more lm-eval task folders, comma-separated (attntemp's own are always included)", parse=names
    )
    lengths: tuple[int, ...] = option(
        (),
        "remake attntemp's passkey/needle tasks at these lengths in this model's tokens (into OUT/lm_eval_tasks) "
        "instead of the shipped ones (256,512,1024 tiny-model tokens)",
        parse=ints,
    )
    limit: int | None = option(
        None, "documents per task (lm-eval's --limit; per length for RULER tasks): quick checks", parse=int
    )
    metadata: str = option(
        "",
        "a JSON object passed to lm-eval's tasks as their metadata, e.g. '{\"max_seq_lengths\":[4096,8192]}' "
        "(RULER's lengths in tokens; the model's own tokenizer is passed as \"tokenizer\")",
    )
    batch_size: int = option(1, "lm-eval's batch size (requests per forward)")
    max_length: int = option(
        MAX_LENGTH,
        "prompt tokens lm-eval keeps (it cuts longer prompts from the left); not the model's "
        "max_position_embeddings, which attntemp runs past",
    )
    bootstrap_iters: int = option(100000, "lm-eval's bootstrap resamples for the stderr of non-mean metrics")
    seed: int = option(0, "seed of attntemp's (paired) bootstrap intervals")
    overwrite: bool = option(False, "replace a non-empty --out")
    lm_eval_logs: bool = option(False, "show lm-eval's own log lines (its warnings and notes)")

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("tasks=() is not allowed; expected at least one lm-eval task name")
        for name in ("batch_size", "max_length"):
            checks.positive_int(name, getattr(self, name))
        if self.limit is not None:
            checks.positive_int("limit", self.limit)
        if self.bootstrap_iters < 0:
            raise ValueError(f"bootstrap_iters={self.bootstrap_iters} is not allowed; expected an integer >= 0")
        for i, length in enumerate(self.lengths):
            checks.positive_int(f"lengths[{i}]", length)
            if length > self.max_length:
                raise ValueError(f"lengths[{i}]={length} is not allowed; expected <= max_length={self.max_length}")
        check_metadata(task_metadata(self.metadata), self.max_length)


def check_metadata(metadata: dict[str, Any], max_length: int) -> None:
    """RULER's lengths within lm-eval's prompt budget (it would cut longer prompts from the left)."""
    for i, n in enumerate(metadata.get("max_seq_lengths", ())):
        if n > max_length:
            raise ValueError(
                f"metadata max_seq_lengths[{i}]={n} is not allowed; expected <= max_length={max_length} "
                "(lm-eval cuts longer prompts from the left: raise --max-length)"
            )
