"""Export Mistral 3's position schedule, ``llama_4_scaling_beta``: ``q *= 1 + beta ln(1 + floor(p / L0))``
(Ministral 3, Mistral Large 3, Mistral 4; :class:`attntemp.ops.schedules.Llama4Scaling`).

Every engine has a key for it, each read by some architectures only (read in their sources; not
run here):

* transformers 5.24: ``rope_parameters.llama_4_scaling_beta`` beside the rope's
  ``original_max_position_embeddings``, read by the ``ministral3`` and ``mistral4`` models;
  ``deepseek_v3`` (Mistral Large 3's text config) has none and drops it (``attntemp audit
  --config mistral_large3``).
* vLLM: the config's ``llama_4_scaling`` ``{original_max_position_embeddings, beta}`` (from Mistral's
  ``params.json``), read by ``deepseek_v2.py`` (``_get_llama_4_scaling``: DeepSeek-V2/V3-shaped
  models such as Mistral Large 3); set with ``--hf-overrides``.
* llama.cpp: the GGUF keys ``<arch>.attention.temperature_scale`` (beta) and
  ``<arch>.attention.temperature_length`` (L0), read by its ``deepseek2`` and ``mistral4`` graphs as
  ``1 + scale ln(1 + floor((p + offset) / length))`` with offset 0 for them (Llama 4's is 1).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..ops.geometry import stated_l0
from ..ops.spec import TemperatureSpec
from ..utils import checks

SCHEDULE = "llama_4_scaling"
READERS = {
    "transformers": "read by transformers' ministral3 and mistral4 models; its deepseek_v3 (Mistral Large 3's "
    "text config) has no key for it and drops it",
    "vllm": "read by vLLM's DeepSeek-V2/V3 models (Mistral Large 3, deepseek_v2.py _get_llama_4_scaling); its "
    "other architectures have no key for it",
    "llama.cpp": "read by llama.cpp's deepseek2 and mistral4 graphs (offset 0); its other architectures have no "
    "key for it",
}


def split_schedule(spec: TemperatureSpec) -> tuple[TemperatureSpec, dict[str, float] | None]:
    """``(the spec without the schedule, {beta, original_max_position_embeddings})`` for a
    ``llama_4_scaling`` spec; ``(spec, None)`` for any other."""
    if spec.schedule != SCHEDULE:
        return spec, None
    params = {"beta": 0.1, "original_max_position_embeddings": 16384.0, **dict(spec.schedule_params)}
    return TemperatureSpec.from_dict({**spec.to_dict(), "schedule": "constant", "schedule_params": {}}), params


def _l0(scaling: dict[str, float], rope: dict[str, Any] | None) -> int:
    """The schedule's L0, which must be the rope's (engines read one ``original_max_position_embeddings``)."""
    name = "schedule_params.original_max_position_embeddings"
    l0 = checks.positive_int(name, int(stated_l0(scaling)))
    given = stated_l0(rope)
    if given is not None and int(given) != l0:
        raise ValueError(
            f"{name}={l0} differs from the rope's "
            f"original_max_position_embeddings={given}; the engines read one L0 for both"
        )
    return l0


def with_schedule(result: Any, scaling: dict[str, float], gguf_arch: str | None) -> Any:
    """``result`` (an :class:`~attntemp.ship.export.ExportResult` of the static part) with the
    engine's key for the schedule added, and a note of which architectures read it."""
    beta = checks.positive("schedule_params.beta", float(scaling["beta"]))
    l0 = _l0(scaling, result.rope_parameters)
    said = (*result.notes, f"llama_4_scaling_beta {beta:g} from L0 {l0}: {READERS[result.engine]}")
    if result.engine == "transformers":
        if not result.rope_parameters or result.rope_parameters.get("rope_type") != "yarn":
            raise ValueError(
                "schedule='llama_4_scaling' is exported to transformers inside a yarn rope_parameters (with its "
                "original_max_position_embeddings); give the spec a yarn rope"
            )
        return replace(result, rope_parameters={**result.rope_parameters, "llama_4_scaling_beta": beta}, notes=said)
    if result.engine == "vllm":
        return replace(
            result, args=_vllm_args(result.args, {"original_max_position_embeddings": l0, "beta": beta}), notes=said
        )
    arch = gguf_arch or "<arch>"
    keys = ("--override-kv", f"{arch}.attention.temperature_scale=float:{beta:g}",
            "--override-kv", f"{arch}.attention.temperature_length=int:{l0}")  # fmt: skip
    return replace(
        result,
        args=(*result.args, *keys),
        perplexity=(*result.perplexity, *keys) if result.perplexity else (),
        notes=said,
    )


def _vllm_args(args: tuple[str, ...], scaling: dict[str, Any]) -> tuple[str, ...]:
    """vLLM's flags with ``llama_4_scaling`` added to its ``--hf-overrides`` (one is added if none)."""
    out = list(args)
    if "--hf-overrides" in out:
        i = out.index("--hf-overrides") + 1
        out[i] = json.dumps({**json.loads(out[i]), "llama_4_scaling": scaling})
        return tuple(out)
    return (*out, "--hf-overrides", json.dumps({"llama_4_scaling": scaling}))
