"""``attntemp advise``: what should this model run with at this length, and what does it cost
below the trained length? Diagnose, race the candidates, confirm the survivors, recommend what
the engine carries (:mod:`.candidates`, :mod:`.race`, :mod:`.confirm`).

Every score goes through :func:`attntemp.evaluate.score.score_many` into ``out/scores.db``, so a
run killed at any moment (``kill -9``) resumes from its scores and ends with the same result.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..evaluate import distributed
from ..evaluate.corpus import load_text
from ..evaluate.score import Kept, NotStored, ScoreStore, merged, model_identity, reporting, score_many
from ..evaluate.task_base import EvalContext, eval_context, tuning_context
from ..hf.loading import load_model
from ..ops.rope.scalings import rope_at_scale
from ..ops.spec import TemperatureSpec
from ..report.html import markdown_to_html
from ..tune.search import SearchOptions, tune_global
from ..utils import outputs
from . import advice_page as report
from . import diagnose, status
from .candidates import BASELINE, Candidate, by_key, candidates, rope_reaches, rotary, tuned_yarn
from .carry import computes_as_meant, with_engines
from .config import STORE, AdviseConfig, served_by
from .confirm import Check, checks_for, confirm, on_yarn, recommendation, to_confirm
from .learned import LearnJob, added_candidates, learned_candidates
from .plan import AdvisePlan, Retrieval, preflight_advise, shared_refused
from .race import MULTIKEY_TASK, RETRIEVAL_TASK, SHORT_TASK, RaceResult, RaceSettings, race, retrieval_rows
from .records.answers import EngineAdvice, Headline, OwnRace, routes
from .records.comparisons import Confirmation, RetrievalRow
from .records.evidence import Diagnosis, Evidence, Question, RaceRow, RaceSummary, RetrievalPrompts
from .status import Counter, cost_line, race_progress, say, scoring_line

JSON_KEYS = ("question", "diagnosis", "candidates", "recommendation", "by_engine", "forwards", "race")


@dataclass(frozen=True)
class AdviseResult:
    """What advise found: the :class:`~.records.evidence.Evidence` (``evidence.json``: its
    ``to_dict()``), the headline engine's answer (:attr:`recommendation`, with its :attr:`headline`),
    each engine's (:attr:`by_engine`), the ``--json`` document (``to_dict()``) and the report
    (``markdown()``)."""

    evidence: Evidence
    folder: Path
    store: ScoreStore | None = None  # the scores, for a caller that scores more (the demo)
    model_id: str = ""
    count: Counter | None = None

    @property
    def recommendation(self) -> EngineAdvice:
        """The headline engine's answer (``--engine``, else transformers')."""
        return self.evidence.recommendation

    @property
    def headline(self) -> Headline | None:
        """What the report says first about the pick; None where there is no pick."""
        return self.evidence.recommendation.headline

    @property
    def by_engine(self) -> dict[str, EngineAdvice]:
        """Each served engine's answer."""
        return self.evidence.by_engine

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the evidence's :data:`JSON_KEYS` and where the report is."""
        ev = self.evidence.to_dict()
        return {k: ev[k] for k in JSON_KEYS} | {"report": str(self.folder / "report.html")}

    def markdown(self) -> str:
        return report.advice_markdown(self.evidence)


def run_advise(cfg: AdviseConfig, model: Any = None, tok: Any = None) -> AdviseResult | status.AdviseStatus:
    """Check everything (:func:`preflight_advise`), then diagnose, race, confirm and recommend;
    the evidence, the report and the recommended spec written to ``cfg.out``. With ``cfg.status``:
    where such a run stands, read from its store (:mod:`.status`). ``cfg.out`` is locked before
    any check reads it (``--status`` writes nothing: no lock), held to the last write."""
    if cfg.status:
        plan = preflight_advise(cfg, model, tok)
        return advise_status(plan, model if model is not None else load_model(cfg.model, **cfg.load_args())[0])
    with outputs.claimed(cfg.out, "advise"):
        diagnose.check_attention_files(cfg.out)  # every file advise reads from --out, before the model loads
        plan = preflight_advise(cfg, model, tok)
        if cfg.workers > 1 or cfg.ray_address is not None:
            distributed.preflight_ray(cfg)  # workers within the CPUs, the address answering: before any work
        with outputs.output_folder(
            cfg.out, replace=cfg.own_outputs() if cfg.overwrite else (), writer="advise", own=cfg.own_outputs()
        ) as out:
            if model is None:
                model, _ = load_model(cfg.model, **cfg.load_args())
            with distributed.scoring_on_ray(cfg):  # --workers/--ray-address: the forwards on Ray workers
                return write_advice(advise(plan, model, out), out)


def contexts(plan: AdvisePlan) -> tuple[EvalContext, EvalContext]:
    """The evaluation pool's context and the race's (tuning pool, race windows + spare ones)."""
    cfg = plan.cfg
    ctx = replace(eval_context(cfg, plan.trained, tuning=True), needles_per_forward=max(1, plan.needles))
    return ctx, replace(tuning_context(ctx), n_docs=cfg.race_windows + plan.spare)


@dataclass
class Setup:
    """What a race needs, built once from the plan: the candidates (with how each engine carries
    them), the scorer on the tuning pool, the race's settings, the contexts and the store."""

    candidates: list[Candidate]
    scorer: Any  # (specs, task, length, block, stage="race") -> list[Result]
    settings: RaceSettings
    ctx: EvalContext  # the evaluation pool
    tctx: EvalContext  # the tuning pool: the race's windows, then the spare ones
    store: ScoreStore
    model_id: str
    count: Counter
    retrieval: Retrieval  # the retrieval axis, its task settled


PROBE_HAYSTACKS, PROBE_FLOOR = 2, 0.25  # haystacks no change answers at L0; the share that keeps multikey


def settle_retrieval(plan: AdvisePlan, model: Any, tctx: EvalContext, kept: Kept, count: Counter) -> Retrieval:
    """The retrieval axis with its task settled: as planned, or (``--retrieval-keys`` left out) by a
    probe: no change at L0 on :data:`PROBE_HAYSTACKS` haystacks of the tuning pool; multikey where it
    finds at least :data:`PROBE_FLOOR` of their keys, one passkey prompt per prefill where it cannot
    do several keys at all (said)."""
    r = plan.retrieval
    if not r.auto:
        return r
    ctx = replace(tctx, n_docs=PROBE_HAYSTACKS, needles_per_forward=r.keys)
    try:
        got = score_many(
            model, plan.tok, [TemperatureSpec()], MULTIKEY_TASK, plan.trained, ctx, kept.store, kept.model_id
        )
    except NotStored:  # --status before the probe was stored: nothing raced yet
        return replace(r, auto=False, why="the probe at L0 is not scored yet")
    found, trials = count.add("probe", got)[0].metrics["acc"], PROBE_HAYSTACKS * r.keys
    said = f"no change finds {found:.2f} of {trials} keys at its trained length {plan.trained}, {r.keys} per haystack"
    if found >= PROBE_FLOOR:
        return replace(r, auto=False, why=f"{said}: {r.keys} keys per prefilled haystack")
    why = f"{said}: it cannot do several keys, so one passkey prompt per prefill"
    if plan.cfg.shared_prefill:
        raise ValueError(shared_refused(plan.cfg, f"{said}: the probe keeps passkey prompts"))
    return Retrieval(RETRIEVAL_TASK, 1, r.per_window, why)


def setup(plan: AdvisePlan, model: Any, store: ScoreStore) -> Setup:
    """The race's candidates, scorer and settings (YaRN's m searched first unless --no-tune)."""
    cfg, tok, count = plan.cfg, plan.tok, Counter()
    model_id = model_identity(model, cfg.model)
    ctx, tctx = contexts(plan)
    found = settle_retrieval(plan, model, tctx, Kept(store, model_id), count)
    if found.task:
        say(cfg, f"retrieval by generation: {found.task} ({found.why})")
    k = found.per_window  # retrieval prefills a window: block (a, b) is prefills (a k, b k)
    rctx = found.race_pool(tctx, cfg.race_windows) if found.task else tctx
    on_haystacks = {found.task, cfg.race_objective()} if cfg.shared_prefill else {found.task}

    def on_tuning_pool(specs, task, length, block, stage="race"):
        a, b = block
        retrieval = task in on_haystacks
        pool = replace(rctx, window_range=(a * k, b * k)) if retrieval else replace(tctx, window_range=block)
        with reporting(scoring_line(cfg, stage)):
            return count.add(stage, score_many(model, tok, list(specs), task, length, pool, store, model_id))

    cands = candidates(plan.scale, plan.trained, rotary(plan.config), rope_reaches(plan.config))
    if plan.extends and cfg.tune_m:
        say(cfg, "searching YaRN's global m on the tuning pool's spare windows")
        try:
            cands.append(_tuned(plan, model, tctx, Kept(store, model_id), count))
        except NotStored:  # --status before the search was stored: the race without it
            say(cfg, "YaRN's global m: not searched yet")
    if plan.extends and cfg.learn_steps:
        cands += _learned(plan, model, tctx, count)
    cands += added_candidates(cfg.add_spec, plan.added)
    retrieval = cfg.race_objective() if cfg.shared_prefill else found.task or RETRIEVAL_TASK  # one row, both axes
    settings = RaceSettings(
        cfg.race_objective(), cfg.length, plan.short_lengths, cfg.race_windows, cfg.block, cfg.min_windows,
        cfg.max_short_cost, cfg.budget, k if found.task else 0, cfg.min_retrieval, retrieval,
    )  # fmt: skip
    engines = with_engines(cands, plan.trained, cfg.length, plan.config)
    return Setup(engines, on_tuning_pool, settings, ctx, tctx, store, model_id, count, found)


def advise(plan: AdvisePlan, model: Any, out: Path) -> AdviseResult:
    """The advice for ``plan`` on the loaded ``model``, every score kept in ``out/scores.db``."""
    cfg, t0, tok = plan.cfg, time.perf_counter(), plan.tok
    s = setup(plan, model, ScoreStore(out / STORE))
    say(cfg, f"diagnosing without a RoPE change at {plan.trained} and {cfg.length} tokens")
    diagnosis = _diagnose(plan, model, tok, s, out)
    say(cfg, cost_line(plan, len(s.candidates), s.count))
    say(cfg, f"racing {len(s.candidates)} candidates")
    result = race(s.candidates, s.scorer, s.settings, race_progress(cfg))
    say(cfg, f"race {result.status}; confirming on the evaluation pool")
    confirmed, checks = _confirm(plan, result, model, s)
    recs = _per_engine(plan, s, result, confirmed, checks, model)
    ev = _evidence(plan, s, result, diagnosis, confirmed, recs, time.perf_counter() - t0)
    return AdviseResult(ev, out, s.store, s.model_id, s.count)


def _per_engine(
    plan: AdvisePlan, s: Setup, result: RaceResult, confirmed: Confirmation, checks: list[Check], model: Any
) -> dict[str, EngineAdvice]:
    """One recommendation per served engine: from the race where the engine computes one of its
    survivors as meant; else from a race among the candidates it does compute as meant (the store
    serves every score the first race made), confirmed the same way and said in ``race``."""
    cfg = plan.cfg
    recs: dict[str, EngineAdvice] = {}
    races: dict[tuple[str, ...], tuple[RaceResult, Confirmation]] = {}
    for e in served_by(cfg):
        if result.status == "undecided" or any(computes_as_meant(x.candidate, e) for x in result.survivors):
            recs[e] = recommendation(result, confirmed, checks, e, cfg.max_short_cost)
            continue
        mine = [c for c in s.candidates if computes_as_meant(c, e)]
        key = tuple(c.key for c in mine)
        if key not in races:  # engines that carry the same candidates share one race
            say(cfg, f"{e} computes none of the survivors as meant: racing the {len(mine)} candidates it does")
            own = race(mine, s.scorer, s.settings, race_progress(cfg))
            races[key] = own, _confirm(plan, own, model, s)[0]
        own, conf = races[key]
        said = OwnRace(own.status, own.windows, tuple(x.name for x in own.survivors))
        recs[e] = replace(recommendation(own, conf, checks, e, cfg.max_short_cost), race=said)
    return recs


def advise_status(plan: AdvisePlan, model: Any) -> status.AdviseStatus:
    """The race replayed from the read-only store, and the confirmation once the race is over."""
    store = status.open_store(plan)
    s = setup(plan, model, store)
    result = race(s.candidates, s.scorer, s.settings)
    confirmed = None
    if result.status != "in progress":  # each check the store lacks is shown as not scored yet
        confirmed, _ = _confirm(plan, result, model, s)
    return status.AdviseStatus(status.status_doc(plan, result, confirmed, store.count()))


def _tuned(plan: AdvisePlan, model, tctx: EvalContext, kept: Kept, count: Counter) -> Candidate:
    """YaRN's global m searched on the spare windows past the race's (never raced on)."""
    cfg = plan.cfg
    spare = replace(tctx, window_range=(cfg.race_windows, cfg.race_windows + plan.spare))
    yarn = rope_at_scale("yarn", plan.scale, plan.trained)  # the plan's s, as the candidates
    opts = SearchOptions(length=cfg.length, objective=cfg.objective, rope=yarn, bracket=(0.8, 1.6), grid=5, iters=3)
    found = tune_global(model, plan.tok, spare, opts, kept=kept)
    count.rows["tuning"] = len(found["curve"]) * plan.spare
    return tuned_yarn(plan.scale, plan.trained, float(found["multiplier"]))


def _learned(plan: AdvisePlan, model, tctx: EvalContext, count: Counter) -> list[Candidate]:
    """The per-head m and the LongRoPE factors learned on the windows past the spare ones (under
    ``--status``: those already learned, read from their checkpoints)."""
    cfg = plan.cfg
    say(cfg, f"learning per-head m and LongRoPE factors: {cfg.learn_steps} steps each at {cfg.length} tokens")
    first = cfg.race_windows + plan.spare
    job = LearnJob(cfg.objective, cfg.length, plan.trained, first, cfg.learn_steps)
    found = learned_candidates(model, plan.tok, tctx, Path(cfg.out), job, read_only=cfg.status)
    count.rows["learning"] = len(found) * cfg.learn_steps  # a step: one window forward and backward
    return found


def _diagnose(plan: AdvisePlan, model, tok, s: Setup, out: Path) -> Diagnosis:
    """No change at L0 and N on the race's first windows (the race reads the same scores), its
    cost rows below L0 on the first block (timed for the plan), and the attention statistics per head."""
    cfg, on_pool = plan.cfg, s.scorer
    blocks = [(a, min(a + cfg.block, cfg.race_windows)) for a in range(0, cfg.min_windows, cfg.block)]
    tasks = [cfg.objective] + (["needles"] if plan.needles and cfg.objective != "needles" else [])
    at: dict[int, dict[str, dict[str, Any]]] = {}
    for n in sorted({min(plan.trained, cfg.length), cfg.length}):
        at[n] = {}
        for task in tasks:
            try:
                parts = [on_pool([TemperatureSpec()], task, n, b, "diagnosis")[0] for b in blocks]
            except ValueError as exc:  # e.g. no key tokens at the shorter length
                at[n][task] = {"error": str(exc)}
                continue
            at[n][task] = diagnose.describe(task, merged(task, parts))
    for n in plan.short_lengths:  # no change's cost rows the race's first round reads: the plan times them
        on_pool([TemperatureSpec()], SHORT_TASK, n, blocks[0], "diagnosis")
    short = diagnose.window_attention_stats(model, tok, s.tctx, min(plan.trained, cfg.length), out, s.model_id)
    long = diagnose.window_attention_stats(model, tok, s.tctx, cfg.length, out, s.model_id)
    heads = diagnose.head_shift(long, short, plan.trained)
    text = diagnose.summary(min(plan.trained, cfg.length), cfg.length, cfg.objective, at, heads)
    return Diagnosis({str(n): v for n, v in at.items()}, heads, text)


def _confirm(plan: AdvisePlan, result: RaceResult, model, s: Setup) -> tuple[Confirmation, list[Check]]:
    """The survivors and the YaRN references confirmed on the evaluation pool (and the second text),
    every score kept in the setup's store."""
    cfg, tok, ctx, store, model_id, count = plan.cfg, plan.tok, s.ctx, s.store, s.model_id, s.count
    second = (
        replace(ctx, docs=load_text(plan.second_text, name="heldout_text"), tuning_docs=())
        if plan.second_text
        else None
    )
    yarn, default = by_key(result.entries, "yarn"), by_key(result.entries, "yarn+m")
    yarns = on_yarn(result, "yarn")  # YaRN at m = 1, with its m, with log-n, with the tuned m
    entries = to_confirm(result, yarns, most=len(result.entries))  # every survivor: the decision pairs them
    checks = checks_for(
        cfg.objective, cfg.length, plan.check_lengths, plan.short_lengths, plan.needles > 0, bool(second),
        retrieval=s.retrieval.task,
    )  # fmt: skip

    prompts = cfg.retrieval_prompts or cfg.trials  # the other tasks' windows keep their keys in the store

    def scorer(specs, task, length, text):
        where = ctx if text == "evaluation" else second
        assert where is not None
        where = s.retrieval.confirm_pool(where, prompts) if task == s.retrieval.task else where
        if not cfg.status:  # a long confirmation shows where it is
            say(cfg, f"confirming {len(specs)} specs: {task} at {length} on the {text} windows")
        with reporting(scoring_line(cfg, "confirm")):
            scored = score_many(model, tok, list(specs), task, length, where, store, model_id)
        return [r.metrics for r in count.add("confirmation", scored)]

    against = {e.name: yarn.name for e in entries if yarn and e.name in yarns and e.name != yarn.name}
    specs = {e.name: e.candidate.spec for e in entries}
    return confirm(specs, checks, scorer, against, default.name if default else None), checks


def _evidence(
    plan: AdvisePlan,
    s: Setup,
    result: RaceResult,
    diagnosis: Diagnosis,
    confirmed: Confirmation,
    recs: dict[str, EngineAdvice],
    seconds: float,
) -> Evidence:
    """Everything the report and the demo read; ``recommendation`` is the first engine's (``--engine``,
    else transformers'), ``by_engine`` each engine's."""
    cfg, count = plan.cfg, s.count
    found = retrieval_rows(result, cfg.length, by_key(result.entries, "yarn+m"), s.settings.retrieval_task)
    return Evidence(
        _question(plan, s.retrieval), diagnosis, race_rows(result, found),
        RaceSummary(result.status, result.windows, result.rows, result.leader), confirmed,
        recs[served_by(cfg)[0]], recs, sum(count.rows.values()), count.rows.get("tuning", 0), count.rows, seconds,
        count.scored_s,
    )  # fmt: skip


def race_rows(result: RaceResult, found: dict[str, RetrievalRow]) -> tuple[RaceRow, ...]:
    """Every raced candidate with how each engine carries it, why it left, its comparisons at the
    race's last look and its keys found (``found``, by name: :func:`~.race.retrieval_rows`)."""
    return tuple(
        RaceRow(e.candidate.key, e.name, e.candidate.family, e.candidate.gated, e.candidate.note, e.candidate.spec,
                routes(e.candidate.engines), e.reason is None, e.reason, e.left_after, e.comparisons, found.get(e.name))
        for e in result.entries
    )  # fmt: skip


def _question(plan: AdvisePlan, r: Retrieval) -> Question:
    """What was asked, as the evidence says it (``r``: the retrieval axis, its task settled)."""
    cfg, prompts = plan.cfg, plan.cfg.retrieval_prompts or plan.cfg.trials
    trials = RetrievalPrompts(cfg.race_windows * r.per_window * r.keys, r.confirm_pool_size(prompts) * r.keys)
    return Question(
        cfg.model, cfg.length, plan.trained, served_by(cfg)[0], tuple(served_by(cfg)), cfg.objective, cfg.text,
        plan.second_text, tuple(plan.short_lengths), tuple(plan.check_lengths), cfg.max_short_cost, cfg.min_retrieval,
        trials if r.task else None, r if r.task else None, plan.needles, cfg.shared_prefill,
    )  # fmt: skip


def write_advice(result: AdviseResult, out: Path, extra: str = "") -> AdviseResult:
    """``spec.json`` (the recommendation), ``evidence.json``, the figures and the report (with
    ``extra`` markdown after it): each file written once, here."""
    ev = result.evidence
    if ev.recommendation.name is not None and ev.recommendation.spec is not None:
        ev.recommendation.spec.save(out / "spec.json")
    (out / "evidence.json").write_text(json.dumps(ev.to_dict(), indent=1, default=float))
    report.tradeoff_figure(ev, out / "tradeoff.png")
    report.diagnosis_figure(ev, out / "diagnosis.png")
    md = result.markdown() + extra
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(markdown_to_html(md, f"attntemp advise: {ev.question.model}"))
    return result


__all__ = ["BASELINE", "AdviseConfig", "AdviseResult", "run_advise"]
