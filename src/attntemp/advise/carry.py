"""How each engine carries each candidate advise races, and which of them it carries as meant.

:func:`engine_route` asks the engine's own export (:func:`attntemp.ship.export.export`, whose every route
is checked against that engine's readings by version, :mod:`attntemp.ship.readings`) for a spec's
settings. The answer is one of:

- ``nothing``: the spec is the model as it is;
- ``settings``: the engine's own settings, read by every version as the spec means;
- ``nearest``: the engine reads the spec's settings otherwise (vLLM and llama.cpp on dynamic NTK or
  on longrope's short factors, for instance), and carries the nearest spec instead, named in
  ``spec`` with ``why``; :func:`with_engines` links it to the raced candidate that reads alike
  (``as``), whose scores are the ones that hold for that engine;
- ``bake``: a checkpoint with the temperature in its weights (``spec``: the equivalent spec baked);
- ``remote code``: a checkpoint whose remote code applies a position schedule (transformers, Llama);
- ``not carried``, with the reason.

A candidate an engine carries only as its nearest is not recommended for that engine under its own
name: its scores are not what the engine computes (:func:`computes_as_meant`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..ops.rope.params import Rope
from ..ops.spec import TemperatureSpec
from ..ship.engines import ENGINES
from ..ship.engines.base import resolve_rope
from ..ship.export import export
from ..ship.readings import PROBE_DIM, PROBE_THETA, departure, meant
from ..ship.readings.of_transformers import TRANSFORMERS
from .candidates import Candidate, rotary

AS_MEANT = ("nothing", "settings", "bake", "remote code")  # the routes that compute what the spec means


def engine_route(
    spec: TemperatureSpec, engine: str, trained: int, config: dict[str, Any] | None, length: int | None = None
) -> dict[str, Any]:
    """How ``engine`` carries ``spec`` on the model of ``config`` (its config dict: the settings take
    its rope_theta and, on Gemma 3, its per-layer-type RoPE), served to ``length`` tokens (default:
    s L0 of its rope): ``{"how": one of the module's routes, "settings" or "command", "spec" (nearest
    or baked, as its JSON), "why"}``."""
    return route_and_nearest(spec, engine, trained, config, length)[0]


def route_and_nearest(
    spec: TemperatureSpec, engine: str, trained: int, config: dict[str, Any] | None, length: int | None = None
) -> tuple[dict[str, Any], TemperatureSpec | None]:
    """:func:`engine_route`'s route and, where it is ``nearest``, the spec the engine carries instead
    (the export's own, typed; the route holds its JSON), else None."""
    served = length if length and length > trained else None  # within L0 every engine serves as it is
    if spec.is_identity and not spec.rope:
        said = export(spec, engine, trained_length=trained, config=config, length=served) if served else None
        settings = said.render() if said and said.args else "serve the model as it is"
        return {"how": "nothing", "settings": settings}, None
    try:
        result = export(spec, engine, trained_length=trained, config=config, length=served)
    except ValueError as exc:
        why = str(exc)
        try:
            baked = ENGINES[engine].to_bake(spec, config) if not spec.position_dependent else spec
        except ValueError as refused:  # no one spec of the engine's holds it (Gemma 3 on llama.cpp: a
            return {"how": "not carried", "why": f"{why}; baked: {refused}"}, None  # temperature off YaRN's layers)
        if spec.rope and baked == spec and not exports_rope_alone(spec, engine, trained, config, served):
            return {"how": "not carried", "why": why}, None  # its RoPE itself: a bake would not carry it either
        return _bake_or_refusal(spec, baked, engine, config, why), None
    near = result.nearest
    if near is None:
        return {"how": "settings", "settings": result.render()}, None
    route = {"how": "nearest", "settings": result.render(), "spec": near.to_dict(), "why": result.nearest_why}
    return route, near


def exports_rope_alone(
    spec: TemperatureSpec, engine: str, trained: int, config: dict[str, Any] | None, length: int | None
) -> bool:
    """Whether ``engine`` carries ``spec``'s RoPE alone (m = 1) as settings at ``length``."""
    try:
        export(TemperatureSpec(rope=spec.rope), engine, trained_length=trained, config=config, length=length)
    except ValueError:
        return False
    return True


def _bake_or_refusal(
    spec: TemperatureSpec, baked: TemperatureSpec, engine: str, config: dict[str, Any] | None, why: str
) -> dict[str, Any]:
    """The route when the engine's settings cannot hold ``spec``: bake (``baked``: the spec the engine
    carries, from its ``to_bake``; ``spec`` itself when position-dependent), remote code or not carried."""
    if not spec.position_dependent:
        then = " and serve the baked folder" + (" with its RoPE exported" if spec.rope else "")
        name = "spec.json" if baked == spec else "carried.json"
        route = {"how": "bake", "command": f"attntemp bake --spec {name} --out BAKED{then}", "why": why}
        return route if baked == spec else {**route, "spec": baked.to_dict()}
    if ENGINES[engine].remote_code and (config or {}).get("model_type") == "llama":
        return {
            "how": "remote code",
            "command": "attntemp bake --spec spec.json --out BAKED (a checkpoint whose remote code applies the "
            "schedule; load with trust_remote_code=True)",
            "why": why,
        }
    return {"how": "not carried", "why": f"{engine} has no per-position temperature: {why}"}


def reads_alike(
    a: TemperatureSpec, b: TemperatureSpec, trained: int, length: int, geometry: tuple[int, float] | None
) -> bool:
    """Whether transformers computes ``a`` and ``b`` alike at every checked request length (half L0
    to ``length``): the same frequencies and the same total logit multiplier (the spec's m times the
    rope's own factor squared), with every other field of the specs equal: the static check every
    export route passes (:func:`attntemp.ship.readings.departure`), transformers reading both."""
    if replace(a, multiplier=1.0, rope=Rope()) != replace(b, multiplier=1.0, rope=Rope()):
        return False
    dim, theta = geometry or (PROBE_DIM, PROBE_THETA)
    ha = meant(resolve_rope(a, trained), dim, theta, trained)
    hb = meant(resolve_rope(b, trained), dim, theta, trained)
    return not departure(TRANSFORMERS, ha, hb, b.multiplier / a.multiplier, length)


def with_engines(cands: list[Candidate], trained: int, length: int, config: dict[str, Any] | None) -> list[Candidate]:
    """``cands``, each with how every engine carries it on the model of ``config``, served to
    ``length`` tokens (the length asked: each engine's limit raised to it); a ``nearest``
    route names (``as``) the raced candidate that reads alike, None where none was raced."""
    geometry = rotary(config)
    out = []
    for c in cands:
        engines = {}
        for e in ENGINES:
            route, near = route_and_nearest(c.spec, e, trained, config, length)
            if near is not None:
                alike = (
                    o.key for o in cands if o.key != c.key and reads_alike(near, o.spec, trained, length, geometry)
                )
                route["as"] = next(alike, None)
            engines[e] = route
        out.append(Candidate(c.name, c.spec, c.family, c.gated, c.note, engines, c.key))
    return out


def computes_as_meant(candidate: Candidate, engine: str) -> bool:
    """Whether ``engine`` computes ``candidate`` as meant (so its scores are the engine's)."""
    return candidate.engines.get(engine, {}).get("how", "not carried") in AS_MEANT
