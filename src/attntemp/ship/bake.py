"""Bake a TemperatureSpec into the weights and config: an ordinary checkpoint, no attntemp at serve time.

A constant logit multiplier m of head h is folded into that head's rows of the query projection:
RoPE is linear, so ``rope(m q) = m rope(q)`` and ``(m q) . k = m (q . k)`` exactly. Fused layouts:
Phi-3's ``qkv_proj`` (the first ``H*D`` rows are q, head-major) and GPT-NeoX's ``query_key_value``
(viewed as ``[H, 3*D]`` per token, ``modeling_gpt_neox.py`` in transformers 5.24: rows
``[h*3D, h*3D + D)`` are head h's q). With a QK-norm after the projection (Qwen3, Gemma 3) any scale
of q_proj is normalised away, so the (per-head shared) ``q_norm`` weight is scaled instead: possible
only when all heads of a layer share m. The spec's RoPE extension is written into the config with
``attntemp.extend_context`` (the same rope_parameters the patch uses) and kept.

Refused, with the reason: position-dependent schedules (a checkpoint has no per-position q scale),
m != 1 on soft-capped layers (Gemma 2: m must multiply tanh-capped logits), per-head m under a
QK-norm. ``save_baked`` writes safetensors atomically and reloads them with plain transformers to
check the logits against the patched original before anything appears at ``out_dir``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ..hf import devices, patch, preflight, rope_scaling
from ..hf.introspect import attention_modules, model_geometry, text_config
from ..ops.spec import TemperatureSpec
from ..utils import checks, install, outputs
from ..utils.version import VERSION

BAKED = "_attntemp_baked"
SPEC_FILE = "attntemp_spec.json"
BAKED_FORMAT = "attntemp.BakedCheckpoint/1"


@dataclass(frozen=True)
class LayerBake:
    """What one layer gets: ``target`` (q_proj, qkv_proj, query_key_value or q_norm) scaled by m [H]."""

    layer: int
    target: str
    multipliers: tuple[float, ...]


@dataclass(frozen=True)
class BakeResult:
    """A checked baked checkpoint: its folder, the logit check (fp32) and what was scaled."""

    path: Path
    max_abs_diff: float
    tokens: int
    layers: tuple[LayerBake, ...]

    def targets(self) -> list[str]:
        """The kinds of weight scaled (q_proj, q_norm, ...), each once, sorted."""
        return sorted({step.target for step in self.layers})

    def to_dict(self) -> dict[str, Any]:  # the --json document
        return {
            "path": str(self.path),
            "max_abs_diff": self.max_abs_diff,
            "tokens": self.tokens,
            "targets": self.targets(),
        }

    def markdown(self) -> str:
        return (
            f"baked {len(self.layers)} layers ({', '.join(self.targets())}) into {self.path}\n"
            f"max abs diff, reloaded vs patched logits (fp32, {self.tokens} tokens): {self.max_abs_diff:.3g}"
        )


# ----------------------------------------------------------------------------- checks (no mutation)
def refuse_position_dependent(
    spec: TemperatureSpec,
    what: str = "baked into a checkpoint",
    why: str = "a checkpoint has no per-position q scale",
) -> None:
    """Raise for schedules whose m changes with the query position (logn, llama4, ssmax)."""
    if spec.position_dependent:
        raise ValueError(
            f"schedule={spec.schedule!r} is position-dependent (m changes with the query position); "
            f"it cannot be {what}: {why}. Apply it at inference "
            "with attntemp.patch, or use an engine's native support (Qwen use_logn_attn, Llama 4 "
            "attn_temperature_tuning)"
        )


def _target(mod: torch.nn.Module) -> str:
    for name in ("q_norm", "q_proj", "qkv_proj", "query_key_value"):
        if isinstance(getattr(mod, name, None), torch.nn.Module):
            return name
    raise ValueError(f"{type(mod).__name__} has no q_proj, qkv_proj, query_key_value or q_norm to scale")


def _check_layer(model_type: str, layer: int, target: str, m: torch.Tensor, softcap: float | None) -> None:
    """Raise when the layer's multipliers m [H] cannot be folded exactly into ``target``."""
    uniform = bool((m == 1).all())
    if softcap and not uniform:
        raise ValueError(
            f"model_type={model_type!r} soft-caps attention logits (attn_logit_softcapping={softcap}): "
            f"layer {layer} has m != 1, and m must multiply the capped logits tanh(s/c)*c, which no "
            "weight can express; apply it at inference with attntemp.patch"
        )
    if target == "q_norm" and not bool((m == m[0]).all()):
        raise ValueError(
            f"model_type={model_type!r} layer {layer}: heads have different multipliers "
            f"({float(m.min()):.4g} to {float(m.max()):.4g}), but q_norm normalises each head after "
            "q_proj (so q_proj cannot carry m) and its weight is shared by all heads of the layer; "
            "only one m per layer can be baked (use `layers`), or apply per-head m with attntemp.patch"
        )


def refuse_baked_source(name: str, source: Any) -> None:
    """Raise when ``source`` (a folder) is a baked checkpoint: baking it again would multiply its
    temperature a second time, which its ``attntemp_spec.json`` says not to do."""
    record = Path(str(source)) / SPEC_FILE if source else None
    if record is not None and record.is_file():
        raise ValueError(
            f"{name}={str(source)!r} is already baked ({record}: its temperature is in the weights; "
            "baking again would apply it twice); bake from the original checkpoint"
        )


def plan(model: torch.nn.Module, spec: TemperatureSpec) -> tuple[LayerBake, ...]:
    """What ``bake`` would scale, per layer; raises ValueError (saying why) when it cannot be exact."""
    if getattr(model, BAKED, None) is not None:
        raise ValueError("the model is already baked; bake from the original weights")
    refuse_baked_source("model", getattr(model.config, "_name_or_path", ""))
    if patch.is_patched(model):
        raise ValueError("the model is patched by attntemp; call attntemp.restore(model) before baking")
    patch.check_supported(model)
    refuse_position_dependent(spec)
    cfg, geometry = text_config(model), model_geometry(model)
    mods = attention_modules(model)
    heads = geometry.num_heads
    spec.check_model(len(mods), heads)
    softcap = getattr(cfg, "attn_logit_softcapping", None)
    out, types = [], geometry.layer_types
    for mod in mods:
        m = spec.static_multipliers(mod.layer_idx, heads, types[mod.layer_idx])  # [H]: ones on layers not targeted
        target = _target(mod)
        _check_layer(cfg.model_type, mod.layer_idx, target, m, softcap)
        out.append(LayerBake(mod.layer_idx, target, tuple(float(x) for x in m)))
    return tuple(out)


# ----------------------------------------------------------------------------- scaling
def _scale_heads(t: torch.Tensor, m: torch.Tensor) -> None:
    """In place: ``t`` viewed ``[H, rows, ...]`` (one head's rows each) times m [H], in fp32."""
    shape = (-1,) + (1,) * (t.dim() - 1)
    t.copy_((t.float() * m.to(t.device).reshape(shape)).to(t.dtype))


def _scale_q_rows(weight: torch.Tensor, bias: torch.Tensor | None, m: torch.Tensor, head_dim: int, stride: int) -> None:
    """Scale the q rows of a projection: head h owns rows ``[h*stride, h*stride + head_dim)``."""
    h = m.numel()
    _scale_heads(weight.view(h, stride, -1)[:, :head_dim], m)  # [H, D, hidden]
    if bias is not None:
        _scale_heads(bias.view(h, stride)[:, :head_dim], m)  # [H, D]


def _offset_norm(norm: Any) -> bool:
    """True for Gemma-style norms that multiply by ``1 + weight`` (zero weight is not zero output)."""
    w = norm.weight
    saved = w.detach().clone()
    w.zero_()
    out = norm(torch.ones(1, w.numel(), device=w.device, dtype=w.dtype))  # [1, D]
    w.copy_(saved)
    return bool(out.abs().max() > 0)


def _scale_norm(norm: Any, m: float) -> None:
    """Scale a per-head RMSNorm's output by m through its weight (``w`` or ``1 + w`` form)."""
    w = norm.weight
    if _offset_norm(norm):
        w.copy_(((1 + w.float()) * m - 1).to(w.dtype))
    else:
        w.copy_((w.float() * m).to(w.dtype))


def _scale_layer(mod: Any, step: LayerBake) -> None:
    m = torch.tensor(step.multipliers, dtype=torch.float32)  # [H]
    if bool((m == 1).all()):
        return
    if step.target == "q_norm":
        _scale_norm(mod.q_norm, float(m[0]))
    elif step.target == "q_proj":
        lin, d = mod.q_proj, mod.q_proj.out_features // m.numel()
        _scale_q_rows(lin.weight, lin.bias, m, d, d)
    elif step.target == "qkv_proj":  # Phi-3: [q (H*D) | k | v], q head-major
        lin, rows = mod.qkv_proj, m.numel() * mod.head_dim
        bias = None if lin.bias is None else lin.bias[:rows]
        _scale_q_rows(lin.weight[:rows], bias, m, mod.head_dim, mod.head_dim)
    else:  # GPT-NeoX: per head [q (D) | k (D) | v (D)]
        lin, d = mod.query_key_value, mod.head_size
        _scale_q_rows(lin.weight, lin.bias, m, d, 3 * d)


def _write_rope(model: torch.nn.Module, spec: TemperatureSpec) -> dict[str, Any] | None:
    """Write spec.rope into the config and rotary modules (as extend_context does) and keep it."""
    if not spec.rope:
        return None
    written = rope_scaling.extend_with(model, spec.rope)
    rope_scaling.make_permanent(model)  # this is now the model's own rope
    return written


def bake(model: torch.nn.Module, spec: TemperatureSpec) -> torch.nn.Module:
    """Fold ``spec``'s static multipliers m = 1/T into the weights and its RoPE into the config.

    In place; returns ``model``. Every check runs before anything changes (see ``plan``).
    """
    steps = plan(model, spec)
    _write_rope(model, spec)
    mods = attention_modules(model)
    with torch.no_grad():
        for mod, step in zip(mods, steps, strict=True):
            with devices.writable(mod):  # weights offloaded by a device_map are edited in their store
                _scale_layer(mod, step)
    object.__setattr__(model, BAKED, steps)
    return model


# ----------------------------------------------------------------------------- save + check
def check_out_dir(out: Path, overwrite: bool, keep: dict[str, Path] | None = None, name: str = "out_dir") -> None:
    """``out`` must be a new or empty folder (or, with ``overwrite``, one holding only a checkpoint's
    files, whatever path led there: ``D/sub/..`` is ``D``), writable, and neither the current folder,
    nor one holding it or any path of ``keep`` (the spec, the model's own folder)."""
    install.check_target(name, Path(out), keep or {})
    outputs.check_out(out, overwrite=overwrite, name=name, any_content=True)
    if overwrite:
        outputs.check_only(name, out, install.target(out), outputs.CHECKPOINT, "a checkpoint")


def check_tokens_fit(name: str, tokens: int, config: dict[str, Any] | None, spec: TemperatureSpec) -> None:
    """``tokens`` within the positions a model with learned position embeddings has (RoPE models
    compute any position; the spec's RoPE factor counts) and its fp32 forward within the memory
    available."""
    if config is None:
        return
    most = preflight.max_positions(config, spec.rope.to_dict() or None)
    rotary = "rope_parameters" in config or "rope_theta" in config or "rope_scaling" in config
    if most is not None and not rotary and tokens > most:
        raise ValueError(
            f"{name}={tokens} is not allowed; expected at most {most}: the positions the checkpoint is "
            "set up for (max_position_embeddings, times the spec's RoPE factor)"
        )
    preflight.check_forward(name, tokens, config, 2, tokens)  # the patched and the reloaded model


def _check_fp32(model: torch.nn.Module) -> None:
    bad = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if bad:
        raise ValueError(
            f"the model holds {bad} parameters; save_baked checks the bake in float32 "
            "(load it with dtype=torch.float32, then cast the saved checkpoint if needed)"
        )


def fixed_input(model: torch.nn.Module, tokens: int, seed: int = 0) -> torch.Tensor:
    """A fixed token batch ``[1, tokens]`` drawn from the model's vocabulary (seeded)."""
    vocab = text_config(model).vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, tokens), generator=g)  # [1, L]
    return ids.to(next(model.parameters()).device)


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """fp32 logits ``[B, L, V]`` without gradients."""
    with torch.no_grad():
        return model(ids).logits.float()


def reload_logits(path: Path, ids: torch.Tensor, attn_implementation: str) -> torch.Tensor:
    """Load ``path`` with plain transformers (no attntemp) and return its fp32 logits ``[B, L, V]``."""
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=attn_implementation, output_loading_info=True
    )
    fresh, info = loaded
    if info.get("missing_keys"):
        raise ValueError(
            f"the saved checkpoint lacks weights {sorted(info['missing_keys'])[:4]}; nothing was installed"
        )
    return logits(fresh.to(ids.device).eval(), ids)


def _record(model, spec: TemperatureSpec, steps, diff: float, tokens: int) -> dict[str, Any]:
    import transformers

    return {
        "format": BAKED_FORMAT,
        "note": "this temperature is already in the weights and config; do not apply the spec again",
        "spec": spec.to_dict(),
        "baked": [{"layer": s.layer, "target": s.target, "multipliers": list(s.multipliers)} for s in steps],
        "rope_parameters": getattr(text_config(model), "rope_parameters", None),
        "check": {
            "max_abs_diff": diff,
            "tokens": tokens,
            "dtype": "float32",
            "reference": "attntemp.patch(original model, spec)",
            "loader": "AutoModelForCausalLM",
        },
        "source": getattr(model.config, "_name_or_path", ""),
        "versions": {"attntemp": VERSION, "transformers": transformers.__version__, "torch": torch.__version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def tokens_to_check(spec: TemperatureSpec, tokens: int) -> int:
    """``tokens``, or past L0 for a longrope rope (it switches to ``long_factor`` only there)."""
    if spec.rope.kind != "longrope" or spec.rope.l0 is None:
        return tokens
    return max(tokens, spec.rope.l0 + 16)


def save_baked(
    model: torch.nn.Module,
    tokenizer: Any,
    spec: TemperatureSpec,
    out_dir: str | Path,
    overwrite: bool = False,
    check_tokens: int = 64,
    atol: float = 1e-4,
) -> BakeResult:
    """Bake the ORIGINAL fp32 ``model`` (in place), save it to ``out_dir`` and check it.

    The reference is ``attntemp.patch(model, spec)`` on a fixed input of ``check_tokens`` tokens,
    computed before baking; the saved folder (safetensors, tokenizer unless None, ``attntemp_spec.json``)
    is reloaded with plain ``AutoModelForCausalLM.from_pretrained`` and must match within ``atol``
    times the largest reference logit's size (at least 1): fp32 rounding of the scaled weights is
    relative, and Gemma 3's logits reach tens (a longrope spec is checked past its L0, where its
    long_factor applies).
    Everything is written to a temporary folder next to ``out_dir`` and renamed at the end: a failed
    or interrupted bake leaves nothing at ``out_dir``, and the next bake into the same parent folder
    cleans up after it (:func:`attntemp.utils.install.recover`). Files get the modes the umask gives.
    """
    out = Path(out_dir)
    install.recover(out.absolute().parent)
    source = getattr(model.config, "_name_or_path", "")
    check_out_dir(out, overwrite, {"the model's own folder": Path(source)} if source else {})
    checks.positive_int("check_tokens", check_tokens)
    _check_fp32(model)
    plan(model, spec)
    config: Any = model.config
    check_tokens_fit("check_tokens", check_tokens, preflight.text_part(config.to_dict()), spec)
    check_tokens = tokens_to_check(spec, check_tokens)
    ids = fixed_input(model, check_tokens)  # [1, L]
    impl = text_config(model)._attn_implementation
    with patch.patch(model, spec):
        want = logits(model, ids)  # [1, L, V]
    steps = getattr(bake(model, spec), BAKED)
    tmp = install.staging(out)
    try:
        hf_model: Any = model  # a transformers model: save_pretrained
        hf_model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        diff = float((reload_logits(tmp, ids, impl) - want).abs().max())
        tol = atol * max(1.0, float(want.abs().max()))
        if not diff <= tol:
            raise ValueError(
                f"baked checkpoint differs from the patched model: max abs diff {diff:.3g} > {tol:.3g} "
                f"({atol:g} x the largest logit) on {check_tokens} tokens; nothing was written to {str(out)!r}"
            )
        record = _record(model, spec, steps, diff, check_tokens)
        (tmp / SPEC_FILE).write_text(json.dumps(record, indent=2) + "\n")
        install.install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BakeResult(out, diff, check_tokens, steps)
