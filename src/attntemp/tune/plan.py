"""``attntemp tune``'s plan: every fact the run needs, worked out once before the model loads (the
trained length, the held-out lengths and the notes on those left out, the second text and its
documents, the needles that fit) by :func:`preflight_tune` and handed to
the runner whole, and the tuners' options carved from the config
(:func:`gradient_options`, :func:`search_options`, :func:`entropy_options`) for
:func:`attntemp.tune.runner.run_tune`. The flags and their checks are :mod:`.config`
(torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..evaluate import corpus, limits
from ..evaluate.corpus import Document, heldout_windows
from ..evaluate.tasks import TASKS
from ..hf import introspect, preflight
from .config import TEXT_FREE, TuneConfig
from .entropy import EntropyOptions
from .evidence import pick_check_lengths
from .gradient import GradientOptions
from .resume import check_resume, check_tune_out, settings
from .search import SearchOptions
from .train import TrainOptions


def second_text(cfg: TuneConfig, tok: Any, held_out: tuple[int, ...]) -> SecondText | None:
    """The second text (``heldout_text``), loaded, for the tasks that read the text (None without
    one); checked before any work to hold the windows its scoring takes, at the tuning length and
    each held-out one."""
    source, tasks = cfg.second_text(), tuple(t for t in cfg.tasks if t not in TEXT_FREE)
    if source is None or not tasks:
        return None
    docs = tuple(corpus.load_text(source, name="heldout_text"))
    for n in (cfg.length, *held_out):
        try:
            heldout_windows(tok, n, n=cfg.n_docs, docs=docs, n_name="n_docs")
        except ValueError:
            raise ValueError(
                f"heldout_text={source!r} is not allowed: it is too short to score n_docs={cfg.n_docs} window(s) of "
                f"{n} tokens on (the tuning length and each held-out one); give a longer text, or 'none'"
            ) from None
    return SecondText(source, tasks, docs)


def held_out_lengths(cfg: TuneConfig, trained: int, tok: Any) -> tuple[tuple[int, ...], list[str]]:
    """The held-out lengths (:func:`~.evidence.pick_check_lengths`) and a note per one left out: a
    tuning length (scored already), or a default length too short for an evidence task."""
    tuned = (cfg.length, *cfg.lengths)
    picked = pick_check_lengths(cfg.check_lengths, tuned, trained)
    given = cfg.check_lengths if cfg.check_lengths is not None else (trained, min(tuned) // 2, 2 * max(tuned))
    notes = [f"held-out length {n} left out: it is a tuning length, scored there" for n in set(given) & set(tuned)]
    if cfg.check_lengths is not None:
        return picked, notes
    kept = []
    for n in picked:
        try:
            limits.check_lengths("check_lengths", [n], cfg.tasks, tok, opts=cfg, trained=trained)
            kept.append(n)
        except ValueError as exc:  # "check_lengths[0]=150 is too short for passkey: it needs ..."
            notes.append(f"default held-out length {n} left out: {str(exc).partition(' is ')[2]}")
    return tuple(kept), notes


def preflight_tune(cfg: TuneConfig, model=None, tok=None) -> TunePlan:
    """Before the model loads: ``out`` writable, the text there (read once, later, by
    :func:`~attntemp.evaluate.tasks.eval_context`: a text of too few documents for two pools is cut
    in halves), every length (tuning, extra and held-out) long enough for the tasks that score at it
    and within the memory available; returns the plan: the tokenizer, the needles fitted, L0, the
    held-out lengths and the second text, each worked out here once."""
    check_tune_out(cfg)
    config = model.config.to_dict() if model is not None else preflight.source_config(cfg.model)
    tok = tok if tok is not None else preflight.load_tokenizer(cfg.model)
    cfg = limits.fit_needles(cfg, (cfg.length, *cfg.lengths), tok)
    check_resume(cfg)
    corpus.source_files(cfg.text, name="text")
    if cfg.second_text() is not None:
        corpus.source_files(cfg.second_text() or "", name="heldout_text")
    objective = [cfg.objective] if cfg.objective in TASKS else []
    trained = introspect.trained_length(model) if model is not None else preflight.source_trained_length(config)
    sizes: dict[str, Any] = {"opts": cfg, "trained": trained}  # key_tokens' K and n, the needles' count
    limits.check_lengths("length", [cfg.length], [*cfg.tasks, *objective], tok, indexed=False, **sizes)
    limits.check_lengths("lengths", cfg.lengths, [*cfg.tasks, *objective], tok, **sizes)
    limits.check_evaluator(cfg, tok)
    if cfg.rope_factors == "learn" and trained and min((cfg.length, *cfg.lengths)) <= trained + 1:
        raise ValueError(
            f"length={min((cfg.length, *cfg.lengths))} with rope_factors='learn' is not allowed: the factors act "
            f"only past the trained length {trained}; expected every tuning length > {trained + 1}"
        )
    pick_check_lengths(cfg.check_lengths, (cfg.length, *cfg.lengths), trained or cfg.length)  # each as typed
    limits.check_lengths("check_lengths", cfg.check_lengths or (), cfg.tasks, tok, **sizes)
    held_out, notes = held_out_lengths(cfg, trained or cfg.length, tok)
    text = config and preflight.text_part(config)
    rows = limits.forward_rows(cfg.batch_size, cfg.n_docs, cfg.trials, 3)  # m = 1, YaRN's, the tuned one
    limits.check_length_memory(
        "length", [cfg.length], text, rows, cfg.trials, grad=cfg.method == "gradient", indexed=False
    )
    limits.check_length_memory("lengths", cfg.lengths, text, rows, cfg.trials, grad=cfg.method == "gradient")
    limits.check_length_memory("check_lengths", held_out, text, rows, cfg.trials)
    return TunePlan(cfg, tok, trained, held_out, tuple(notes), second_text(cfg, tok, held_out))


@dataclass(frozen=True)
class SecondText:
    """The second text every spec is also scored on, whole: its source, the tasks that read it and
    its documents (loaded once, by the preflight)."""

    source: str
    tasks: tuple[str, ...]
    docs: tuple[Document, ...]


@dataclass(frozen=True)
class TunePlan:
    """What :func:`attntemp.tune.runner.run_tune` consumes: worked out once by :func:`preflight_tune`."""

    cfg: TuneConfig  # the needles per forward fitted to the tuning lengths
    tok: Any
    trained: int | None  # L0; None when the config could not be read before the load (read off the model then)
    held_out: tuple[int, ...]  # the held-out lengths the tuned spec is checked at
    held_out_notes: tuple[str, ...]  # a note per length left out
    second: SecondText | None  # None: no second text (heldout_text='none', or only text-free tasks)

    @property
    def lengths(self) -> tuple[int, ...]:
        """The tuning lengths: ``length`` first, then ``lengths``."""
        return (self.cfg.length, *self.cfg.lengths)

    def with_trained(self, trained: int) -> TunePlan:
        """The plan with L0 read off the loaded model, where the preflight could not read it."""
        if self.trained is not None:
            return self
        held_out, notes = held_out_lengths(self.cfg, trained, self.tok)
        return TunePlan(self.cfg, self.tok, trained, held_out, tuple(notes), self.second)


def gradient_options(cfg: TuneConfig, rope: dict[str, Any] | None) -> GradientOptions:
    """``--method gradient``'s options: the tuning lengths, the training, the RoPE factors."""
    train = TrainOptions(
        steps=cfg.steps,
        granularity=cfg.granularity,
        schedule=cfg.schedule,
        rope=rope,
        progress=cfg.progress,
        settings=settings(cfg),
    )
    lengths = (cfg.length, *cfg.lengths)
    return GradientOptions(
        lengths=lengths, train=train, rope_factors=cfg.rope_factors, rope_temperature=cfg.rope_temperature
    )


def search_options(cfg: TuneConfig, rope: dict[str, Any] | None) -> SearchOptions:
    """The 1-D search's options: the objective at ``length``, the bracket, grid and steps."""
    lo, hi = cfg.bracket
    return SearchOptions(
        length=cfg.length,
        objective=cfg.objective,
        rope=rope,
        bracket=(lo, hi),
        grid=cfg.grid,
        iters=cfg.iters,
        progress=cfg.progress,
    )


def entropy_options(cfg: TuneConfig, rope: dict[str, Any] | None) -> EntropyOptions:
    """Entropy matching's options: the granularity and the target held."""
    return EntropyOptions(granularity=cfg.granularity, rope=rope, target=cfg.target, progress=cfg.progress)
