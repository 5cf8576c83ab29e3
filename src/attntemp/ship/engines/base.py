"""What an engine module provides (:class:`Engine`) and what every engine's export shares.

An :class:`Engine` is one engine's knowledge behind the verbs: ``export`` (its settings for a
spec's static temperature and RoPE), ``with_schedule`` (Mistral 3's position schedule under its own
key), ``audit`` (how it is run on a config's proxy and read) and ``verify`` (how it runs what
attntemp ships, compared with attntemp's patched model; None where it is not run that way). The
verbs (:mod:`attntemp.ship.export`, :mod:`~attntemp.ship.audit`, :mod:`~attntemp.ship.verify`)
look an engine up in :data:`attntemp.ship.engines.ENGINES` and call these.

Every engine spells the YaRN temperature as a factor f on cos and sin, so it lands SQUARED on the
logits; each engine module says what its f replaces or multiplies. ``m`` below is the total logit
multiplier (m = 1/T) and s the YaRN scale factor.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ...ops import rope
from ...ops.geometry import (
    SCALING_ON_FULL_ONLY,
    ModelGeometry,
    config_dict,
    head_dims,
    layer_kinds,
    layer_rope,
)
from ...ops.rope.bases import ntk_base
from ...ops.rope.params import Rope
from ...ops.schedules import yarn_mscale
from ...ops.spec import TemperatureSpec
from ...utils import checks
from ..bake import refuse_position_dependent
from ..comparison import VerifyOptions, VerifyResult
from ..readings import PROBE_L0, Handed


def attn_factor(m: float, s: float) -> float:
    """The factor llama.cpp and vLLM put on cos/sin on top of YaRN's default 0.1 ln s + 1 (their
    ``attn_factor``; YaRN, Peng et al., arXiv:2309.00071) for logit multiplier m."""
    return rope.cos_sin_factor(m) / yarn_mscale(checks.at_least("s", s, 1.0))


def logit_multiplier(factor: float, s: float) -> float:
    """The logit multiplier of that ``attn_factor``: ``(attn_factor * (0.1 ln s + 1))^2``."""
    return rope.cos_sin_multiplier(factor) * yarn_mscale(checks.at_least("s", s, 1.0)) ** 2


EPS = 1e-12
GLOBAL = "full_attention"  # the layer type a RoPE extension goes to where the RoPE is per layer type
SAME_PAST_L0 = (
    "{engine} uses long_factor {when}; transformers switches to it only for sequences longer than L0 = {l0}: "
    "the same logits for those, the lengths the factors were tuned for"
)


# ----------------------------------------------------------------------------- what an export gives
@dataclass(frozen=True)
class ExportResult:
    """One engine's settings for a spec; ``logit_multiplier`` is the total m they put on the logits."""

    engine: str
    logit_multiplier: float
    rope_parameters: dict[str, Any] | None = field(default=None, hash=False)
    args: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""
    perplexity: tuple[str, ...] = ()  # llama.cpp: the same settings as a llama-perplexity command
    gguf_tensors: dict[str, list[float]] | None = field(default=None, hash=False)  # llama.cpp: tensors to write
    nearest: TemperatureSpec | None = None  # the spec carried instead (None: the spec)
    nearest_why: str = ""  # why the spec asked for is not carried as meant, and what the nearest one is
    checked: tuple[str, ...] = ()  # the engine readings these settings were checked against

    def settings(self) -> list[str]:
        """The settings as printed: the command line's flags, shell-quoted (none: nothing)."""
        return [" ".join(shlex.quote(a) for a in self.args)] if self.args else []

    def to_dict(self) -> dict[str, Any]:  # the --json document: every field, the nearest spec as its JSON
        near = None if self.nearest is None else self.nearest.to_dict()
        return {**asdict(replace(self, nearest=None)), "nearest": near}

    def markdown(self) -> str:
        """What ``attntemp export`` prints (:meth:`render`)."""
        return self.render()

    def render(self) -> str:
        """What ``attntemp export`` prints: a comment line, the settings, notes as comments."""
        m = self.logit_multiplier
        lines = [f"# logit multiplier m = {m:.6g} (temperature T = {1 / m:.6g}); read from {self.source}"]
        if self.nearest is not None:
            lines.append(f"# NEAREST SPEC {self.engine} carries, not the one asked for: {self.nearest_why}")
        lines += self.settings()
        if self.perplexity:
            lines.append("# the same in llama-perplexity (-c: chunk length, its second half scored; TEXT >= 2 chunks):")
            lines.append("# " + " ".join(shlex.quote(a) for a in self.perplexity))
        checked = [f"read as meant by: {', '.join(self.checked)}"] if self.checked else []
        return "\n".join(lines + [f"# {n}" for n in (*self.notes, *checked)])


@dataclass(frozen=True)
class ConfigExport(ExportResult):
    """Settings that go into the model's ``config.json``: printed as its ``rope_parameters`` JSON."""

    def settings(self) -> list[str]:
        body = {"rope_parameters": self.rope_parameters} if self.rope_parameters else {}
        return [json.dumps(body, indent=2)]


@dataclass(frozen=True)
class ExportTarget:
    """What an export knows of the model besides the spec: its ``rope_theta`` (engines replace the
    whole rope dict), its GGUF architecture (llama.cpp's ``--override-kv`` keys) and its RoPE per
    layer type where it has one (Gemma 3: :func:`layer_ropes`), else None."""

    rope_theta: float | None = None
    gguf_arch: str | None = None
    layer_ropes: dict[str, dict[str, Any]] | None = None
    rotary_dim: int | None = None  # the model's rotary dimension (static NTK's exponent d / (d - 2))
    positions: int | None = None  # the model's max_position_embeddings
    length: int | None = None  # the context to serve (None: s L0 of the spec's rope)


@dataclass(frozen=True)
class AuditRun:
    """What an engine's audit gets: the config, attntemp's reference figures, the transformers
    proxy's entry (the base the KL engines are measured against), and where and how to run."""

    config: dict[str, Any]
    reference: dict[str, Any]
    base: dict[str, Any]
    engine_dir: str | None = None
    threads: int | None = None


# ----------------------------------------------------------------------------- the engine
@dataclass(frozen=True)
class Engine:
    """One engine behind the verbs (see the module doc). ``after_bake``: what follows `attntemp bake`
    in a refusal (None: serve the baked folder with this engine's export of its RoPE);
    ``reads_gguf_arch``: its export takes ``--gguf-arch``; ``rope_per_layer_type``: its settings give
    each layer type its own RoPE where the model's config does (Gemma 3), the attention factor with
    it; ``remote_code``: it loads a schedule checkpoint's remote code (``trust_remote_code=True``);
    ``spec_to_bake``: the spec it bakes in place of one it cannot carry as given on a model whose RoPE
    is per layer type (llama.cpp: a YaRN factor moved into the global layers' multiplier);
    ``reads_back``: what an export's settings hand the engine, as its readings
    (:mod:`attntemp.ship.readings`) take them, from the model's (a ``Handed`` with no rope): every
    export is checked against them (:mod:`.routes`); ``check_readings``: ``attntemp audit --readings``
    in the engine installed here (its build folder or venv), None for the reference."""

    name: str
    export: Callable[[float, Rope, ExportTarget], ExportResult]
    with_schedule: Callable[[ExportResult, float, int, ExportTarget], ExportResult]
    schedule_readers: str
    audit: Callable[[AuditRun], dict[str, Any]]
    verify: Callable[[VerifyOptions, TemperatureSpec], VerifyResult] | None = None
    after_bake: str | None = None
    reads_gguf_arch: bool = False
    rope_per_layer_type: bool = False
    remote_code: bool = False
    spec_to_bake: Callable[[TemperatureSpec, dict[str, dict[str, Any]] | None], TemperatureSpec] | None = None
    reads_back: Callable[[ExportResult, Handed], Handed] | None = None
    check_readings: Callable[[str | None], dict[str, Any]] | None = None
    verify_copies: int = 1  # float32 copies of the weights verify writes (llama.cpp: a checkpoint and its GGUF)

    def to_bake(self, spec: TemperatureSpec, config: dict[str, Any] | None) -> TemperatureSpec:
        """The spec to bake for this engine on the model of ``config``: ``spec`` itself, or its
        ``spec_to_bake`` gives."""
        return spec if self.spec_to_bake is None else self.spec_to_bake(spec, layer_ropes(config))

    def bake_route(self) -> str:
        """How a spec this engine cannot express ships: the tail of the refusal after `attntemp bake`."""
        if self.after_bake is not None:
            return self.after_bake
        return f" and serve that folder (`attntemp export --engine {self.name}` of its RoPE, if any)"


# ----------------------------------------------------------------------------- spec analysis
def global_multiplier(spec: TemperatureSpec, engine: Engine, per_type: bool = False) -> float:
    """The one static m of the spec; raise when it varies by layer or head, or by position, or
    targets some layer types only (``per_type``: the settings carry a RoPE per layer type, so a spec
    of the global layers alone is one m there)."""
    name = engine.name
    refuse_position_dependent(spec, f"exported to {name}", "its settings have no per-position temperature")
    if spec.layer_types is not None and not (per_type and spec.layer_types == (GLOBAL,)):
        raise ValueError(
            f"the spec tempers layer_types={list(spec.layer_types)} only; {name} has one temperature for every "
            f"layer: bake it into q_proj with `attntemp bake`{engine.bake_route()}"
        )
    if spec.layers and spec.heads and len(spec.layers) != len(spec.heads):
        raise ValueError(f"the spec has {len(spec.layers)} layers values but {len(spec.heads)} heads rows")
    rows = len(spec.layers or spec.heads or (0,))
    heads = len(spec.heads[0]) if spec.heads else 1
    table = spec.heads_table(rows, heads, [GLOBAL] * rows if spec.layer_types else None)  # [layers, heads]
    low, high = float(table.min()), float(table.max())
    if high - low > EPS * high:
        raise ValueError(
            f"the spec has per-layer or per-head multipliers (m from {low:.4g} to {high:.4g}); {name} "
            f"has one temperature for the whole model: bake them into q_proj with `attntemp bake`{engine.bake_route()}"
        )
    m = spec.multiplier * (spec.layers[0] if spec.layers else 1.0) * (spec.heads[0][0] if spec.heads else 1.0)
    return m * spec.schedule_multiplier()


def resolve_rope(spec: TemperatureSpec, trained_length: int | None) -> Rope:
    """spec.rope with its L0 (original_max_position_embeddings) filled from ``trained_length`` (must agree)."""
    if trained_length is None or not spec.rope:
        return spec.rope
    checks.positive_int("trained_length", trained_length)
    l0 = spec.rope.l0
    if l0 is not None and l0 != trained_length:
        raise ValueError(
            f"trained_length={trained_length} disagrees with the spec's rope original_max_position_embeddings={l0}"
        )
    return spec.rope.updated(original_max_position_embeddings=trained_length)


def own_factor(params: Rope) -> float:
    """The rope's own cos/sin factor (:meth:`Rope.cos_sin_factor`: YaRN's and LongRoPE's, or the
    stated ``attention_factor``; 1 for the other types). A rope stating no L0 is read at a probe L0:
    only LongRoPE's default depends on it, and every engine refuses a longrope without one."""
    return params.cos_sin_factor(params.l0 or PROBE_L0)


def layer_ropes(config: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """``{layer type: its rope parameters}`` of a model config whose RoPE is per layer type (Gemma 3
    and OLMo 3 in transformers 5: ``rope_parameters`` keyed by ``full_attention`` and
    ``sliding_attention``, or their older ``rope_scaling`` meant for the full layers only); None
    for every other config (one rope dict for every layer)."""
    if config is None:
        return None
    text = config_dict(config)
    given = text.get("rope_parameters")
    nested = isinstance(given, dict) and bool(given) and all(isinstance(v, dict) for v in given.values())
    if not nested and text.get("model_type") not in SCALING_ON_FULL_ONLY:
        return None
    return {kind: layer_rope(text, kind) for kind in sorted({t for t, _ in layer_kinds(text)} | {GLOBAL})}


def export_target(
    config: dict[str, Any] | None, rope_theta: float | None = None, gguf_arch: str | None = None
) -> ExportTarget:
    """What an export knows of the model whose ``config`` (its config.json as a dict, or None) is
    given: its RoPE per layer type and, unless ``rope_theta`` is given, the theta of its (global
    layers') RoPE."""
    ropes = layer_ropes(config)
    if rope_theta is None and config is not None:
        text = config_dict(config)
        given = ropes[GLOBAL] if ropes else (text.get("rope_parameters") or {})
        rope_theta = given.get("rope_theta", text.get("rope_theta"))
    dim, positions = model_sizes(config)
    return ExportTarget(rope_theta, gguf_arch, ropes, dim, positions)


def model_sizes(config: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """``(rotary dim, max_position_embeddings)`` of a model config, each None where it does not say
    (a partial config: the export then checks its routes on a probe geometry)."""
    if config is None:
        return None, None
    try:
        geometry = ModelGeometry.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError):
        try:
            return head_dims(config_dict(config))[1], None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None, None
    return geometry.rotary_dim, geometry.max_positions


def per_layer_type(rp: dict[str, Any] | None, ropes: dict[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """``rp`` as the rope of the global layers beside each other layer type's own (``ropes``, from
    :func:`layer_ropes`); ``rp`` itself where the RoPE is one dict for every layer."""
    if rp is None or ropes is None:
        return rp
    return {**ropes, GLOBAL: rp}


# ----------------------------------------------------------------------------- export helpers
def need_l0(params: Rope, engine: str) -> int:
    """The rope's L0, which ``engine`` needs: raise (saying how to give it) where it states none."""
    if params.l0 is None:
        raise ValueError(
            f"rope_type={params.kind!r} for {engine} needs original_max_position_embeddings (pass "
            "trained_length / --trained-length: the model's max_position_embeddings)"
        )
    return params.l0


def number(x: float) -> str:
    """A number as engines' flags take it: up to 10 significant digits."""
    return format(float(x), ".10g")


def rope_dict(params: Rope, rope_theta: float | None, **factors: float) -> dict[str, Any]:
    """rope_parameters to write (the engine's own settings, a dict): mscale/mscale_all_dim folded into
    the explicit factor(s)."""
    drop = ("mscale", "mscale_all_dim", "attention_factor")
    out = {k: v for k, v in params.to_dict().items() if k not in drop}
    if rope_theta is not None:
        out["rope_theta"] = checks.positive("rope_theta", rope_theta)
    return {**out, **factors}


def no_knob(engine: str, kind: str | None, m: float) -> ValueError:
    """The refusal of an engine whose only temperature knob is the YaRN attention factor."""
    what = f"{engine} reads no attention factor for rope_type={kind!r}" if kind else "the spec has no RoPE"
    return ValueError(
        f"m={m:.6g} cannot be exported to {engine}: {what}, and the YaRN attention factor is the only "
        "temperature setting there. Bake it into q_proj with `attntemp bake`, or add a YaRN rope"
    )


def theta_note(rope_theta: float | None, where: str) -> tuple[str, ...]:
    """A note to add the model's rope_theta when it was not given (``where`` replaces the whole dict)."""
    if rope_theta is not None:
        return ()
    return (f"add the model's rope_theta to rope_parameters: {where} replaces the whole dict",)


def static_ntk(params: Rope, target: ExportTarget, engine: str) -> tuple[float, int]:
    """``(rope_theta, context)`` of a static NTK rope (attntemp's ``ntk``, factor alpha): ``theta *
    alpha^(d / (d - 2))`` on the model's theta and rotary dim, served to ``target.length`` or alpha L0;
    raise naming what is missing."""
    if target.rope_theta is None or target.rotary_dim is None:
        raise ValueError(
            f"rope_type='ntk' for {engine} is written as an explicit rope_theta = theta * alpha^(d / (d - 2)): it "
            "needs the model's rope_theta and rotary dim (pass its config: --config)"
        )
    alpha = params.factor
    context = target.length or round(alpha * need_l0(params, engine))
    return ntk_base(float(target.rope_theta), alpha, target.rotary_dim), context


def ntk_note(theta: float, params: Rope) -> str:
    """What a static NTK export writes: plain RoPE at ``theta`` (alpha stated)."""
    alpha = params.factor
    return f"static NTK: plain RoPE at rope_theta = theta * alpha^(d / (d - 2)) = {theta:.10g}, alpha = {alpha:g}"


def context_length(params: Rope, engine: str) -> int:
    """A longrope's extended context for ``engine``: ``round(s * L0)``."""
    return round(params.factor * need_l0(params, engine))


def same_past_l0(engine: str, when: str, params: Rope) -> str:
    """The note that an engine's longrope agrees with transformers' past L0 only."""
    return SAME_PAST_L0.format(engine=engine, when=when, l0=params.l0)
