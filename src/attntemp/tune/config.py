"""``attntemp tune``'s config and its plan: every fact the run needs, worked out once before the
model loads (the trained length, the held-out lengths and the notes on those left out, the second
text and its documents, the needles that fit) by :func:`preflight_tune` and handed to
:func:`attntemp.tune.runner.run_tune` whole; and the tuners' options carved from the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..evaluate import corpus, limits
from ..evaluate.corpus import HELDOUT_FOR_STDLIB, Document, heldout_windows
from ..evaluate.tasks import TASKS, EvalOptions
from ..hf import introspect, preflight
from ..hf.learnable import LEARNED_SCHEDULES
from ..hf.rope_scaling import SCALINGS
from ..ops.spec import GRANULARITIES, LAYER_TYPES
from ..utils import checks, options
from ..utils.options import option
from .entropy import TARGETS, EntropyOptions
from .evidence import pick_check_lengths
from .gradient import ROPE_FACTORS, ROPE_TEMPERATURES, GradientOptions
from .resume import check_resume, check_tune_out, settings
from .search import SEARCH_OBJECTIVES, SearchOptions
from .train import TrainOptions

TUNE_METHODS = ("search", "gradient")
TEXT_FREE = ("passkey",)  # tasks whose prompts do not come from the text: not scored again on the second one
OBJECTIVES = (*SEARCH_OBJECTIVES, "entropy")
GRADIENT_OBJECTIVES = ("perplexity", "key_tokens", "needles")  # the next-token loss on all / key / answer tokens


@dataclass(frozen=True, kw_only=True)
class TuneConfig(EvalOptions):
    """``attntemp tune`` and :func:`run_tune`: a TemperatureSpec for one model and length."""

    out: str = option(help="output folder (spec.json, evidence.md, evidence.json)")
    overwrite: bool = option(False, "replace the spec.json and evidence an earlier tune wrote in --out")
    length: int = option(1024, "tokens per window to tune at")
    granularity: str = option("global", f"one m for the model, per layer or per head: {', '.join(GRANULARITIES)}")
    objective: str = option(
        "perplexity",
        f"what to optimise: {', '.join(OBJECTIVES)}; with --method search: perplexity, passkey, key_tokens or "
        "needles tune one global m, entropy matches per layer/head (label-free); --method gradient: the next-token "
        "loss on all tokens (perplexity), key tokens only (key_tokens) or the needles' answers (needles)",
    )
    rope: str = option("none", f"RoPE extension: {', '.join(SCALINGS)} (s = length / trained length)")
    method: str = option(
        "search", "search (1-D search, or entropy matching) or gradient (per-head m by next-token loss, weights frozen)"
    )
    tasks: tuple[str, ...] = option(("perplexity", "passkey"), "evidence tasks, comma list", parse=options.names)
    steps: int = option(60, "gradient steps (--method gradient)")
    target: str = option(
        "entropy", f"--objective entropy: what to hold at its trained-length value: {', '.join(TARGETS)}"
    )
    schedule: str | None = option(
        None,
        "gradient: also learn a slope per head, log_length (ln m = a + b ln(max(1, n / L0))), or the slope "
        "alone, log_length_slope (a = 0: nothing changes up to L0): one spec for every length",
    )
    lengths: tuple[int, ...] = option(
        (), "gradient: more lengths to train on besides --length, comma list", parse=options.ints
    )
    rope_factors: str = option(
        "off",
        "gradient: learn: also learn one RoPE factor per rotary pair (LongRoPE's long_factor, started from "
        "--rope: none, linear, ntk or yarn); the spec's rope becomes longrope, unchanged up to the trained length",
    )
    rope_temperature: str = option(
        "learn",
        f"with --rope-factors learn, the temperature: {', '.join(ROPE_TEMPERATURES)} (learned jointly at "
        "--granularity/--schedule; m = 1; LongRoPE's fixed attention_factor sqrt(1 + ln s / ln L0))",
    )
    layer_types: tuple[str, ...] = option(
        (),
        f"temper only these layer types, comma list of {', '.join(LAYER_TYPES)} (Gemma 3's global layers: "
        "full_attention); the others keep m = 1 (default: every layer)",
        parse=options.names,
    )
    bracket: tuple[float, ...] = option((0.5, 2.5), "search: the range of m, LO,HI", parse=options.floats)
    grid: int = option(9, "search: log-spaced points that bracket the optimum (one batched pass)")
    iters: int = option(8, "search: golden-section steps in ln m after the grid")
    check_lengths: tuple[int, ...] | None = option(
        None,
        "held-out lengths to check the tuned spec at, comma list ('' for none) (default: the trained "
        "length, half and twice --length)",
        parse=options.ints,
    )
    heldout_text: str | None = option(
        None,
        "a second text every spec is also scored on, whole (no tuner saw any of it): stdlib, gutenberg:<book>, "
        f"package:<name>, a file or a folder, or 'none' (default: {HELDOUT_FOR_STDLIB} when --text is stdlib, "
        "else stdlib)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.positive_int("length", self.length)
        checks.choice("granularity", self.granularity, GRANULARITIES)
        checks.choice("objective", self.objective, OBJECTIVES)
        checks.choice("rope", self.rope, SCALINGS)
        checks.choice("method", self.method, TUNE_METHODS)
        checks.positive_int("steps", self.steps)
        checks.choice("target", self.target, TARGETS)
        if self.target != "entropy" and self.objective != "entropy":
            raise ValueError(
                f"target={self.target!r} is not allowed with objective={self.objective!r}: it is what entropy "
                "matching holds; add objective='entropy' or leave it out"
            )
        for i, n in enumerate(self.lengths):
            checks.positive_int(f"lengths[{i}]", n)
        if self.schedule is not None:
            checks.choice("schedule", self.schedule, LEARNED_SCHEDULES)
        if (self.schedule or self.lengths) and self.method != "gradient":
            raise ValueError(
                f"schedule={self.schedule!r} and lengths={list(self.lengths)} are learned by gradient "
                "tuning; add method='gradient' (--method gradient)"
            )
        self._check_rope_factors()
        checks.positive_int("iters", self.iters)
        if checks.positive_int("grid", self.grid) < 3:
            raise ValueError(f"grid={self.grid} is not allowed; expected an integer >= 3")
        if len(self.bracket) != 2 or not 0 < self.bracket[0] < self.bracket[1]:
            raise ValueError(f"bracket={self.bracket} is not allowed; expected two numbers 0 < LO < HI")
        for i, n in enumerate(self.check_lengths or ()):
            checks.positive_int(f"check_lengths[{i}]", n)
        for i, t in enumerate(self.tasks):
            checks.choice(f"tasks[{i}]", t, TASKS)
        for i, t in enumerate(self.layer_types):
            checks.choice(f"layer_types[{i}]", t, LAYER_TYPES)
        if self.layer_types and self.objective == "entropy":
            raise ValueError(
                f"layer_types={list(self.layer_types)} with objective='entropy' is not allowed: entropy matching "
                "sets every layer's m; tune by search or gradient"
            )
        if not self.tasks:
            raise ValueError("tasks is empty; give at least one evidence task, e.g. perplexity")
        if corpus.same_source(self.second_text(), self.text):
            raise ValueError(
                f"heldout_text={self.heldout_text!r} is --text itself, whose tuning pool the tuner saw; give "
                "another text (or 'none')"
            )
        if self.method == "gradient" and self.objective not in GRADIENT_OBJECTIVES:
            raise ValueError(
                f"objective={self.objective!r} with method='gradient' is not allowed: gradient tuning "
                "minimises next-token loss, on every token (perplexity), key tokens (key_tokens) or the "
                "needles' answers (needles); for passkey or needle use "
                "method='search' (global), for entropy matching method='search' with any granularity"
            )
        if self.method == "search" and self.granularity != "global" and self.objective != "entropy":
            raise ValueError(
                f"granularity={self.granularity!r} with method='search' tunes by entropy "
                f"matching; use objective='entropy' (got {self.objective!r}) or method='gradient'"
            )

    def second_text(self) -> str | None:
        """The second text (:attr:`heldout_text`, its default filled in), or None for 'none'."""
        if self.heldout_text is None:
            return HELDOUT_FOR_STDLIB if self.text == "stdlib" else "stdlib"
        return None if self.heldout_text == "none" else self.heldout_text

    def gradient_options(self, rope: dict[str, Any] | None) -> GradientOptions:
        """``--method gradient``'s options: the tuning lengths, the training, the RoPE factors."""
        train = TrainOptions(
            steps=self.steps,
            granularity=self.granularity,
            schedule=self.schedule,
            rope=rope,
            progress=self.progress,
            settings=settings(self),
        )
        lengths = (self.length, *self.lengths)
        return GradientOptions(
            lengths=lengths, train=train, rope_factors=self.rope_factors, rope_temperature=self.rope_temperature
        )

    def search_options(self, rope: dict[str, Any] | None) -> SearchOptions:
        """The 1-D search's options: the objective at ``length``, the bracket, grid and steps."""
        lo, hi = self.bracket
        return SearchOptions(
            length=self.length,
            objective=self.objective,
            rope=rope,
            bracket=(lo, hi),
            grid=self.grid,
            iters=self.iters,
            progress=self.progress,
        )

    def entropy_options(self, rope: dict[str, Any] | None) -> EntropyOptions:
        """Entropy matching's options: the granularity and the target held."""
        return EntropyOptions(granularity=self.granularity, rope=rope, target=self.target, progress=self.progress)

    def _check_rope_factors(self) -> None:
        checks.choice("rope_factors", self.rope_factors, ROPE_FACTORS)
        checks.choice("rope_temperature", self.rope_temperature, ROPE_TEMPERATURES)
        if self.rope_factors == "off":
            if self.rope_temperature != "learn":
                raise ValueError(
                    f"rope_temperature={self.rope_temperature!r} sets the temperature beside learned RoPE factors; "
                    "add rope_factors='learn' (--rope-factors learn)"
                )
            return
        if self.method != "gradient":
            raise ValueError(
                f"rope_factors={self.rope_factors!r} is learned by gradient tuning; add method='gradient', "
                f"got method={self.method!r}"
            )
        if self.rope == "dynamic":
            raise ValueError(
                "rope='dynamic' with rope_factors='learn' is not allowed: its frequencies change with the "
                "length, so no one long_factor starts from it; allowed: none, linear, ntk, yarn"
            )
        if self.granularity != "global" and self.rope_temperature != "learn":
            raise ValueError(
                f"granularity={self.granularity!r} is a learned temperature's; with rope_temperature="
                f"{self.rope_temperature!r} none is learned (use rope_temperature='learn', or leave it out)"
            )
        if self.schedule is not None and self.rope_temperature != "learn":
            raise ValueError(
                f"schedule={self.schedule!r} is a learned temperature; with rope_temperature="
                f"{self.rope_temperature!r} none is learned (use rope_temperature='learn')"
            )


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
