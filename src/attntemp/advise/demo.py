"""``attntemp demo``: ``attntemp advise`` on one model at a length where retrieval moves (2x the
trained length for the tiny model), told as one story:

1. where the model breaks without a RoPE change, and how its attention moves head by head;
2. what fixes it and what a temperature adds: the candidates raced on distant context and on the
   cost below the trained length, the survivors confirmed on windows the race never saw;
3. retrieval by generation of the recommendation against no change and YaRN's default on the
   confirmation's passkey prompts (greedy ``generate``; paired: Newcombe's interval);
4. what was shipped: the recommendation baked and reloaded without attntemp, only when it held on
   the evaluation pool and its retrieval does not refute it (fewer passkeys than no change or
   YaRN's default, for certain); the baked checkpoint answers the same passkey prompts in plain
   transformers ``generate``.

Writes advise's files (``report.md``, ``report.html``, ``evidence.json``, figures, ``scores.db``)
and ``baked/`` in the output folder.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluate import corpus, distributed, multikey
from ..evaluate.lm import answer_and_generate, first_integer
from ..evaluate.score import score_key
from ..evaluate.tasks import passkey_prompts
from ..hf import preflight
from ..hf.loading import load_model, resolve
from ..ops.spec import TemperatureSpec
from ..ship.bake import save_baked
from ..ship.remote_code import save_schedule_checkpoint
from ..utils import noise, outputs
from ..utils.tables import markdown_table
from .candidates import BASELINE
from .config import BAKED_DIR, DEMO_OUTPUTS, DemoConfig
from .confirm import RETRIEVAL_LABELS
from .diagnose import check_attention_files
from .plan import AdvisePlan, Retrieval, preflight_advise
from .race import MULTIKEY_TASK
from .records.answers import RECOMMENDED
from .records.comparisons import Paired
from .records.evidence import Evidence
from .run import AdviseResult, advise, contexts, write_advice


def _stage(t0: float, text: str) -> None:
    """One line on stderr per stage, with the time the run has taken so far: said with --quiet
    too (it turns off progress bars, not the word on what a long run is doing)."""
    print(f"demo: {text} ({time.perf_counter() - t0:.0f} s in)", file=sys.stderr, flush=True)


def retrieval_check(ev: Evidence) -> str | None:
    """The confirmation's label of keys found at N (None: no retrieval axis)."""
    return next((k for k in ev.confirmation.rows if k.startswith(tuple(RETRIEVAL_LABELS.values()))), None)


def retrieval_of(ev: Evidence) -> Retrieval:
    """The retrieval axis the run settled on, read back from its evidence."""
    return ev.question.retrieval or Retrieval(None)


def refuted(ev: Evidence) -> str | None:
    """Why the retrieval table refutes the recommendation (it finds fewer passkeys than no change
    or than YaRN's default, distinguishably, on the same prompts); None when it does not."""
    cell = ev.confirmation.cell(retrieval_check(ev), ev.recommendation.name)
    if cell is None:
        return None
    for c, who in ((cell.vs_no_change, "no change"), (cell.vs_default and cell.vs_default.paired, "YaRN's default")):
        if c and c.worse:
            return f"it finds fewer keys than {who}: {c.signed()}"
    return None


def retrieval(ev: Evidence) -> list[str]:
    """The confirmation's passkeys at the serving length, as a table: no change, YaRN's default, the
    recommendation (the same prompts, none of which the race saw)."""
    label = retrieval_check(ev)
    row = ev.confirmation.row(label)
    if not label or row.error is not None:
        return []
    rec = ev.recommendation.name
    default = next((c.name for c in ev.candidates if c.key == "yarn+m"), None)
    names = [n for n in dict.fromkeys([BASELINE, default, rec]) if n in row.cells]
    rows = []
    for n in names:
        cell = row.cells[n]
        default_vs = cell.vs_default.paired if cell.vs_default else None
        mark = " (recommended)" if n == rec and n != BASELINE else ""
        rows.append((n + mark, cell.value, _signed(cell.vs_no_change), _signed(default_vs)))
    return [
        f"## Retrieval at {ev.question.length} tokens",
        "",
        _retrieval_said(ev),
        "",
        markdown_table(("spec", "keys found", "- no change", "- YaRN's default"), rows),
        "",
    ]


def _retrieval_said(ev: Evidence) -> str:
    """How the retrieval table was made: multikey haystacks or passkey prompts, and its intervals."""
    prompts, r = ev.question.retrieval_prompts, retrieval_of(ev)
    trials = prompts.confirmation if prompts else 0
    if r.task == MULTIKEY_TASK:
        return (
            f"{trials} keys, {r.keys} hidden in each haystack of real text, each haystack prefilled once and every "
            "key asked from a copy of its KV cache, answered by greedy generation (transformers' generate), none "
            "of them seen by the race; the same haystacks for every spec. Share found with its 95% interval over "
            f"haystacks (bootstrap); differences paired on the same haystacks. ({r.why})"
        )
    return (
        f"{trials} passkey prompts (the YaRN paper's), answered by greedy generation with a KV cache "
        "(transformers' generate), none of them seen by the race; the same prompts for every spec. Share found "
        "with its Wilson 95% interval; differences paired on the same prompts (Newcombe's 95% interval)."
        + (f" ({r.why})" if r.why else "")
    )


def _signed(c: Paired | None) -> str:
    return "-" if c is None else f"{c.signed()} {c.verdict}"


def ship(cfg: DemoConfig, plan: AdvisePlan, result: AdviseResult, out: Path) -> list[str]:
    """Bake the recommendation when it held and its retrieval does not refute it; say why not
    otherwise; the baked checkpoint answers the confirmation's passkey prompts in plain transformers."""
    rec = result.recommendation
    head = ["## Shipped", ""]
    if rec.status != RECOMMENDED or rec.spec is None:
        return [*head, f"Nothing baked: {rec.status if rec.name else 'undecided'} ({rec.evidence or ''}).", ""]
    why = refuted(result.evidence)
    if why:
        return [*head, f"Nothing baked: the retrieval table refutes the recommendation ({why}).", ""]
    if not cfg.bake:
        return [*head, "Nothing baked (--no-bake).", ""]
    spec = rec.spec
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))  # a fresh fp32 copy
    save = save_schedule_checkpoint if spec.position_dependent else save_baked
    res = save(model, tok, spec, out / BAKED_DIR, overwrite=True)
    return [
        *head,
        f"The recommendation ({rec.name}) is in `{res.path}`: a checkpoint that plain transformers loads"
        + (" with trust_remote_code=True (its schedule as remote code)" if spec.position_dependent else "")
        + f". Reloaded without attntemp, its logits differ from the patched model's by at most "
        f"{res.max_abs_diff:.2e} (fp32, {res.tokens} tokens).",
        "",
        *plain_retrieval(plan, result, res.path),
    ]


def plain_retrieval(plan: AdvisePlan, result: AdviseResult, path: Path) -> list[str]:
    """The baked checkpoint, loaded by plain transformers, answers the confirmation's passkey prompts
    by ``generate``: its hits against attntemp's (patched) hits on the same prompts."""
    label = retrieval_check(result.evidence)
    if not label:
        return []
    from transformers import AutoModelForCausalLM

    n, (ctx, _), r = plan.cfg.length, contexts(plan), retrieval_of(result.evidence)
    ctx = r.confirm_pool(ctx, plan.cfg.retrieval_prompts or plan.cfg.trials)  # the confirmation's prompts
    with noise.quiet_libraries():
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32).eval()
    hits = _plain_hits(model, plan.tok, n, ctx, r)
    spec = result.recommendation.spec or TemperatureSpec()
    task = r.task or "passkey"
    stored = result.store.get(score_key(spec, task, n, ctx, result.model_id)) if result.store else None
    said = f"In plain transformers (`generate`, greedy), the baked checkpoint finds {sum(hits)} of {len(hits)} keys"
    if stored is None:
        return [said + ".", ""]
    mine = [int(h) for row in stored[0]["key_hits"] for h in row] if r.task == MULTIKEY_TASK else stored[0]["hits"]
    same = sum(a == b for a, b in zip(hits, mine, strict=True))
    return [f"{said}; attntemp's patched model found {sum(mine)} on the same trials (the same answer on {same}).", ""]


def _plain_hits(model: Any, tok: Any, n: int, ctx: Any, r: Retrieval) -> list[int]:
    """Keys found by ``model`` (no attntemp patch) on the confirmation's trials, in the store's order."""
    if r.task == MULTIKEY_TASK:
        return [
            int(found) for h in multikey.haystacks(tok, n, ctx) for found, _ in multikey.score_haystack(model, tok, h)
        ]
    hits = []
    for ids, answer, key in passkey_prompts(tok, n, ctx):
        _, gen = answer_and_generate(model, torch.tensor([ids]), torch.tensor([answer]), len(answer) + 2)
        hits.append(int(first_integer(tok.decode(gen[0], skip_special_tokens=True)) == key))
    return hits


@dataclass(frozen=True)
class DemoResult:
    """What the demo found: advise's result and the sections after it (retrieval, the bake, the
    time), as ``report.md`` holds them (``markdown()``); ``report.html`` in ``out``."""

    advice: AdviseResult
    extra: str
    page: Path

    def markdown(self) -> str:
        return self.advice.markdown() + self.extra

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the page and the report's markdown."""
        return {"report": str(self.page.resolve()), "markdown": self.markdown()}


def run_demo(cfg: DemoConfig) -> DemoResult:
    """Advise, retrieval, bake; returns the result (``report.html`` and ``report.md`` written in
    ``out``). A failed run leaves no empty ``out``."""
    t0 = time.perf_counter()
    for flag, text in (("text", cfg.text), ("heldout_text", cfg.second_text())):
        if text:  # a missing text is one line naming its flag, before the model downloads
            corpus.source_files(text, name=flag)
    resolve(cfg.model)  # a bad --model is one line, before any progress is printed
    with outputs.claimed(cfg.out, "demo"):  # a second demo on this --out is refused before any check reads it
        check_attention_files(cfg.out)  # every file advise reads from --out, before the model loads
        plan = preflight_advise(cfg)
        if cfg.bake:  # the baked checkpoint's size is known: the disk is checked before the long work
            need = preflight.checkpoint_bytes(cfg.model)
            preflight.check_space("out", cfg.out, need, f"{BAKED_DIR}/, the baked checkpoint (float32 weights)")
        if cfg.workers > 1 or cfg.ray_address is not None:
            distributed.preflight_ray(cfg)  # workers within the CPUs, the address answering as a Ray head
        return _demo(cfg, plan, t0)


def _demo(cfg: DemoConfig, plan: AdvisePlan, t0: float) -> DemoResult:
    with outputs.output_folder(
        cfg.out, replace=DEMO_OUTPUTS if cfg.overwrite else (), writer="demo", own=DEMO_OUTPUTS
    ) as out:
        _stage(t0, f"loading {cfg.model}")  # after the lock: a second demo on this --out is refused first
        model, _ = load_model(cfg.model, **cfg.load_args())
        _stage(t0, f"advising for {cfg.length} tokens (trained to {plan.trained})")
        with distributed.scoring_on_ray(cfg):  # --workers/--ray-address: advise's forwards on Ray workers
            result = advise(plan, model, out)
        _stage(t0, "shipping the recommendation" if cfg.bake else "writing the report")
        extra = ["", *retrieval(result.evidence), *ship(cfg, plan, result, out)]
        extra.append(f"Total time: {time.perf_counter() - t0:.0f} s ({torch.get_num_threads()} CPU threads).")
        text = "\n".join(extra) + "\n"
        write_advice(result, out, text)
    _stage(t0, f"done: {out / 'report.html'}")
    return DemoResult(result, text, out / "report.html")
