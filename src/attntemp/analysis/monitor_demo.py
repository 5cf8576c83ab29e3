"""The monitor on a failing task: passkey retrieval (the YaRN paper's prompt) at 4x the trained
length, without a RoPE change, with YaRN (its frequencies and temperature) and with a given spec
(e.g. a tuned one), beside the same task at the trained length as the control. The reference
profile is the model answering passkey prompts (other keys) at its trained length, so each step
is compared with the same phase of the same task, and a flag at 4x speaks of the length.

:func:`passkey_monitor_demo` runs it; :func:`monitor_section` adds it to a report (a figure and a
table, every figure with its 95% interval).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..evaluate.lm import first_integer
from ..evaluate.needles import KEY_RANGE, passkey_prompt
from ..hf.introspect import trained_length
from ..hf.patch import patch
from ..ops.intervals import mean_interval, wilson
from ..ops.spec import TemperatureSpec
from ..utils import checks
from ..utils.tables import markdown_table
from .config import FLAGS
from .monitor import Monitor, Step
from .monitor_plot import plot_runs
from .reference_profile import Reference


@dataclass(frozen=True)
class DemoRun:
    """One setting: its length, keys, the greedy answers and the monitor's steps."""

    label: str
    length: int
    keys: list[int]
    answers: list[str]
    steps: list[Step]

    @property
    def hits(self) -> list[bool]:
        return [first_integer(a) == k for a, k in zip(self.answers, self.keys, strict=True)]

    def flagged(self) -> np.ndarray:
        """``[steps, rows]``: whether each step of each trial raised any flag."""
        return np.stack([np.any([s.flags[f] for f in FLAGS], axis=0) for s in self.steps])


def left_padded(tok: Any, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[n, P]`` padded on the left and their attention mask (generation needs the
    prompts to end together)."""
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])  # [n, P]
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])  # [n, P]
    return ids, mask


def _prompts(tok: Any, length: int, trials: int, seed: int, new_tokens: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    keys = [rng.randint(*KEY_RANGE) for _ in range(trials)]
    return [passkey_prompt(k, length - new_tokens, rng.random(), tok) for k in keys], keys


@torch.no_grad()
def _generate(model, tok, spec, texts: list[str], ref: Reference | None, new_tokens: int) -> tuple[list[str], Monitor]:
    ids, mask = left_padded(tok, texts)
    mon = Monitor(model, ref)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    device: Any = model.device
    with patch(model, spec or TemperatureSpec()), mon:
        out = model.generate(
            ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad,
        )  # every row runs every step: no row past its end of text in the statistics
    return tok.batch_decode(out[:, ids.shape[1] :].cpu(), skip_special_tokens=True), mon


def passkey_reference(model, tok, trials: int = 32, seed: int = 1000, new_tokens: int = 10) -> Reference:
    """The reference profile: the monitor's steps while the unpatched model answers ``trials``
    passkey prompts (keys of ``seed``) at its trained length, the task it is meant to do there."""
    texts, _ = _prompts(tok, trained_length(model), trials, seed, new_tokens)
    return _generate(model, tok, None, texts, None, new_tokens)[1].as_reference()


def passkey_monitor_demo(
    model,
    tok,
    scale: float = 4.0,
    trials: int = 8,
    seed: int = 0,
    specs: dict[str, TemperatureSpec] | None = None,
    new_tokens: int = 10,
    reference_trials: int = 32,
) -> tuple[Reference, dict[str, DemoRun]]:
    """Passkey at the trained length (m = 1) and at ``scale`` x it with m = 1, YaRN and each of
    ``specs`` (label -> spec), greedy, ``trials`` keys each, watched against
    :func:`passkey_reference` (other keys)."""
    trained = trained_length(model)
    checks.positive_int("trials", trials)
    long = int(trained * checks.at_least("scale", scale, 1.0))
    ref = passkey_reference(model, tok, reference_trials, seed + 1000, new_tokens)
    settings: dict[str, tuple[int, TemperatureSpec | None]] = {
        f"L0 = {trained}, m = 1 (control)": (trained, None),
        f"{scale:g}x = {long}, m = 1": (long, None),
        f"{scale:g}x = {long}, YaRN": (long, TemperatureSpec.yarn(scale, trained)),
    }
    settings |= {f"{scale:g}x = {long}, {name}": (long, s) for name, s in (specs or {}).items()}
    runs = {}
    for label, (length, spec) in settings.items():
        texts, keys = _prompts(tok, length, trials, seed, new_tokens)
        answers, mon = _generate(model, tok, spec, texts, ref, new_tokens)
        runs[label] = DemoRun(label, length, keys, answers, mon.steps)
    return ref, runs


def _row(run: DemoRun) -> tuple[str, ...]:
    hits = run.hits
    acc = wilson(sum(hits), len(hits))
    flagged = run.flagged()  # [steps, rows]
    share = wilson(int(flagged.sum()), flagged.size)
    counts = ", ".join(f"{f.replace('_', ' ')} {int(sum(s.flags[f].sum() for s in run.steps))}" for f in FLAGS)
    shift = np.stack([s.shifts["norm_entropy"] for s in run.steps]).mean(0)  # [rows]: per trial
    ci = mean_interval(shift.tolist()).fixed(3) if len(shift) > 1 else f"{shift[0]:+.3f} (one trial)"
    return (run.label, acc.fixed(2), share.fixed(2), counts, ci)


def demo_table(runs: dict[str, DemoRun]) -> list[str]:
    """The markdown table: accuracy and share of flagged steps (Wilson 95%), flag counts, and the
    mean shift of H / ln n from the reference (bootstrap 95% over trials)."""
    head = ("setting", "passkey accuracy", "steps flagged", "flags raised (step x trial)", "H / ln n shift")
    return [markdown_table(head, [_row(r) for r in runs.values()])]


def monitor_section(
    model, tok, out: Path, scale: float = 4.0, trials: int = 8, seed: int = 0, specs: dict | None = None
) -> list[str]:
    """The demo as a report section: ``monitor_passkey.png`` in ``out`` and markdown lines (the
    reference from 4 x ``trials`` other keys)."""
    ref, runs = passkey_monitor_demo(model, tok, scale, trials, seed, specs, reference_trials=4 * trials)
    png = plot_runs({r.label: r.steps for r in runs.values()}, ref, Path(out) / "monitor_passkey.png")
    mon = Monitor(model, ref)
    margins = ", ".join(f"{f.replace('_', ' ')} {v[-1]:.3f}" for f, v in mon.margins.items())
    return [
        "## Watching attention while the model generates",
        "",
        f"`attntemp.monitor` recorded every greedy token of {trials} passkey trials per setting (10 new "
        f"tokens each) against its profile of the model answering {ref.meta.get('rows', 0)} other passkey "
        "prompts at its trained length. A step is flagged when the mean shift over layers and heads of its "
        f"trial's last {mon.window} steps passes the 99.9% quantile of the same mean over the reference's "
        f"steps (margins for {mon.window} steps: {margins}). Intervals: Wilson 95% for shares, bootstrap 95% "
        "over trials for the mean shift of H / ln n.",
        "",
        *demo_table(runs),
        "",
        f"![monitor]({png.name})",
        "",
    ]
