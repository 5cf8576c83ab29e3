"""``attntemp advise``'s config and its plan: every fact the run needs, worked out once before
the model loads (the trained length, the lengths, the needles that fit, the texts) and handed
to :func:`attntemp.advise.run.run_advise` whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..evaluate import corpus, limits, needles
from ..evaluate.corpus import HELDOUT_FOR_STDLIB
from ..evaluate.score import check_store
from ..evaluate.sweep.store import SweepConfig
from ..evaluate.task_base import NEEDLES_PER_FORWARD, EvalOptions, eval_context, tuning_context
from ..hf import preflight
from ..ops.spec import TemperatureSpec
from ..ship.engines import ENGINES
from ..utils import checks, deprecation, options, outputs
from ..utils.options import option, reuse

REFERENCE_ENGINE = "transformers"  # the engine whose reading defines what a spec means

RACE_OBJECTIVES = ("key_tokens", "needles", "perplexity")  # what the race judges at the serving length
ADVISE_RESULTS = ("evidence.json", "report.md", "report.html", "tradeoff.png", "diagnosis.png", "spec.json")
# advise's own files (replaced with --overwrite); scores.db and attention_<L>.json are resumed, never replaced
ADVISE_OUTPUTS = outputs.Outputs(ADVISE_RESULTS)
STORE = "scores.db"  # every scored (spec, task, length, windows): a rerun resumes from it
SPARE = 2  # windows of the tuning pool past the race's own, where YaRN's m is searched
LEARN_WINDOWS = 4  # windows past those that --learn-steps trains on (advise.learned)


@dataclass(frozen=True, kw_only=True)
class AdviseConfig(EvalOptions):
    """``attntemp advise`` and :func:`attntemp.advise.run.run_advise`."""

    length: int = option(help="the length the model will serve, in tokens")
    engine: str | None = option(
        None,
        f"the engine that will serve it: {', '.join(ENGINES)} (default: every engine, one recommendation each, "
        "transformers' in spec.json); each is recommended only candidates it computes as meant",
    )
    objective: str = option(
        "key_tokens",
        "what the race judges at --length: key_tokens (perplexity on the tokens only distant context predicts), "
        "needles (keyed facts hidden in the text) or perplexity (all tokens past the trained length)",
    )
    heldout_text: str | None = option(
        None,
        f"a second text the survivors are confirmed on, or 'none' (default: {HELDOUT_FOR_STDLIB} when --text is "
        "stdlib, else stdlib)",
    )
    budget: int | None = option(
        None,
        "forward rows the race may spend (a row: one window of one spec at one length); default: no limit",
        parse=int,
    )
    max_short_cost: float = option(
        0.01, "the most a candidate may cost in all-token perplexity below the trained length (0.01: one per cent)"
    )
    retrieval_per_window: int = option(
        4,
        "passkey prompts per race window answered by greedy generation at --length (retrieval by generation, "
        "an axis of the race; --trials prompts confirm it); 0: no retrieval axis",
    )
    retrieval_prompts: int | None = option(
        None,
        "passkey prompts the confirmation answers by generation at --length (default: --trials); on a real model "
        "each is a prefill at --length",
        parse=int,
    )
    min_retrieval: float | None = option(
        None,
        "waive the retrieval comparison for a floor: a candidate leaves only when its share of passkeys found is "
        "below this for certain (default: it leaves when another finds more, for certain)",
        parse=float,
    )
    race_windows: int = option(16, "windows of the tuning pool the race may score")
    block: int = option(2, "windows per round of the race")
    min_windows: int = option(4, "windows scored before a candidate may leave the race")
    check_lengths: tuple[int, ...] | None = option(
        None,
        "longer held-out lengths the survivors are confirmed at, comma list (default: 1.5 x --length; 0 for none)",
        parse=options.ints,
        aliases=("--check-length",),
    )
    check_length: int | None = None  # deprecated (0.2.0): check_lengths=(n,), or () for 0; removed in 0.3.0
    tune_m: bool = option(True, "no candidate with YaRN's global m tuned first", flag="--no-tune", invert=True)
    learn_steps: int = option(
        0,
        "race three learned candidates too, each trained this many gradient steps on windows the race never "
        "scores: per-head m, per-head m past L0, and LongRoPE factors from YaRN's (a step: one window forward "
        "and backward at --length); 0: none",
    )
    add_spec: tuple[str, ...] = option(
        (), "spec files (comma list; e.g. from attntemp tune) raced as candidates beside the built-in ones",
        parse=options.names,
    )  # fmt: skip
    out: str = option("attntemp-advise", "output folder (scores.db: a rerun resumes from it)")
    overwrite: bool = option(False, "replace an earlier run's results in --out (its scores.db is kept and reused)")
    workers: int = reuse(SweepConfig, "workers")
    ray_address: str | None = reuse(SweepConfig, "ray_address")
    status: bool = option(
        False, "where a run with these flags stands, read from --out's scores.db alone: no forward, nothing written"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.positive_int("length", self.length)
        checks.positive_int("workers", self.workers)
        if self.engine is not None:
            checks.choice("engine", self.engine, ENGINES)
        checks.choice("objective", self.objective, RACE_OBJECTIVES)
        if self.budget is not None:
            checks.positive_int("budget", self.budget)
        checks.within("max_short_cost", self.max_short_cost, 0.0, 0.999)
        checks.int_within("retrieval_per_window", self.retrieval_per_window, 0, 64)
        checks.int_within("learn_steps", self.learn_steps, 0, 10000)
        if len(set(self.add_spec)) != len(self.add_spec):
            raise ValueError(f"add_spec={','.join(self.add_spec)!r} is not allowed: a file is given twice")
        if self.min_retrieval is not None:
            checks.within("min_retrieval", self.min_retrieval, 0.0, 1.0)
        if self.retrieval_prompts is not None:
            checks.positive_int("retrieval_prompts", self.retrieval_prompts)
        for name in ("race_windows", "block", "min_windows"):
            checks.positive_int(name, getattr(self, name))
        if self.race_windows < 2:
            raise ValueError(f"race_windows={self.race_windows} is not allowed; a paired interval needs at least 2")
        if self.min_windows > self.race_windows:
            raise ValueError(
                f"min_windows={self.min_windows} is not allowed; expected at most race_windows={self.race_windows}: "
                "no candidate could leave the race before its windows run out"
            )
        if self.check_length is not None:
            deprecation.warn("AdviseConfig(check_length=...)", "check_lengths=(n,), or () for none", stacklevel=4)
            object.__setattr__(self, "check_lengths", (self.check_length,) if self.check_length else ())
            object.__setattr__(self, "check_length", None)
        if self.check_lengths == (0,):
            object.__setattr__(self, "check_lengths", ())
        for i, n in enumerate(self.check_lengths or ()):
            checks.positive_int(f"check_lengths[{i}]", n)
        if self.status and not (Path(self.out) / STORE).is_file():
            raise ValueError(f"out={self.out!r} has no {STORE}: --status reads the store of a run with these flags")
        if self.heldout_text == "":
            raise ValueError(
                "heldout_text='' is not allowed; expected a text (stdlib, gutenberg:<book>, ...) or 'none'"
            )
        if corpus.same_source(self.second_text(), self.text):
            raise ValueError(
                f"heldout_text={self.heldout_text!r} is --text itself, whose windows the race and the confirmation "
                "score; give another text (or 'none')"
            )

    def own_outputs(self) -> outputs.Outputs:
        """What this command writes in ``out`` (the rule of docs/errors.md: only these are replaced)."""
        return ADVISE_OUTPUTS

    def second_text(self) -> str | None:
        """The second text, its default filled in; None for 'none'."""
        if self.heldout_text is None:
            return HELDOUT_FOR_STDLIB if self.text == "stdlib" else "stdlib"
        return None if self.heldout_text == "none" else self.heldout_text


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

    @property
    def extends(self) -> bool:
        return self.cfg.length > self.trained


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
    return AdvisePlan(
        cfg, trained, model_type, lengths, check, k, cfg.second_text(), tok, config=config or None, added=added
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
    preflight.check_forward("batch_size", cfg.batch_size, text, cfg.batch_size, max((cfg.length, *check)))
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


def served_by(cfg: AdviseConfig) -> tuple[str, ...]:
    """The engines advise recommends for: ``--engine``, else every engine (transformers first)."""
    return (cfg.engine,) if cfg.engine else (REFERENCE_ENGINE, *(e for e in ENGINES if e != REFERENCE_ENGINE))


from ..utils.deprecation import legacy_getattr  # noqa: E402 (the aliases come last)

__getattr__ = legacy_getattr(__name__)  # old names that warn: attntemp.utils.deprecation.RENAMED
