"""Routes that hold: an export hands an engine only settings its readings compute as the spec means.

:func:`checked_export` exports a spec's rope with the engine's own ``export`` and reads the settings back
through every reading of that engine (:mod:`attntemp.ship.readings`, all its version ranges), at a few
request lengths (:func:`~attntemp.ship.readings.lengths`: half L0 to the served context), against
transformers' reading of the spec (:func:`~attntemp.ship.readings.meant`): the same frequencies and the
same logit multiplier within :data:`~attntemp.ship.readings.READING_TOLERANCE`, nothing refused or broken.
Where they differ it tries the nearest spec the engine can carry, named as such in the result
(``nearest``, ``nearest_why``):

* dynamic NTK s (vLLM 0.22+ reads ``dynamic`` as no scaling and breaks past L0, 0.11-0.21 and SGLang as
  static alpha = s^2 - s + 1 at every position; llama.cpp's converter drops it) becomes static NTK at an
  explicit ``rope_theta = theta * alpha^(d / (d - 2))`` with alpha = s^2 - s + 1 (transformers' base at
  n = s L0), served to s L0;
* longrope with short factors other than its long ones (vLLM and llama.cpp fix the factors at load
  by the serving length) becomes longrope with the long factors at every length.

Otherwise the export raises ``ValueError("not carried: ...")`` with the reading that departs.
"""

from __future__ import annotations

from dataclasses import replace

from ...ops.rope.bases import alpha_at_scale
from ...ops.rope.params import Rope
from ...ops.spec import TemperatureSpec
from .. import schedule_export
from ..readings import PROBE_DIM, PROBE_L0, PROBE_THETA, Handed, departure, meant, readers_of
from .base import EPS, GLOBAL, Engine, ExportResult, ExportTarget, global_multiplier, own_factor, resolve_rope

NearSpec = tuple[Rope, str, ExportTarget]  # the nearest rope, why, its target


def model_of(params: Rope, target: ExportTarget) -> Handed:
    """The model an export is checked on (no rope yet): its rotary dim, theta, L0 and positions, each
    a probe value where neither the spec nor the target states it."""
    long = params.get("long_factor")
    dim = target.rotary_dim or (2 * len(long) if long else PROBE_DIM)
    l0 = params.l0 or target.positions or PROBE_L0
    return Handed({}, int(dim), float(target.rope_theta or PROBE_THETA), int(l0), target.positions)


def context_of(params: Rope, target: ExportTarget, l0: int) -> int:
    """The longest request a route is checked at: the target's length, else s L0 of the rope, else L0."""
    if target.length:
        return target.length
    return round(params.factor * l0) if params else l0


def departures(engine: Engine, result: ExportResult, m_spec: float, params: Rope, target: ExportTarget) -> str:
    """Nothing (the empty string) where every reading of ``engine`` computes ``result``'s settings as
    ``params`` (and ``m_spec``) mean at every checked length (:func:`attntemp.ship.readings.departure`);
    else each departing reading's first departure, joined. Engines without readings are not checked."""
    readers = readers_of(engine.name)
    if engine.reads_back is None or not readers:
        return ""
    model = model_of(params, target)
    try:
        handed = engine.reads_back(result, model)
        want = meant(params, model.dim, model.rope_theta, model.l0)
        context = context_of(params, target, model.l0)
        found = (departure(r, handed, want, m_spec, context) for r in readers)
        return "; ".join(why for why in found if why)
    except ValueError as exc:  # a reading that cannot take these settings
        return f"{engine.name} has no reading of these settings: {exc}"


def nearest(params: Rope, target: ExportTarget) -> list[NearSpec]:
    """The nearest ropes an engine may carry in place of ``params``, each with why and its target."""
    kind = params.kind
    if kind == "dynamic":
        s, l0 = params.factor, params.l0
        alpha = alpha_at_scale(s)
        at = f"s L0 = {round(s * int(l0))}" if l0 else "s L0"
        why = (
            f"dynamic NTK s = {s:g} as static NTK with alpha = s^2 - s + 1 = {alpha:g} (transformers' dynamic base "
            f"at n = {at}; what vLLM 0.11-0.21 and SGLang make of `dynamic`): rope_theta = theta * "
            f"alpha^(d / (d - 2)) at every position, so prompts under L0{f' = {l0}' if l0 else ''} change too"
        )
        ntk = Rope({"rope_type": "ntk", "factor": alpha, **({"original_max_position_embeddings": l0} if l0 else {})})
        length = target.length or (round(s * l0) if l0 else None)
        return [(ntk, why, replace(target, length=length))]
    if kind == "longrope" and params["short_factor"] != params["long_factor"]:
        why = (
            f"longrope with long_factor at every length (transformers switches to it only past L0 = "
            f"{params.l0}; this engine fixes the factors at load by its serving length): prompts under "
            "L0 change too"
        )
        return [(params.updated(short_factor=params["long_factor"]), why, target)]
    return []


def attempt(engine: Engine, m_spec: float, params: Rope, target: ExportTarget) -> tuple[ExportResult, str]:
    """``engine``'s settings for ``params`` and ``m_spec`` and "" where they hold, else how they depart."""
    m = m_spec * own_factor(params) ** 2 if params else m_spec
    result = engine.export(m, params, target)
    return result, departures(engine, result, m_spec, params, target)


def checked_export(
    engine: Engine, spec: TemperatureSpec, m_spec: float, params: Rope, target: ExportTarget
) -> ExportResult:
    """``engine``'s settings for ``spec`` (its rope ``params``, L0 filled in; its own logit multiplier
    ``m_spec``): the spec's, checked in the engine's readings; else the nearest spec's, named as such
    (``nearest``: that spec); else a ValueError saying why."""
    checked = tuple(r.label for r in readers_of(engine.name)) if engine.reads_back else ()
    refused: ValueError | None = None
    try:
        result, why = attempt(engine, m_spec, params, target)
    except ValueError as exc:
        why, refused = "", exc
    else:
        if not why:
            return replace(result, checked=checked)
    tried = []
    for near, near_why, near_target in nearest(params, target):
        try:
            got, off = attempt(engine, m_spec, near, near_target)
        except ValueError as exc:
            tried.append(f"the nearest, {near_why}, is not carried either: {exc}")
            continue
        if not off:
            return replace(got, nearest=spec.with_rope(near), nearest_why=near_why, checked=checked)
        tried.append(f"the nearest, {near_why}, is read otherwise too: {off}")
    if refused is not None:
        if not tried:
            raise refused
        raise ValueError(f"{refused}; {'; '.join(tried)}") from None
    said = f"not carried: {engine.name} reads these settings otherwise: {why}"
    raise ValueError("; ".join((said, *tried)))


# ----------------------------------------------------------------------------- a spec's export
def export_spec(
    spec: TemperatureSpec, engine: Engine, trained_length: int | None = None, target: ExportTarget | None = None
) -> ExportResult:
    """``spec`` as ``engine``'s settings (:func:`attntemp.ship.export.export` by name), on a route that
    holds (:func:`checked_export`). The logit multiplier is the spec's m times the square of its rope's own
    factor; Mistral 3's position schedule goes to the engine's own key (:mod:`attntemp.ship.schedule_export`)."""
    target = target or ExportTarget()
    scaling = schedule_export.scaling_of(spec)
    spec = spec if scaling is None else replace(spec, schedule="constant", schedule_params=())
    per_type = engine.rope_per_layer_type and target.layer_ropes is not None
    m_spec = global_multiplier(spec, engine, per_type)
    if per_type and spec.layer_types is None and abs(m_spec - 1) > EPS:
        raise ValueError(
            f"m={m_spec:.6g} on every layer cannot be exported to {engine.name} for this model: its RoPE is per "
            f"layer type, so the attention factor reaches the {GLOBAL} layers only and the sliding ones keep their "
            f"own rope. Give the spec layer_types=['{GLOBAL}'], or bake it into q_proj with `attntemp bake`"
        )
    result = checked_export(engine, spec, m_spec, resolve_rope(spec, trained_length), target)
    if scaling is None:
        return result
    beta, l0 = schedule_export.parameters(scaling, result.rope_parameters)
    said = (*result.notes, f"llama_4_scaling_beta {beta:g} from L0 {l0}: {engine.schedule_readers}")
    return engine.with_schedule(replace(result, notes=said), beta, l0, target)
