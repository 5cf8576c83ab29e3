"""``attntemp generate`` as a run: text from a prompt file, greedy or sampled, optionally under a
TemperatureSpec, with the attention monitor (:mod:`attntemp.analysis.monitor`) watching every
generated token against the model's profile at its trained length.

Without ``--monitor`` (or with ``--progress-bar``) the text streams to stdout as it is generated;
with it, one line per recorded step goes to stderr (the token, mean entropy and H / ln n, the
head furthest from its reference, the flags) and the text follows on stdout at the end. Writes
``generated.txt`` and, when monitoring, ``monitor.jsonl``, ``monitor.png`` and ``reference.json``
into ``--out``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..evaluate.corpus import heldout_windows, load_text, source_files
from ..hf import preflight
from ..hf.introspect import trained_length
from ..hf.loading import load_model
from ..hf.patch import patch
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from .config import GenerateConfig
from .monitor import FlagOptions, Monitor, Step
from .monitor_plot import plot_monitor
from .reference_profile import Reference, reference

GENERATE_RESULTS = ("generated.txt", "monitor.jsonl", "monitor.png", "reference.json")


@dataclass(frozen=True)
class GeneratePlan:
    """What :func:`run_generate` consumes: the prompt read, the spec and the saved reference loaded."""

    cfg: GenerateConfig
    prompt: str
    spec: TemperatureSpec | None
    reference: Reference | None


@dataclass(frozen=True)
class GenerateResult:
    """What a generation did: its summary (tokens, time, the text, the folder, the monitor's flags)."""

    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.summary

    def markdown(self) -> str:
        """The run in one line for a person: tokens, time, the folder, and the monitor's flags."""
        s = self.summary
        line = (
            f"generated {s['new_tokens']} tokens after a prompt of {s['prompt_tokens']} in "
            f"{s['seconds']:.1f} s; wrote {s['out']}/generated.txt"
        )
        if "steps" in s:
            flags = ", ".join(f"{k} {v}" for k, v in s["flag_counts"].items() if v) or "none"
            stopped = "; stopped by the monitor" if s["stopped_by_monitor"] else ""
            line += f" and monitor.jsonl ({s['steps']} steps recorded, flags: {flags}{stopped})"
        return line


def preflight_generate(cfg: GenerateConfig) -> GeneratePlan:
    """Before the model loads: ``out``, the prompt (non-empty UTF-8), the spec against the model's
    config, the memory of a forward over prompt + new tokens, and the saved reference; returns the
    plan: the prompt, spec and reference."""
    outputs.check_out(cfg.out, GENERATE_RESULTS, cfg.overwrite)
    try:
        prompt = Path(cfg.prompt_file).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"prompt_file={cfg.prompt_file!r} is not UTF-8 text ({exc.reason})") from None
    if not prompt.strip():
        raise ValueError(f"prompt_file={cfg.prompt_file!r} is empty; expected the prompt's text")
    spec = TemperatureSpec.load(cfg.spec) if cfg.spec else None
    config = preflight.source_config(cfg.model, patched=bool(cfg.spec or cfg.monitor))
    if cfg.monitor and cfg.reference is None:
        check_reference_text(cfg, preflight.source_trained_length(config))
    preflight.check_spec("spec", cfg.spec, spec, config)
    # config is the text part already; a character of the prompt is at most about one token
    preflight.check_generation("max_new_tokens", cfg.max_new_tokens, config, len(prompt), cfg.max_new_tokens)
    try:
        ref = Reference.load(cfg.reference) if cfg.reference else None
    except UnicodeDecodeError as exc:
        raise ValueError(f"reference={cfg.reference!r} is not a reference profile: not UTF-8 ({exc.reason})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # ValueError: JSON, arrays
        raise ValueError(f"reference={cfg.reference!r} is not a reference profile ({exc})") from None
    return GeneratePlan(cfg, prompt, spec, ref)


def check_reference_text(cfg: GenerateConfig, trained: int | None) -> None:
    """The monitor's reference text holds ``reference_docs`` windows of the trained length."""
    source_files(cfg.reference_text, name="reference_text")
    if not trained:
        return
    try:
        heldout_windows(
            preflight.load_tokenizer(cfg.model), trained, n=cfg.reference_docs, docs=load_text(cfg.reference_text)
        )
    except ValueError:
        raise ValueError(
            f"reference_text={cfg.reference_text!r} with reference_docs={cfg.reference_docs} is not allowed: the "
            f"text holds fewer than {cfg.reference_docs} held-out windows of the trained length {trained}; give a "
            "longer text or fewer documents"
        ) from None


class Printer:
    """A transformers streamer: the text to stdout as it comes, or, when ``monitor`` records, one
    line per step to stderr (the text then printed by the caller); a progress bar on request."""

    def __init__(self, tok: Any, monitor: Monitor | None, lines: bool, bar: bool, total: int, stream: bool = True):
        self.tok, self.monitor, self.lines, self.stream = tok, monitor, lines, stream
        self.ids: list[int] = []
        self.shown = 0
        self.prompt_seen = False
        self.bar = tqdm(total=total, desc="generate", file=sys.stderr, leave=False) if bar else None

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call hands over the prompt
            self.prompt_seen = True
            return
        token = int(value.reshape(-1)[0])
        self.ids.append(token)
        if self.lines and self.monitor is not None:
            steps = self.monitor.steps
            if steps and steps[-1].index == len(self.ids) - 1:
                print(steps[-1].line(0, self.tok.decode([token])), file=sys.stderr, flush=True)
            return
        if self.stream:
            text = self.tok.decode(self.ids, skip_special_tokens=True)
            print(text[self.shown :], end="", flush=True)
            self.shown = len(text)
        if self.bar is not None:
            self.bar.update(1)

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _stop_callback(flags: tuple[str, ...]) -> Callable[[Step], str | None] | None:
    """``"stop"`` at the first step raising one of ``flags``."""
    if not flags:
        return None
    return lambda step: "stop" if any(step.flags[f].any() for f in flags) else None


def _tokens(tok: Any, out: torch.Tensor, prompt_len: int) -> Callable[[Step], list[str]]:
    """Per step, each row's generated token (step k predicted token ``prompt_len + k``)."""

    def names(step: Step) -> list[str]:
        at = prompt_len + step.index
        return [tok.decode(row[at : at + 1]) if at < len(row) else "" for row in out.tolist()]

    return names


def _generate(
    model, tok, ids: torch.Tensor, cfg: GenerateConfig, mon: Monitor | None, spec, stream: bool
) -> torch.Tensor:
    lines = mon is not None and not cfg.progress_bar
    printer = Printer(tok, mon, lines, bar=cfg.progress_bar, total=cfg.max_new_tokens, stream=stream)
    kw: dict[str, Any] = {"do_sample": cfg.sample, "max_new_tokens": cfg.max_new_tokens, "streamer": printer}
    if cfg.sample:
        kw.update(temperature=1.0, top_k=0, top_p=1.0)
    torch.manual_seed(cfg.seed)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with ExitStack() as stack, torch.no_grad():
        if spec is not None:
            stack.enter_context(patch(model, spec))
        if mon is not None:
            stack.enter_context(mon)
            kw["stopping_criteria"] = mon.stopping_criteria
        device: Any = model.device
        out = model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device), pad_token_id=pad, **kw)
    return out.cpu()


def run_generate(cfg: GenerateConfig, stream: bool = True) -> GenerateResult:
    """Generate, monitor when asked, write the outputs under ``cfg.out``; returns the result (its
    summary holds the text). ``stream=False`` keeps stdout for the caller (the step lines still go
    to stderr). ``out`` is locked first."""
    with outputs.claimed(cfg.out, "generate"):
        return _run(preflight_generate(cfg), stream)


def _run(plan: GeneratePlan, stream: bool) -> GenerateResult:
    cfg = plan.cfg
    prompt, spec, ref = plan.prompt, plan.spec, plan.reference
    model, tok = load_model(cfg.model, **cfg.load_args())
    ids = tok(prompt, return_tensors="pt").input_ids  # [1, P]
    mon = None
    if cfg.monitor:
        trained = trained_length(model)
        ref = ref or reference(model, cfg.reference_text, trained, tokenizer=tok, n_docs=cfg.reference_docs)
        stop = _stop_callback(cfg.stop_on)
        mon = Monitor(model, ref, cfg.every, callback=stop, flags=FlagOptions(cfg.window, cfg.quantile))
    t0 = time.perf_counter()
    out = _generate(model, tok, ids, cfg, mon, spec, stream)
    seconds = time.perf_counter() - t0
    text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    if stream and mon is not None and not cfg.progress_bar:
        print(text)
    elif stream and not text.endswith("\n"):
        print()
    summary: dict[str, Any] = {"prompt_tokens": int(ids.shape[1]), "new_tokens": int(out.shape[1] - ids.shape[1])}
    summary.update(seconds=round(seconds, 3), text=text)
    with outputs.output_folder(
        cfg.out, replace=GENERATE_RESULTS if cfg.overwrite else (), writer="generate", own=GENERATE_RESULTS
    ) as folder:
        (folder / "generated.txt").write_text(text)
        summary["out"] = str(folder)
        if mon is not None and ref is not None:
            summary.update(_save_monitor(mon, ref, folder, _tokens(tok, out, ids.shape[1]), cfg))
    return GenerateResult(summary)


def _save_monitor(mon: Monitor, ref: Reference, folder: Path, tokens, cfg: GenerateConfig) -> dict[str, Any]:
    mon.save_jsonl(folder / "monitor.jsonl", tokens)
    ref.save(folder / "reference.json")
    title = f"{cfg.model}: prompt of {int(mon.steps[0].positions[0]) + 1} tokens" if mon.steps else cfg.model
    if mon.steps:
        plot_monitor(
            mon.steps, ref, folder / "monitor.png", title + (f", spec {Path(cfg.spec).name}" if cfg.spec else "")
        )
    return {
        "steps": len(mon.steps),
        "flag_counts": mon.flag_counts(),
        "margins": {k: round(float(v[-1]), 6) for k, v in mon.margins.items()},
        "stopped_by_monitor": mon.stopped,
    }
