"""What a run can check about its model before loading it: the config (read from ``config.json``),
the tokenizer alone (fast), the positions a length needs and the memory a forward would take.

The memory estimate is stated, not measured: a forward over ``rows x tokens`` holds about
``4 bytes x (8 hidden + 4 intermediate + vocab)`` per row and token at its peak (float32 hidden
states, MLP activations and the ``[L, V]`` logits; the shipped tiny model measures 13.9 KiB per
token against 11.3 KiB estimated), times ``layers + 2`` when gradients flow (activations kept for
the backward pass), plus the weights. A scoring forward (``head_chunk``) never forms ``[L, V]``:
its LM head runs ``LOGIT_CHUNK`` positions at a time (:func:`attntemp.evaluate.lm.token_nll`), so
its logits term is one chunk and its cross entropy's copy, whatever the length (Gemma 3's 262k
vocabulary at 49152 tokens: 2 GiB, not 51). A run is refused when that exceeds the memory available
(:func:`attntemp.utils.resources.available_memory`), before anything is allocated.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from ..ops.geometry import ModelGeometry, config_dict, head_dims, stated_l0
from ..utils import digest, resources
from .loading import cache_dir, resolve
from .models import weights
from .models import where as source

BYTES = 4  # float32 activations (the conservative case)
PROMPT_BYTES_PER_TOKEN = 256  # building one prompt: its text, the tokenizer's encoding, the ids
LOGIT_CHUNK = 1024  # positions the LM head scores at a time (attntemp.evaluate.lm.token_nll)


def source_config(name: str, patched: bool = True) -> dict[str, Any] | None:
    """The model's ``config.json`` as a dict (its text config for multimodal models), without
    loading the model; None for a hub id that is not in the local cache yet. ``patched``: the run
    patches the model, so a model type :func:`attntemp.patch` does not support is refused here,
    naming the model (``generate`` without a spec or the monitor passes False)."""
    where = resolve(name)
    if isinstance(where, Path):
        path, cfg = where / "config.json", source.read_config(where, name)
    else:
        cached = source.cached_config(where)
        if cached is None:
            return None
        path, cfg = cached, json.loads(cached.read_text())
    part = text_part(cfg)
    if patched:
        _check_patchable(part, name, path)
    _check_trained_length(part, name, path)
    return part


def _check_patchable(cfg: dict[str, Any], name: str, path: Path) -> None:
    """Raise naming the model when attntemp.patch does not support its model type (GPT-2, BERT, ...):
    found before the model loads, not as a missing field of a config laid out another way."""
    from .patch import SUPPORTED

    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type not in SUPPORTED:
        raise ValueError(
            f"model={name!r} is not allowed: {path} has model_type={model_type!r}, which attntemp.patch does not "
            f"support; expected one of {', '.join(SUPPORTED)}"
        )


def _check_trained_length(cfg: dict[str, Any], name: str, path: Path) -> None:
    """Raise naming the model when its config does not say the length it was trained to (L0: no
    ``max_position_embeddings`` and no L0 of a scaled RoPE): transformers would fill in its class's
    default (2048 for Llama), advise would take ``--length``, both a guess."""
    try:
        geometry = ModelGeometry.from_config(cfg)
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return  # not a RoPE config attntemp reads: the loader's and the patch's checks say so
    if geometry.trained_length is None:
        raise ValueError(
            f"model={name!r}: {path} has no max_position_embeddings, the length the model was trained to; "
            "expected a positive integer there (attntemp does not guess it)"
        )


def check_spec(name: str, path: str | None, spec: Any, config: dict[str, Any] | None) -> None:
    """``spec`` (a TemperatureSpec or None) against the layer and head counts and the rotary
    dimension of the model's ``config`` before it loads; a mismatch is one ValueError naming ``name=path``."""
    if spec is None or config is None:
        return
    try:
        spec.check_model(config.get("num_hidden_layers") or 0, config.get("num_attention_heads") or 0)
        spec.check_rotary(rotary_dim(config))
    except ValueError as exc:
        raise ValueError(f"{name}={path!r}: {exc}") from None


def rotary_dim(cfg: dict[str, Any]) -> int | None:
    """The rotated part of a head in a config dict; None where the config does not say (or not plainly)."""
    try:
        return head_dims(config_dict(cfg))[1]
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return None


def text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config dict's decoder part (``text_config`` of a multimodal config)."""
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def load_tokenizer(name: str) -> Any:
    """The tokenizer of ``name`` alone (a second or less; the model is not loaded)."""
    from transformers import AutoTokenizer

    where = resolve(name)
    with source.loading(name):
        return AutoTokenizer.from_pretrained(where)


def _weights_bytes(cfg: dict[str, Any]) -> float:
    h, i, v, n = (cfg.get(k) or 0 for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers"))
    return BYTES * (2 * v * h + n * (4 * h * h + 3 * h * i))


def forward_bytes(
    cfg: dict[str, Any], rows: int, tokens: int, grad: bool = False, head_chunk: int | None = None
) -> float:
    """Estimated peak bytes of one forward of ``rows x tokens`` (see the module doc); with
    ``head_chunk`` and no gradients, the logits of ``head_chunk`` positions at a time only."""
    h, i, v = (cfg.get(k) or 0 for k in ("hidden_size", "intermediate_size", "vocab_size"))
    keep = (cfg.get("num_hidden_layers") or 1) + 2 if grad else 1
    if head_chunk is None or grad:  # the [L, V] logits (kept whole for the backward pass)
        return _weights_bytes(cfg) + float(rows) * tokens * BYTES * (8 * h + 4 * i + v) * keep
    logits = 2.0 * rows * min(tokens, head_chunk) * BYTES * v  # one chunk's logits and log-softmax
    return _weights_bytes(cfg) + float(rows) * tokens * BYTES * (8 * h + 4 * i) + logits


def check_forward(
    name: str,
    value: Any,
    cfg: dict[str, Any] | None,
    rows: int,
    tokens: int,
    grad: bool = False,
    head_chunk: int | None = None,
) -> None:
    """Raise (naming ``name=value``) when a forward of ``rows x tokens`` would not fit in memory
    (``head_chunk``: a scoring forward, its LM head run that many positions at a time)."""
    if cfg is None:
        return
    what = f"a forward of {rows} row(s) x {tokens} tokens" + (" with gradients" if grad else "")
    resources.check_memory(name, value, forward_bytes(cfg, rows, tokens, grad, head_chunk), what)


def kv_cache_bytes(cfg: dict[str, Any], tokens: int) -> float:
    """Bytes of a float32 KV cache over ``tokens``: 2 x layers x kv heads x head_dim per token."""
    h, n = (cfg.get(k) or 0 for k in ("hidden_size", "num_hidden_layers"))
    heads = cfg.get("num_attention_heads") or 1
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or h // heads
    return 2.0 * BYTES * n * kv * head_dim * tokens


def check_generation(name: str, value: Any, cfg: dict[str, Any] | None, prompt_tokens: int, new_tokens: int) -> None:
    """Raise (naming ``name=value``) when generating ``new_tokens`` after a prompt of ``prompt_tokens``
    would not fit: one forward over the prompt, then a KV cache over both (decoding one token at a time).
    The prompt's logits are the last position's only (``logits_to_keep=1``): one ``[V]`` row, not ``[n, V]``."""
    if cfg is None:
        return
    total = prompt_tokens + new_tokens
    body = forward_bytes({**cfg, "vocab_size": 0}, 1, prompt_tokens)  # the forward without its [n, V] logits
    needed = body + BYTES * (cfg.get("vocab_size") or 0) + kv_cache_bytes(cfg, total)
    what = f"a prompt of {prompt_tokens} tokens and a KV cache of {total}"
    resources.check_memory(name, value, needed, what)


def check_prompts(name: str, value: Any, trials: int, tokens: int) -> None:
    """Raise when ``trials`` prompts of ``tokens`` tokens (kept as ids) would not fit in memory."""
    needed = PROMPT_BYTES_PER_TOKEN * tokens + 8.0 * trials * tokens
    resources.check_memory(name, value, needed, f"{trials} prompt(s) of {tokens} tokens")


def max_positions(cfg: dict[str, Any], rope: dict[str, Any] | None = None) -> int | None:
    """The positions the config is set up for: its :attr:`ModelGeometry.max_positions` times the
    RoPE factor of ``rope`` (a spec's extension) when given; None when the config does not say."""
    n = ModelGeometry.from_config(cfg).max_positions
    if n is None:
        return None
    factor = float((rope or {}).get("factor", 1.0))
    l0 = int(stated_l0(rope) or n)
    return max(n, int(l0 * factor))


def source_trained_length(cfg: dict[str, Any] | None) -> int | None:
    """L0 of a source config (:attr:`ModelGeometry.trained_length`, as
    :func:`attntemp.hf.introspect.trained_length` reads it from a model); None without a config
    (a hub id before its first download) or where it does not say."""
    return None if cfg is None else ModelGeometry.from_config(cfg).trained_length


def fingerprint(name: str) -> str | None:
    """A short hash of what makes the model's numbers: ``config.json`` and each weights file's
    safetensors header and size (a hub snapshot's folder is its commit); None when not local yet."""
    import hashlib

    where = resolve(name)
    folder = where if isinstance(where, Path) else (source.cached_config(where) or Path()).parent
    if not (folder / "config.json").is_file():
        return None
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")) + sorted(folder.glob("*.gguf")):
        with path.open("rb") as f:
            h.update(path.name.encode() + str(path.stat().st_size).encode() + f.read(1 << 16))
    return h.hexdigest()[:16]


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.pth")


def weights_digest(name: str) -> str | None:
    """A digest of the bytes of every weights file of the model's folder (streamed, blake2b;
    cached per file version in ``cache_dir()/digests.json``): unlike :func:`fingerprint`, it
    changes when a checkpoint is rewritten in place with other weights of the same shapes. None
    when the model is not local yet."""
    folder = source_folder(name)
    if folder is None or not folder.is_dir():
        return None
    files = sorted({p for pattern in WEIGHT_FILES for p in folder.glob(pattern) if p.is_file()})
    return digest.files_digest(files, cache_dir() / "digests.json")


def source_folder(name: str) -> Path | None:
    """The local folder ``name`` loads from (a hub id's cached snapshot), or None."""
    where = resolve(name)
    if isinstance(where, Path):
        return where
    cached = source.cached_config(where)
    return cached.parent if cached is not None else None


# ----------------------------------------------------------------------------- disk space
SPACE_MARGIN = 1.1  # what a write needs beyond its estimate (file system blocks, metadata, records)


def _elements(path: Path) -> int:
    """The number of tensor elements a safetensors file's header lists (checked when resolved)."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def checkpoint_bytes(name: str, dtype_bytes: int = 4) -> int | None:
    """About what a checkpoint of model ``name`` takes on disk with its weights in ``dtype_bytes``
    per element (a bake writes float32): its tensors' elements (pickled weights: their size) and its
    tokenizer files; None where the model is not here yet (a hub id not in the cache)."""
    folder = source_folder(name)
    if folder is None:
        return None
    total = sum(
        _elements(f) * dtype_bytes if f.suffix == ".safetensors" else f.stat().st_size
        for f in weights.weight_files(folder, name)
    )
    return total + sum(p.stat().st_size for p in folder.glob("tokenizer*") if p.is_file())


def check_space(name: str, out: str | Path, need: int | None, what: str) -> None:
    """Raise naming ``name`` when the file system ``out`` is (or would be) on has less free space
    than ``need`` bytes (and :data:`SPACE_MARGIN`): found before the work, not when writing."""
    if need is None:
        return
    from ..utils.outputs import nearest_existing

    where = nearest_existing(Path(out))
    free = shutil.disk_usage(where).free
    if need * SPACE_MARGIN > free:
        raise ValueError(
            f"{name}={str(out)!r} is not allowed: {what} needs about {need / 2**20:.1f} MiB, and {str(where)!r} "
            f"has {free / 2**20:.1f} MiB free; free some space there, or choose a folder on another disk"
        )
