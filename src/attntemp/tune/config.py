"""``attntemp tune``'s config: its flags, help and checks, importable without torch (``--help``
builds from it). What the run needs is worked out from it by
:func:`attntemp.tune.plan.preflight_tune`, which carves the tuners' options from it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..evaluate import corpus
from ..evaluate.corpus import HELDOUT_FOR_STDLIB
from ..evaluate.task_base import TASK_NAMES, EvalOptions
from ..ops.rope.scalings import SCALINGS
from ..ops.schedules import LEARNED_SCHEDULES
from ..ops.spec import GRANULARITIES, LAYER_TYPES
from ..utils import checks, options
from ..utils.options import option

TUNE_METHODS = ("search", "gradient")
TEXT_FREE = ("passkey",)  # tasks whose prompts do not come from the text: not scored again on the second one
SEARCH_OBJECTIVES = ("perplexity", "passkey", "key_tokens", "needles")  # tasks whose objective a search optimises
OBJECTIVES = (*SEARCH_OBJECTIVES, "entropy")
# entropy matching's targets (:data:`attntemp.tune.entropy.TARGETS`' names: a test holds them to it)
TARGET_NAMES = ("entropy", "norm_entropy", "entropy_growth", "max_weight")
ROPE_FACTORS = ("off", "learn")  # learn: LongRoPE's long_factor, one per rotary pair, by gradient
ROPE_TEMPERATURES = ("learn", "none", "longrope")  # with learned factors: m learned, m = 1, LongRoPE's scale
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
        "entropy", f"--objective entropy: what to hold at its trained-length value: {', '.join(TARGET_NAMES)}"
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
        checks.choice("target", self.target, TARGET_NAMES)
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
            checks.choice(f"tasks[{i}]", t, TASK_NAMES)
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
