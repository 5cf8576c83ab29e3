"""``attntemp advise``'s plan: every fact the run needs, worked out once before the model loads
(the trained length, the lengths, the needles that fit, the texts, the added specs) by
:func:`preflight_advise` and handed to :func:`attntemp.advise.run.run_advise` whole. The flags
and their checks are :mod:`.config` (torch-free)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..evaluate import corpus, limits, multikey, needles
from ..evaluate.score import check_store
from ..evaluate.task_base import NEEDLES_PER_FORWARD, EvalContext, eval_context, tuning_context
from ..hf import preflight
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from .config import LEARN_WINDOWS, RETRIEVAL_KEYS, SPARE, STORE, AdviseConfig
from .race import MULTIKEY_TASK, RETRIEVAL_TASK


@dataclass(frozen=True)
class Retrieval:
    """The retrieval axis: its task (``multikey``: ``keys`` keys per prefilled haystack, each asked
    from its cache; ``passkey``: one prompt per prefill; None: no axis), prefills per race window,
    and why that task (with ``--retrieval-keys`` left out, a probe at L0 decides:
    :func:`attntemp.advise.run.settle_retrieval`)."""

    task: str | None
    keys: int = 1
    per_window: int = 0
    why: str = ""
    auto: bool = False  # the task waits on the probe

    def race_pool(self, tctx: EvalContext, windows: int) -> EvalContext:
        """The race's retrieval prefills on the tuning pool: ``per_window`` per race window."""
        n = windows * self.per_window
        return (
            replace(tctx, n_docs=n, needles_per_forward=self.keys)
            if self.task == MULTIKEY_TASK
            else replace(tctx, trials=n)
        )

    def confirm_pool(self, ctx: EvalContext, trials: int) -> EvalContext:
        """The confirmation's: ``trials`` passkey prompts, or haystacks holding at least ``trials`` keys."""
        if self.task == MULTIKEY_TASK:
            return replace(ctx, n_docs=self.confirm_pool_size(trials), needles_per_forward=self.keys)
        return replace(ctx, trials=trials)

    def confirm_pool_size(self, trials: int) -> int:
        """Prefills the confirmation answers ``trials`` with: one per passkey prompt, one per haystack."""
        return math.ceil(trials / self.keys) if self.task == MULTIKEY_TASK else trials

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "keys_per_prefill": self.keys,
            "prefills_per_window": self.per_window,
            "why": self.why,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Retrieval:
        """The axis as ``evidence.json``'s ``question.retrieval`` holds it."""
        return cls(d["task"], d["keys_per_prefill"], d["prefills_per_window"], d["why"])


def plan_retrieval(cfg: AdviseConfig, tok: Any, trained: int) -> Retrieval:
    """The retrieval axis before the model loads: none within L0 or with no prefills per window;
    passkey prompts for ``--retrieval-keys 1``; else multikey with the keys asked for (refused
    where they do not fit ``--length``), or by default as many as fit the probe's length (L0) up
    to :data:`RETRIEVAL_KEYS`, the task left to the probe."""
    if cfg.length <= trained or not cfg.retrieval_per_window:
        return Retrieval(None)
    if cfg.retrieval_keys == 1:
        return Retrieval(
            RETRIEVAL_TASK, 1, cfg.retrieval_per_window, "--retrieval-keys 1: one passkey prompt per prefill"
        )
    if cfg.retrieval_keys is not None:
        if multikey.haystack_min_tokens(tok, cfg.retrieval_keys) > cfg.length:
            raise ValueError(
                f"retrieval_keys={cfg.retrieval_keys} is not allowed at length={cfg.length}: the facts and a "
                f"question take {multikey.haystack_min_tokens(tok, cfg.retrieval_keys)} tokens; give fewer keys"
            )
        why = f"--retrieval-keys {cfg.retrieval_keys}: {cfg.retrieval_keys} keys per prefilled haystack"
        return Retrieval(MULTIKEY_TASK, cfg.retrieval_keys, cfg.retrieval_per_window, why)
    k = RETRIEVAL_KEYS
    while k > 1 and multikey.haystack_min_tokens(tok, k) > trained:
        k -= 1
    if k < 2:
        return Retrieval(
            RETRIEVAL_TASK, 1, cfg.retrieval_per_window, f"two keys do not fit the trained length {trained}"
        )
    return Retrieval(MULTIKEY_TASK, k, cfg.retrieval_per_window, auto=True)


@dataclass(frozen=True)
class AdvisePlan:
    """What the run consumes: worked out once by :func:`preflight_advise`."""

    cfg: AdviseConfig
    trained: int  # L0
    model_type: str | None
    short_lengths: tuple[int, ...]  # below L0 (and below N): where a candidate's cost is measured
    check_lengths: tuple[int, ...]  # longer lengths the survivors are confirmed at
    needles: int  # needles per forward that fit the shortest length they are scored at (0: none fit)
    second_text: str | None
    tok: Any
    spare: int = SPARE  # windows past the race's own that the tuned m is searched on
    config: dict[str, Any] | None = None  # the model's config, read once: the engines' settings fill from it
    added: tuple[Any, ...] = ()  # the --add-spec specs, loaded and checked against the model
    retrieval: Retrieval = Retrieval(None)  # the retrieval axis (its task settled by a probe when auto)

    @property
    def extends(self) -> bool:
        return self.cfg.length > self.trained

    @property
    def scale(self) -> float:
        """s = N / L0, the RoPE scale factor at the serving length: computed here alone."""
        return self.cfg.length / self.trained


def short_lengths(length: int, trained: int) -> tuple[int, ...]:
    """L0 / 4, L0 / 2 and L0, those below ``length`` (at least 32 tokens each)."""
    return tuple(n for n in sorted({trained // 4, trained // 2, trained}) if 32 <= n < length)


def fitting_needles(tok: Any, length: int, wanted: int) -> int:
    """As many needles as fit ``length`` tokens, up to ``wanted`` (0 when not even one fits)."""
    k = wanted
    while k > 0 and needles.min_tokens(tok, k) > length:
        k -= 1
    return k


def preflight_advise(cfg: AdviseConfig, model: Any = None, tok: Any = None) -> AdvisePlan:
    """Everything checked before the model loads (each refusal names its flag): ``out``, the texts,
    the trained length, every length long enough for its tasks and within memory, the windows the
    text must hold."""
    if not cfg.status:  # --status writes nothing: a finished run's folder is what it reads
        outputs.check_out(cfg.out, cfg.own_outputs(), overwrite=cfg.overwrite)
    try:  # a file of another program under the store's name: refused before the model loads
        check_store(Path(cfg.out) / STORE)
    except ValueError as exc:
        raise ValueError(f"out={cfg.out!r}: {exc}; move it away or give another out folder") from None
    config = model.config.to_dict() if model is not None else preflight.source_config(cfg.model)
    tok = tok if tok is not None else preflight.load_tokenizer(cfg.model)
    corpus.source_files(cfg.text, name="text")
    if cfg.second_text():
        corpus.source_files(cfg.second_text() or "", name="heldout_text")
    trained = preflight.source_trained_length(config) or cfg.length
    check = _check_lengths(cfg)
    limits.check_lengths("length", [cfg.length], [cfg.objective], tok, indexed=False, opts=cfg, trained=trained)
    _check_memory(cfg, config and preflight.text_part(config), check)
    if cfg.learn_steps:
        text = config and preflight.text_part(config)
        preflight.check_forward("learn_steps", cfg.learn_steps, text, 1, cfg.length, grad=True)
    limits.check_evaluator(cfg, tok)
    _check_windows(cfg, tok, trained)
    k = fitting_needles(tok, min(trained, cfg.length), cfg.needles_per_forward or NEEDLES_PER_FORWARD)
    model_type = (config or {}).get("model_type")
    lengths = short_lengths(cfg.length, trained)
    added = _added_specs(cfg, config, trained)
    retrieval = plan_retrieval(cfg, tok, trained)
    if cfg.shared_prefill and retrieval.task is None:
        raise ValueError(
            f"shared_prefill=True is not allowed at length={cfg.length}: within the trained length {trained} the "
            "race has no retrieval axis whose prefill it could share; leave it out"
        )
    if cfg.shared_prefill and retrieval.task != MULTIKEY_TASK:
        raise ValueError(shared_refused(cfg, retrieval.why))
    return AdvisePlan(
        cfg, trained, model_type, lengths, check, k, cfg.second_text(), tok, config=config or None, added=added,
        retrieval=retrieval,
    )  # fmt: skip


def shared_refused(cfg: AdviseConfig, why: str) -> str:
    """The refusal of ``shared_prefill`` where the retrieval axis is not multikey haystacks (``why``)."""
    return (
        f"shared_prefill=True is not allowed at length={cfg.length}: it needs a multikey retrieval axis "
        f"(haystacks of several keys), and {why}; give retrieval_keys=K (2 or more), or leave it out"
    )


def _added_specs(cfg: AdviseConfig, config: dict[str, Any] | None, trained: int) -> tuple[Any, ...]:
    """Each --add-spec file loaded and checked against the model (its heads, its rotary dim, the L0
    its RoPE states), before the model loads."""
    specs = []
    for path in cfg.add_spec:
        try:
            spec = TemperatureSpec.load(path)
        except (ValueError, FileNotFoundError) as exc:
            raise ValueError(str(exc).replace("spec=", "add_spec=", 1)) from None
        preflight.check_spec("add_spec", path, spec, config)
        l0 = spec.rope.l0 or dict(spec.schedule_params).get("trained_len")
        if l0 is not None and int(l0) != trained:
            raise ValueError(
                f"add_spec={path!r} is not allowed: it states a trained length of {l0}, "
                f"and the model was trained to {trained}; expected a spec tuned for this model"
            )
        specs.append(spec)
    return tuple(specs)


def _check_memory(cfg: AdviseConfig, text: dict[str, Any] | None, check: tuple[int, ...]) -> None:
    """One row at each length, then ``batch_size`` rows at the longest, and the passkey prompts the
    confirmation answers, within memory (each refusal naming the flag that sets the size)."""
    limits.check_length_memory("length", [cfg.length], text, 1, indexed=False)
    if check:
        limits.check_length_memory("check_lengths", list(check), text, 1)
    preflight.check_forward(
        "batch_size", cfg.batch_size, text, cfg.batch_size, max((cfg.length, *check)), head_chunk=preflight.LOGIT_CHUNK
    )
    name, prompts = ("retrieval_prompts", cfg.retrieval_prompts) if cfg.retrieval_prompts else ("trials", cfg.trials)
    preflight.check_prompts(name, prompts, prompts, cfg.length)


def _check_windows(cfg: AdviseConfig, tok: Any, trained: int) -> None:
    """The text holds the windows the run scores: the race's (``race_windows`` and the spare ones) in
    its tuning pool, the confirmation's (``n_docs``) in its evaluation pool, at ``length`` (needles:
    on a haystack, so at the longest length below L0 where the cost is measured: it gives fewest)."""
    shorts = short_lengths(cfg.length, trained)
    n = cfg.length if cfg.objective != "needles" else max(shorts, default=None)
    if n is None:
        return
    ctx = eval_context(cfg, trained, tuning=True)
    learning = LEARN_WINDOWS if cfg.learn_steps and cfg.length > trained else 0
    learnt = f" and {learning} that --learn-steps trains on" if learning else ""
    pools = (
        ("race_windows", cfg.race_windows, cfg.race_windows + SPARE + learning, tuning_context(ctx).docs, "tuning",
         f" ({cfg.race_windows} raced and {SPARE} spare ones, where YaRN's m is searched{learnt})"),
        ("n_docs", cfg.n_docs, cfg.n_docs, ctx.docs, "evaluation", " (the confirmation's)"),
    )  # fmt: skip
    for name, value, need, docs, pool, why in pools:
        got = corpus.windows_held(tok, n, need, docs)
        if got < need:
            raise ValueError(
                f"{name}={value} is not allowed: the run needs {need} windows of {n} tokens{why} from the "
                f"{pool} pool of text={cfg.text!r}, which gives {got}; give a longer text, or ask for fewer windows "
                "or a shorter length"
            )


def _check_lengths(cfg: AdviseConfig) -> tuple[int, ...]:
    """The held-out lengths: as given (each above --length), 1.5 x --length by default, none for 0."""
    lengths = cfg.check_lengths if cfg.check_lengths is not None else (round(1.5 * cfg.length),)
    for i, n in enumerate(lengths):
        if n <= cfg.length:
            raise ValueError(
                f"check_lengths[{i}]={n} is not allowed; expected a length above --length={cfg.length}, or 0 for none"
            )
    return tuple(lengths)
