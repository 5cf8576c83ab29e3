"""transformers as an engine: the settings it reads from ``config.json`` and how ``audit`` measures it.

* export, transformers 5.24 (``modeling_rope_utils._compute_yarn_parameters``): ``attention_factor``
  REPLACES the default ``0.1 ln s + 1`` on cos and sin, so ``attention_factor = sqrt(m)``. It is the
  only temperature setting there: a multiplier without a YaRN (or longrope) rope is refused (bake
  it into q_proj). attntemp's static ``ntk`` is written as plain RoPE at an explicit ``rope_theta``
  (with the model's config). Where the RoPE is per layer type (Gemma 3: ``rope_parameters`` keyed by
  ``full_attention`` and ``sliding_attention``) the rope goes to the global layers and the sliding
  ones keep their own, as :func:`attntemp.hf.rope_scaling.extend_context` does.
* Mistral 3's position schedule: ``rope_parameters.llama_4_scaling_beta`` beside the rope's
  ``original_max_position_embeddings``, read by the ``ministral3`` and ``mistral4`` models;
  ``deepseek_v3`` (Mistral Large 3's text config) has none and drops it.
* audit: :func:`attntemp.hf.proxy.measure_proxy` reads the proxy's rotary output and the q, k and scale
  its attention function receives, one query token per position (:func:`figures`). Its entry is the
  base the KL engines are measured against, so :func:`attntemp.ship.audit.run_audit` always makes it.
* verify: not run that way (attntemp's own reference is transformers); a position schedule ships
  to it as remote code (:mod:`attntemp.ship.remote_code`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ...ops import attention_config, rope
from ...ops.geometry import config_dict
from ...ops.rope.params import Rope
from ..readings import Handed
from .base import (
    EPS,
    GLOBAL,
    AuditRun,
    ConfigExport,
    Engine,
    ExportResult,
    ExportTarget,
    need_l0,
    no_knob,
    ntk_note,
    per_layer_type,
    rope_dict,
    static_ntk,
    theta_note,
)
from .expectation import collapse, engine_entry, rounded

NAME = "transformers"
SOURCE = (
    "transformers 5.24 modeling_rope_utils (ROPE_INIT_FUNCTIONS; a temperature only as "
    "_compute_yarn_parameters' attention_factor)"
)
SCHEDULE_READERS = (
    "read by transformers' ministral3 and mistral4 models; its deepseek_v3 (Mistral Large 3's "
    "text config) has no key for it and drops it"
)


# ----------------------------------------------------------------------------- export
def attention_factor(m: float) -> float:
    """transformers ``attention_factor`` (cos/sin, replaces the default) for logit multiplier m."""
    return rope.cos_sin_factor(m)


def logit_multiplier(factor: float) -> float:
    """Logit multiplier of a transformers ``attention_factor``: its square."""
    return rope.cos_sin_multiplier(factor)


def export_settings(m: float, params: Rope, target: ExportTarget) -> ExportResult:
    """``rope_parameters`` for ``config.json`` carrying the total logit multiplier ``m``."""
    kind, rope_theta = params.get("rope_type"), target.rope_theta
    if kind in ("yarn", "longrope"):
        need_l0(params, NAME)
        rp = rope_dict(params, rope_theta, attention_factor=attention_factor(m))
        note = f"attention_factor = sqrt(m) = {rp['attention_factor']:.6g} on cos/sin (replaces the default)"
        notes = (note, *theta_note(rope_theta, "config.json"))
        return ConfigExport(NAME, m, per_layer_type(rp, target.layer_ropes), notes=notes, source=SOURCE)
    if kind == "ntk":
        if abs(m - 1) > EPS:
            raise no_knob(NAME, kind, m)
        theta, _ = static_ntk(params, target, NAME)
        rp = {"rope_type": "default", "rope_theta": theta}
        return ConfigExport(
            NAME, m, per_layer_type(rp, target.layer_ropes), notes=(ntk_note(theta, params),), source=SOURCE
        )
    if abs(m - 1) > EPS:
        raise no_knob(NAME, kind, m)
    rope_params = per_layer_type(rope_dict(params, rope_theta), target.layer_ropes) if kind else None
    notes = () if kind else ("m = 1: nothing to change",)
    return ConfigExport(NAME, m, rope_params, notes=notes, source=SOURCE)


def handed_to_transformers(result: ExportResult, model: Handed) -> Handed:
    """What the export hands transformers: its ``rope_parameters`` (the global layers' where the RoPE is
    per layer type) in the model's config, nothing else changed."""
    rp = dict(result.rope_parameters or {})
    if rp and all(isinstance(v, dict) for v in rp.values()):
        rp = dict(rp.get(GLOBAL, {}))
    return replace(model, rope=rp)


def with_schedule(result: ExportResult, beta: float, l0: int, target: ExportTarget) -> ExportResult:
    """``result`` with ``llama_4_scaling_beta`` in its yarn ``rope_parameters``."""
    if not result.rope_parameters or result.rope_parameters.get("rope_type") != "yarn":
        raise ValueError(
            "schedule='llama_4_scaling' is exported to transformers inside a yarn rope_parameters (with its "
            "original_max_position_embeddings); give the spec a yarn rope"
        )
    return replace(result, rope_parameters={**result.rope_parameters, "llama_4_scaling_beta": beta})


# ----------------------------------------------------------------------------- audit
def figures(config: dict[str, Any], positions: tuple[int, ...]) -> list[dict[str, Any]]:
    """transformers' figures per group of the config (one proxy layer each), as the reference's keys."""
    from ...hf import proxy

    found = attention_config.groups(config)
    out = []
    for m in proxy.measure_proxy(config, positions):
        g = next(g for g in found if m.layer in g.layers)
        out.append({
            "name": g.name,
            "layers": list(g.layers),
            "logit_multiplier": collapse([rounded(x) for x in m.multiplier]),
            "attention_factor": collapse([rounded(x) for x in m.attention_factor]),
            "scale_ratio": rounded(m.scale_ratio),
            "inv_freq": collapse([[rounded(x) for x in t] for t in m.inv_freq]) if m.rotated else None,
        })  # fmt: skip
    return out


@contextmanager
def quiet() -> Iterator[None]:
    """transformers' warnings and progress bars off inside, as they were after."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), not logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if not bars:
            logging.enable_progress_bar()


def base_entry(config: dict[str, Any], ref: dict[str, Any], name: str, tol: float) -> dict[str, Any]:
    """The transformers proxy's entry against ``ref``; a config it cannot build raises, naming
    ``name`` (the ``--config`` given)."""
    import transformers
    from huggingface_hub.errors import StrictDataclassError  # a transformers config class refusing a field

    try:
        got = figures(config, tuple(ref["positions"]))
    except (TypeError, KeyError, AttributeError, RuntimeError, StrictDataclassError) as exc:
        model_type = config_dict(config)["model_type"]
        raise ValueError(
            f"config={name!r}: transformers {transformers.__version__} cannot build a proxy of "
            f"model_type {model_type!r} ({type(exc).__name__}: {str(exc)[:160]})"
        ) from None
    except ValueError as exc:  # the proxy's own refusal: a model_type transformers has no causal LM of
        raise ValueError(f"config={name!r}: {exc}") from None
    return engine_entry(ref, got, f"transformers {transformers.__version__}", tol)


def audit(run: AuditRun) -> dict[str, Any]:
    """transformers' verdict: the base entry the audit made."""
    return run.base


ENGINE = Engine(
    name=NAME,
    export=export_settings,
    with_schedule=with_schedule,
    schedule_readers=SCHEDULE_READERS,
    audit=audit,
    rope_per_layer_type=True,
    remote_code=True,
    reads_back=handed_to_transformers,
)
