"""``attntemp export``: a spec's global temperature (with its RoPE extension) as an inference
engine's own settings.

Every engine spells the YaRN temperature as a factor f on cos and sin, so it lands SQUARED on the
logits, but they disagree on what f replaces or multiplies; each engine's module in
:mod:`attntemp.ship.engines` says what it read and writes (:mod:`~attntemp.ship.engines.transformers`:
``rope_parameters.attention_factor``; :mod:`~attntemp.ship.engines.vllm`: ``--hf-overrides``;
:mod:`~attntemp.ship.engines.llamacpp`: flags and ``--override-kv`` GGUF keys).

What an engine cannot express is refused with the reason: per-layer or per-head multipliers (bake
them into q_proj with ``attntemp bake``, then convert for llama.cpp), position-dependent schedules,
and, in transformers and vLLM, a multiplier without a YaRN rope (longrope too in transformers),
whose attention factor is their only temperature knob. Given the model's ``config.json``, the
export fits its layout: where the RoPE is per layer type (Gemma 3) the rope goes to the global
layers only and the sliding-window layers keep their own.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..ops.geometry import FULL, ModelGeometry, config_dict, stated_l0
from ..ops.spec import TemperatureSpec
from ..utils import checks
from .audit.run import load_config
from .config import ExportConfig
from .engines import ENGINES
from .engines.base import ExportResult, export_target, model_sizes
from .engines.routes import export_spec


def export(
    spec: TemperatureSpec,
    engine: str,
    trained_length: int | None = None,
    rope_theta: float | None = None,
    gguf_arch: str | None = None,
    config: dict[str, Any] | None = None,
    length: int | None = None,
) -> ExportResult:
    """``spec`` as ``engine``'s settings (one of :data:`attntemp.ship.engines.ENGINES`).

    ``trained_length``: the model's trained context L0 (the rope's original_max_position_embeddings
    when the spec has none). ``rope_theta``: written into rope_parameters (engines replace the whole
    dict; default: the ``config``'s). ``gguf_arch``: the GGUF architecture name for llama.cpp's
    ``--override-kv`` key. ``config``: the model's config.json as a dict, for its RoPE per layer
    type (Gemma 3). The exported logit multiplier is the spec's m times the square of its rope's own
    factor; Mistral 3's position schedule (``llama_4_scaling``) goes to each engine's own key
    (:mod:`attntemp.ship.schedule_export`, and each engine module says which architectures read it).
    ``length``: the context to serve (vLLM's ``--max-model-len``, llama.cpp's ``--ctx-size``, each
    engine's limit raised to it); default: s L0 of the spec's rope.
    """
    checks.choice("engine", engine, ENGINES)
    if length is not None:
        checks.positive_int("length", length)
    target = replace(export_target(config, rope_theta, gguf_arch), length=length)
    spec.check_rotary(target.rotary_dim)  # a longrope's factor lists against the model's, when known
    return export_spec(spec, ENGINES[engine], trained_length, target)


ROPE_KEYS = ("rope_theta", "rope_parameters", "rope_scaling")


def has_rope(config: dict[str, Any]) -> bool:
    """Whether the model of ``config`` has rotary embeddings: its config.json names a RoPE field, or
    (where it leaves them to defaults) transformers' class of its model_type has one."""
    text = config_dict(config)
    if any(text.get(key) is not None for key in ROPE_KEYS):
        return True
    import transformers

    model_type = str(text.get("model_type"))
    if model_type not in transformers.CONFIG_MAPPING:
        return False
    defaults = transformers.CONFIG_MAPPING[model_type]()
    return any(getattr(defaults, key, None) is not None for key in ROPE_KEYS)


def check_against_config(cfg: ExportConfig, config: dict[str, Any]) -> None:
    """``cfg.config`` is a RoPE model's, and ``cfg.rope_theta`` and ``cfg.trained_length`` where given
    agree with it: a refusal names both values (the exported settings would describe another model)."""
    where = f"config={cfg.config!r}"
    if not has_rope(config):
        raise ValueError(
            f"{where} is not allowed: model_type={config_dict(config).get('model_type')!r} has no rotary embeddings "
            "(no rope_theta, rope_parameters or rope_scaling), and export writes RoPE settings; give a RoPE model's "
            "config.json"
        )
    try:
        geometry = ModelGeometry.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return  # a partial config: the export checks its routes on a probe geometry
    if cfg.rope_theta is not None and not math.isclose(cfg.rope_theta, geometry.rope_theta, rel_tol=1e-9):
        raise ValueError(
            f"rope_theta={cfg.rope_theta} is not allowed with {where}, whose rope_theta is {geometry.rope_theta}: "
            "the two must agree; give one of them"
        )
    trained = geometry.trained_length
    if cfg.trained_length is not None and trained is not None and cfg.trained_length != trained:
        raise ValueError(
            f"trained_length={cfg.trained_length} is not allowed with {where}, whose trained length (L0) is "
            f"{trained}: the two must agree; give one of them"
        )


def check_spec_trained(cfg: ExportConfig, config: dict[str, Any], spec: TemperatureSpec) -> None:
    """The trained length ``spec``'s rope states is the model's, where the config says it for sure
    (a spec for a 256-token model is not exported as a 32768-token model's settings)."""
    try:
        geometry = ModelGeometry.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return
    stated, trained = spec.rope.l0, geometry.trained_length
    if stated is not None and trained is not None and stated != trained and _states_l0(geometry):
        where = f"config={cfg.config!r}"
        raise ValueError(
            f"spec={cfg.spec!r} is not allowed with {where}: its rope states a trained length "
            f"(original_max_position_embeddings) of {stated}, the model's is {trained}; the spec was made for "
            "another model: tune one for this model, or give its config.json"
        )


def _states_l0(geometry: ModelGeometry) -> bool:
    """Whether the config says its trained length for sure: an unscaled RoPE (max_position_embeddings),
    or a scaled one stating original_max_position_embeddings (not Gemma 3's linear factor alone)."""
    full = geometry.rope[FULL]
    return full["rope_type"] == "default" or stated_l0(full) is not None or geometry.top_l0 is not None


MIN_PAIRS = 4  # a rotary dimension of 8: no model rotates fewer (the shipped tiny model: 8 pairs)


def check_pairs_unknown(spec: TemperatureSpec) -> None:
    """Without the model's config, a longrope rope's factor lists at least :data:`MIN_PAIRS` long
    (one value per frequency pair of the rotary dimension; their count is checked against the
    model's only with ``--config``)."""
    if spec.rope.kind != "longrope":
        return
    n = len(spec.rope["short_factor"])
    if n < MIN_PAIRS:
        raise ValueError(
            f"rope.short_factor has {n} value(s); expected one per frequency pair of the model's rotary "
            f"dimension, at least {MIN_PAIRS} (a rotary dimension of {2 * MIN_PAIRS}); give --config, the "
            "model's config.json, to check the count against the model"
        )


def run_export(cfg: ExportConfig) -> ExportResult:
    """The engine's settings for the spec file ``cfg.spec`` (and the model's ``cfg.config``)."""
    spec = TemperatureSpec.load(cfg.spec)
    config = None if cfg.config is None else load_config(cfg.config)
    if config is not None:
        check_against_config(cfg, config)
    try:  # as export() checks it, named by the spec file
        rotary = model_sizes(config)[0]
        spec.check_rotary(rotary)
        if rotary is None:
            check_pairs_unknown(spec)
    except ValueError as exc:
        raise ValueError(f"spec={cfg.spec!r}: {exc}") from None
    if config is not None:
        check_spec_trained(cfg, config, spec)
    return export(
        spec,
        cfg.engine,
        trained_length=cfg.trained_length,
        rope_theta=cfg.rope_theta,
        gguf_arch=cfg.gguf_arch,
        config=config,
    )
