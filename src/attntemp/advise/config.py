"""The configs of ``attntemp advise`` and ``attntemp demo`` (advise's whole story on one model):
their flags, help, per-model defaults and checks, importable without torch (``--help`` builds from
them). What the run needs is worked out from a config by :func:`attntemp.advise.plan.preflight_advise`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..evaluate import corpus
from ..evaluate.corpus import HELDOUT_FOR_STDLIB
from ..evaluate.sweep.config import SweepConfig
from ..evaluate.task_base import MAX_NEEDLES, EvalOptions
from ..ship.engines import ENGINE_NAMES
from ..utils import checks, options, outputs
from ..utils.options import option, reuse

REFERENCE_ENGINE = "transformers"  # the engine whose reading defines what a spec means

RACE_OBJECTIVES = ("key_tokens", "needles", "perplexity")  # what the race judges at the serving length
ADVISE_RESULTS = ("evidence.json", "report.md", "report.html", "tradeoff.png", "diagnosis.png", "spec.json")
# advise's own files (replaced with --overwrite); scores.db and attention_<L>.json are resumed, never replaced
ADVISE_OUTPUTS = outputs.Outputs(ADVISE_RESULTS)
STORE = "scores.db"  # every scored (spec, task, length, windows): a rerun resumes from it
SPARE = 2  # windows of the tuning pool past the race's own, where YaRN's m is searched
LEARN_WINDOWS = 4  # windows past those that --learn-steps trains on (advise.learned)
RETRIEVAL_KEYS = 8  # keys per retrieval haystack by default (RULER's multi-key NIAH asks up to 4 of many)
SHARED_TASK = "multikey_keys"  # --shared-prefill: the haystacks' prefill scores their own text's key tokens too
SHARED_WORDS = (  # what the report says of --shared-prefill: which windows the race's objective was scored on
    " (`--shared-prefill`: the objective on the retrieval haystacks' own text, facts left out, read off the "
    "prefill that answers their questions; the confirmation scores it on windows of the evaluation pool)"
)


@dataclass(frozen=True, kw_only=True)
class AdviseConfig(EvalOptions):
    """``attntemp advise`` and :func:`attntemp.advise.run.run_advise`."""

    length: int = option(help="the length the model will serve, in tokens")
    engine: str | None = option(
        None,
        f"the engine that will serve it: {', '.join(ENGINE_NAMES)} (default: every engine, one recommendation each, "
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
        "retrieval prefills per race window at --length, each answered by greedy generation (retrieval by "
        "generation, an axis of the race): haystacks of --retrieval-keys keys, or passkey prompts; 0: no "
        "retrieval axis",
    )
    retrieval_keys: int | None = option(
        None,
        f"keys hidden in each retrieval haystack, each asked from the one prefill and answered by generation "
        f"(default: {RETRIEVAL_KEYS} where the model finds keys that way at its trained length, else 1); 1: one "
        "passkey prompt per prefill",
        parse=int,
    )
    retrieval_prompts: int | None = option(
        None,
        "retrieval trials the confirmation answers by generation at --length (default: --trials): keys in "
        "haystacks of --retrieval-keys, or passkey prompts (each a prefill at --length)",
        parse=int,
    )
    min_retrieval: float | None = option(
        None,
        "waive the retrieval comparison for a floor: a candidate leaves only when its share of passkeys found is "
        "below this for certain (default: it leaves when another finds more, for certain)",
        parse=float,
    )
    shared_prefill: bool = option(
        False,
        "score the race's objective (key_tokens only) on the retrieval haystacks themselves, from the prefill that "
        "answers their questions (the haystacks' own text, facts left out): one row per haystack and candidate "
        "instead of a key_tokens window more; needs a multikey retrieval axis (the confirmation is unchanged)",
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
    check_length: int | None = None  # deprecated (0.2.0): check_lengths=(n,), or () for 0; removed in 0.4.0
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
            checks.choice("engine", self.engine, ENGINE_NAMES)
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
        if self.retrieval_keys is not None:
            checks.int_within("retrieval_keys", self.retrieval_keys, 1, MAX_NEEDLES)
        if self.retrieval_prompts is not None:
            checks.positive_int("retrieval_prompts", self.retrieval_prompts)
        for name in ("race_windows", "block", "min_windows"):
            checks.positive_int(name, getattr(self, name))
        if self.shared_prefill:
            self._check_shared_prefill()
        if self.race_windows < 2:
            raise ValueError(f"race_windows={self.race_windows} is not allowed; a paired interval needs at least 2")
        if self.min_windows > self.race_windows:
            raise ValueError(
                f"min_windows={self.min_windows} is not allowed; expected at most race_windows={self.race_windows}: "
                "no candidate could leave the race before its windows run out"
            )
        if self.check_length is not None and self.check_lengths is not None:
            raise ValueError(
                f"check_length={self.check_length!r} is not allowed with check_lengths={self.check_lengths!r}: "
                "give check_lengths alone (check_length is its old spelling)"
            )
        if self.check_length is not None:
            options.deprecated("AdviseConfig(check_length=...)", "check_lengths=(n,), or () for none", stacklevel=4)
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

    def _check_shared_prefill(self) -> None:
        """What ``shared_prefill`` needs: the key_tokens objective by its n-gram rule, a multikey axis."""
        refused = (
            (self.objective != "key_tokens", f"objective={self.objective!r}: it shares key_tokens only"),
            (self.key_evaluator is not None, f"key_evaluator={self.key_evaluator!r}: the haystacks' key tokens "
             "come from the n-gram rule"),
            (self.retrieval_per_window == 0, "retrieval_per_window=0: there are no haystacks to share"),
            (self.retrieval_keys == 1, "retrieval_keys=1: passkey prompts are filler, not text to score"),
        )  # fmt: skip
        for bad, why in refused:
            if bad:
                raise ValueError(f"shared_prefill=True is not allowed with {why}; leave it out")

    def race_objective(self) -> str:
        """The task the race reads its objective from: the objective, or with ``shared_prefill`` the
        retrieval haystacks' task (:data:`SHARED_TASK`), whose rows give both axes."""
        return SHARED_TASK if self.shared_prefill else self.objective

    def own_outputs(self) -> outputs.Outputs:
        """What this command writes in ``out`` (the rule of docs/errors.md: only these are replaced)."""
        return ADVISE_OUTPUTS

    def second_text(self) -> str | None:
        """The second text, its default filled in; None for 'none'."""
        if self.heldout_text is None:
            return HELDOUT_FOR_STDLIB if self.text == "stdlib" else "stdlib"
        return None if self.heldout_text == "none" else self.heldout_text


def served_by(cfg: AdviseConfig) -> tuple[str, ...]:
    """The engines advise recommends for: ``--engine``, else every engine (transformers first)."""
    return (cfg.engine,) if cfg.engine else (REFERENCE_ENGINE, *(e for e in ENGINE_NAMES if e != REFERENCE_ENGINE))


BAKED_DIR = "baked"


DEMO_LEARN_STEPS = 30  # the tiny model learns its per-head m and LongRoPE factors in seconds


DEMO_OUTPUTS = outputs.Outputs(ADVISE_RESULTS, {BAKED_DIR: outputs.CHECKPOINT})  # demo's own; scores.db is resumed


@dataclass(frozen=True, kw_only=True)
class DemoConfig(AdviseConfig):
    """``attntemp demo`` and :func:`run_demo` (per-model defaults in :data:`MODEL_DEFAULTS`)."""

    length: int = option(0, "the length to advise for (default: 2x the trained length, where retrieval moves)")
    out: str = option("attntemp-demo", "output folder (advise's report and files, the baked model)")
    race_windows: int = option(8, "windows of the tuning pool the race may score")
    n_docs: int = option(8, "evaluation-pool documents the survivors are confirmed on", flag="--docs")
    trials: int = option(40, "passkey prompts of the retrieval step")
    learn_steps: int = reuse(AdviseConfig, "learn_steps", DEMO_LEARN_STEPS)
    bake: bool = option(True, "bake nothing", flag="--no-bake", invert=True)

    def own_outputs(self) -> outputs.Outputs:
        return DEMO_OUTPUTS


# Per-model defaults: SmolLM2 (trained to 8192) at 12288 tokens, a forward of which takes minutes on
# a 2-core CPU, so few windows and prompts.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "out": "attntemp-demo-smollm2",
        "length": 12288,
        "race_windows": 4,
        "n_docs": 2,
        "trials": 4,
        "batch_size": 2,
        "key_ngram": 4,
        "key_distance": 4096,
        "text": "gutenberg",
        "tune_m": False,
        "learn_steps": 0,
        "check_lengths": (),
    },
}


def default_out(model: str) -> str:
    """``attntemp-demo`` for the tiny model, else ``attntemp-demo-<name>``."""
    if model == "tiny":
        return "attntemp-demo"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(model.rstrip("/")).name)
    return f"attntemp-demo-{name.strip('.') or 'model'}"


def demo_config(model: str = "tiny", **overrides: Any) -> DemoConfig:
    """The demo's config for ``model``: its defaults, then ``overrides`` (None values ignored);
    a length left at 0 becomes twice the trained length read from the model's config."""
    given = {k: v for k, v in overrides.items() if v is not None}
    merged = {"out": default_out(model), **MODEL_DEFAULTS.get(model, {}), **given}
    if not merged.get("length"):
        from ..hf import preflight  # the model's config: read when a demo is made, not for --help

        trained = preflight.source_trained_length(preflight.source_config(model))
        merged["length"] = 2 * trained if trained else 0
    return DemoConfig(model=model, **merged)
