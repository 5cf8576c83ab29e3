"""The candidates advise learns or is handed: per-head multipliers and LongRoPE factors learned by
gradient on the tuning pool's windows past the race's own (``--learn-steps``), and the specs a
user's ``attntemp tune`` wrote (``--add-spec``).

Learned (:func:`learned_candidates`), each on :data:`LEARN_WINDOWS` windows the race and the
confirmation never score, loss on the race's objective at N (the key tokens, the needles' answers,
or every prediction past L0), every model weight frozen (:func:`attntemp.tune.gradient.learn`):

- ``per-head``: one multiplier m per (layer, head), no RoPE change; constant, so it is carried as
  a bake into q_proj by every engine and costs what it costs below L0 (the race measures it);
- ``per-head-past-l0``: ln m = b ln(n / L0) past L0 with one slope b per head (m = 1 up to L0:
  nothing changes there), no RoPE change; position-dependent, so carried by transformers' remote
  code on a Llama and by no other engine;
- ``longrope-learned``: LongRoPE's ``long_factor`` (arXiv:2402.13753, one divisor per rotary pair)
  learned from YaRN's (arXiv:2309.00071), ``short_factor`` all 1 and m = 1: transformers runs the
  model as trained on a sequence up to L0.

Each is checkpointed in the output folder (``learned_<key>_<steps>.pt``): a rerun (or ``--status``)
reads the finished one instead of training again, an interrupted one resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluate.corpus import heldout_windows
from ..evaluate.task_base import EvalContext
from ..ops.rope.scalings import rope_for
from ..ops.spec import TemperatureSpec
from ..tune.gradient import GradientOptions, learn
from ..tune.runner import TARGETS_OF
from ..tune.train import TrainOptions
from .candidates import Candidate
from .config import LEARN_WINDOWS

LEARN_LR = 0.05  # AdamW's rate on ln m and ln f (the tune command's default)


@dataclass(frozen=True)
class Learned:
    """What one learned candidate trains: its key, name and family, whether it changes anything up
    to L0, and what is learned (a per-head schedule, or LongRoPE's factors from YaRN's)."""

    key: str
    name: str
    family: str
    gated: bool
    note: str
    schedule: str | None = None  # per-head m: constant (None) or log_length_slope (1 up to L0)
    factors: bool = False  # LongRoPE's factors from YaRN's, m = 1

    def options(self, length: int, trained: int, steps: int) -> GradientOptions:
        """The gradient options of this learning at ``length`` for a model trained to ``trained``."""
        if not self.factors:
            return GradientOptions(lengths=(length,), train=_train(steps, None, self.schedule))
        yarn = rope_for("yarn", length, trained)
        return GradientOptions(
            lengths=(length,), train=_train(steps, yarn, None), rope_factors="learn", rope_temperature="none"
        )


def _train(steps: int, rope: dict[str, Any] | None, schedule: str | None) -> TrainOptions:
    every = max(1, steps // 4)
    return TrainOptions(
        steps=steps, lr=LEARN_LR, granularity="head", schedule=schedule, rope=rope, progress=False,
        checkpoint_every=every,
    )  # fmt: skip


LEARNED = (
    Learned(
        "per-head",
        "per-head m, learned",
        "temperature",
        False,
        "one m per head learned by gradient on windows the race never scores; no RoPE change",
    ),
    Learned(
        "per-head-past-l0",
        "per-head m past L0, learned",
        "temperature",
        True,
        "ln m = b ln(n / L0) past L0 with one b per head learned by gradient (m = 1 up to L0); no RoPE change",
        schedule="log_length_slope",
    ),
    Learned(
        "longrope-learned",
        "LongRoPE factors learned from YaRN's, m = 1",
        "rope",
        True,
        "long_factor learned by gradient from YaRN's per-pair divisors; short_factor 1 (the model as trained up to L0)",
        factors=True,
    ),
)


def checkpoint_of(out: Path, key: str, steps: int) -> Path:
    """Where the learning of ``key`` over ``steps`` steps is checkpointed in the output folder."""
    return out / f"learned_{key}_{steps}.pt"


def finished(path: Path, steps: int) -> bool:
    """Whether ``path`` holds a learning that ran all its ``steps``."""
    if not path.is_file():
        return False
    return int(torch.load(path, weights_only=True).get("step", 0)) >= steps


def learning_windows(objective: str, tok: Any, tctx: EvalContext, length: int, first: int, trained: int):
    """The learning's ``[n, N]`` windows (rows ``first ..`` of the tuning pool) and their ``[n, N-1]``
    loss masks: the objective's targets, or every prediction past L0 for ``perplexity``."""
    n = first + LEARN_WINDOWS
    if objective in TARGETS_OF:
        ids, mask = TARGETS_OF[objective](tok, length, n, ctx=tctx)  # [n, N], [n, N-1]
        ids, mask = ids[first:], mask[first:]
        keep = mask.any(1)  # a window without a target adds nothing
        return ids[keep], mask[keep]
    ids = heldout_windows(tok, length, n=n, docs=tctx.docs)[first:]  # [k, N]
    mask = torch.zeros(ids.shape[0], length - 1, dtype=torch.bool)  # [k, N-1]
    mask[:, trained - 1 :] = True  # predictions of positions >= L0
    return ids, mask


@dataclass(frozen=True)
class LearnJob:
    """What the learning trains towards: the race's objective at ``length`` (L0 ``trained``), on the
    tuning pool's rows ``first ..``, ``steps`` steps each."""

    objective: str
    length: int
    trained: int
    first: int
    steps: int


def learned_candidates(
    model: Any, tok: Any, tctx: EvalContext, out: Path, job: LearnJob, read_only: bool = False
) -> list[Candidate]:
    """The learned candidates (:data:`LEARNED`), each trained ``job.steps`` steps on the learning
    windows (or read from its finished checkpoint in ``out``); with ``read_only`` (``--status``)
    only those already finished."""
    ids, mask = learning_windows(job.objective, tok, tctx, job.length, job.first, job.trained)
    if ids.shape[0] == 0:
        raise ValueError(f"learn_steps={job.steps}: none of the {LEARN_WINDOWS} learning windows holds a target")
    device = next(model.parameters()).device
    found = []
    for kind in LEARNED:
        path = checkpoint_of(out, kind.key, job.steps)
        if read_only and not finished(path, job.steps):
            continue
        opts = kind.options(job.length, job.trained, job.steps)
        result, _ = learn(model, [ids.to(device)], [mask], opts, path)
        found.append(Candidate(kind.name, result.spec, kind.family, kind.gated, kind.note, key=kind.key))
    return found


def added_candidates(paths: tuple[str, ...], specs: tuple[TemperatureSpec, ...]) -> list[Candidate]:
    """A candidate for each spec file a user's ``attntemp tune`` (or anyone) wrote (``specs``: the
    plan's, loaded and checked from ``paths``), named by its path."""
    out = []
    for i, (path, spec) in enumerate(zip(paths, specs, strict=True)):
        family = "rope + temperature" if spec.rope and not spec.is_identity else "rope" if spec.rope else "temperature"
        gated = spec.is_identity and _short_factor_one(spec)
        note = "a spec file given with --add-spec"
        out.append(Candidate(f"added: {path}", spec, family, gated, note, key=f"added-{i + 1}"))
    return out


def _short_factor_one(spec: TemperatureSpec) -> bool:
    """No rope, or a longrope rope whose short factors are all 1 with attention_factor 1: nothing
    changes up to L0 (transformers switches to the long factors past it)."""
    rope = spec.rope
    if not rope:
        return True
    ones = rope.kind == "longrope" and all(float(x) == 1.0 for x in rope["short_factor"])
    return ones and rope.cos_sin_factor(rope.l0 or 2) == 1.0
