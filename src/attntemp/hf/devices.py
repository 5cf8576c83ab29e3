"""Where a model runs and in what precision: ``--device``, ``--dtype`` and ``--threads`` checked
before anything loads, and the one helper that lets in-place weight edits (baking) reach layers
that accelerate has offloaded to the CPU or disk.

Devices: ``cpu``, ``cuda`` (the current GPU), ``cuda:N``, or ``auto``: accelerate's
``device_map="auto"`` where CUDA is available (the model spread over the GPUs, then CPU memory,
then disk) and ``cpu`` where it is not. Dtypes: float32, bfloat16, float16; the default is
float32 on the CPU and bfloat16 on CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..utils import checks, resources
from ..utils.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


DEVICES = ("cpu", "cuda", "cuda:N", "auto")
DTYPES = ("float32", "bfloat16", "float16")  # the names; torch_dtype gives the torch dtype
_CUDA_N = re.compile(r"cuda:(\d+)")


def cuda_count() -> int:
    """The CUDA devices torch sees (0 on a CPU build or a machine without a GPU)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, or None when it can."""
    if device in ("cpu", "auto"):
        return None
    match = _CUDA_N.fullmatch(device)
    if device != "cuda" and match is None:
        return f"expected one of {', '.join(DEVICES)}"
    n = cuda_count()
    if n == 0:
        return f"CUDA is not available here (torch {torch.__version__}); expected cpu or auto"
    if match is not None and int(match.group(1)) >= n:
        return f"this machine has {n} CUDA device(s), cuda:0 to cuda:{n - 1}"
    return None


def check_device(device: str) -> str:
    """Return ``device`` if it is usable here, else raise naming it and what is allowed."""
    problem = _device_problem(device)
    if problem is not None:
        raise ValueError(f"device={device!r} is not allowed: {problem}")
    return device


def on_cuda(device: str) -> bool:
    """True when ``device`` (checked) runs on a GPU: cuda, cuda:N, or auto with CUDA available."""
    return device.startswith("cuda") or (device == "auto" and cuda_count() > 0)


def check_dtype(dtype: str | torch.dtype | None, device: str = "cpu") -> torch.dtype:
    """The torch dtype for ``dtype`` (a name or a torch dtype); None: float32 on the CPU, bfloat16 on CUDA."""
    if dtype is None:
        return torch.bfloat16 if on_cuda(device) else torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in [torch_dtype(name) for name in DTYPES]:
            raise ValueError(f"dtype={dtype} is not allowed; expected one of {', '.join(DTYPES)}")
        return dtype
    return torch_dtype(checks.choice("dtype", dtype, DTYPES))


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype named by one of :data:`DTYPES`."""
    return getattr(torch, name)


def long_run_cpu_dtype(cpuinfo: str | None = None) -> str:
    """The faster dtype for a long real-model forward on this CPU (``/proc/cpuinfo``, or ``cpuinfo``
    given), as measured by ``benchmarks/forward_breakdown.py`` (docs/scale.md): ``bfloat16`` on an
    AMD CPU with ``avx512_bf16`` (an EPYC: SmolLM2's whole forward 1.14x as fast at 4096 tokens and
    1.16x at 8192, its linear layers 2.4x) and on a CPU with AMX (``amx_bf16``: an advise row of
    SmolLM2 at 4096 in 0.30x the float32 time, ``benchmarks/advise_cost.py``), ``float32`` elsewhere
    (an Intel Xeon with ``avx512_bf16`` and no AMX ran it at 0.76x in bf16 at 2048 tokens; without
    bf16 instructions it is emulated)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return "float32"
    amd = "AuthenticAMD" in cpuinfo and re.search(r"\bavx512_bf16\b", cpuinfo)
    return "bfloat16" if amd or re.search(r"\bamx_bf16\b", cpuinfo) else "float32"


def check_threads(threads: int | None) -> int | None:
    """``threads`` as an int >= 1 and at most 4 per usable CPU, or None (torch's own default)."""
    if threads is None:
        return None
    return resources.check_cpu_threads("threads", checks.positive_int("threads", threads))


def device_map_for(device: str) -> str | dict[str, Any] | None:
    """``from_pretrained``'s device_map for a checked ``device``: the whole model on it, or accelerate's
    ``"auto"`` placement (GPUs, then CPU, then disk) for ``auto`` where CUDA is available."""
    if device == "auto":
        return "auto" if cuda_count() > 0 else None
    return None if device == "cpu" else {"": device}


# ----------------------------------------------------------------------------- CLI parsers
def parse_device(text: str) -> str:
    """``--device``: checked here, so a bad value is one line on stderr before any model loads."""
    problem = _device_problem(text.strip())
    if problem is not None:
        raise ValueError(problem)
    return text.strip()


def parse_dtype(text: str) -> str:
    """``--dtype``: one of :data:`DTYPES`, or ``auto`` (:mod:`attntemp.hf.probes.dtype`: measured)."""
    if text.strip() not in (*DTYPES, "auto"):
        raise ValueError(f"expected one of {', '.join(DTYPES)} or auto")
    return text.strip()


def parse_threads(text: str) -> int:
    """``--threads``: an integer >= 1, at most 4 per CPU this process may use."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected an integer >= 1") from None
    if value < 1:
        raise ValueError("expected an integer >= 1")
    try:
        return resources.check_cpu_threads("threads", value)
    except ValueError as exc:
        raise ValueError(str(exc).partition("not allowed; ")[2]) from None


# ----------------------------------------------------------------------------- offloaded weights
def _offload_hook(module: torch.nn.Module) -> Any | None:
    """accelerate's AlignDevicesHook of ``module`` when it offloads the module's own weights."""
    hook = getattr(module, "_hf_hook", None)
    return hook if getattr(hook, "offload", False) and getattr(hook, "weights_map", None) is not None else None


@contextmanager
def writable(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Inside: ``module``'s weights are real tensors even when accelerate offloaded them (to the CPU or
    disk, ``device_map``); in-place edits made inside are written back to the offloaded copy, so the
    next forward (and ``save_pretrained``) sees them. Modules on a device are yielded as they are."""
    hooked = [(m, hook) for m in module.modules() if (hook := _offload_hook(m)) is not None]
    for m, hook in hooked:
        hook.pre_forward(m)
    try:
        yield module
    finally:
        for m, hook in hooked:
            _write_back(m, hook)
            hook.post_forward(m, None)


def _write_back(module: torch.nn.Module, hook: Any) -> None:
    """Put ``module``'s current own parameters into the hook's weights map (its loader's state dict,
    which takes precedence over the file it was offloaded to)."""
    loader = hook.weights_map.dataset  # accelerate's OffloadedWeightsLoader
    prefix = hook.weights_map.prefix
    for name, p in module.named_parameters(recurse=False):
        loader.state_dict[prefix + name] = p.detach().to("cpu", copy=True)
        if prefix + name not in loader.all_keys:
            loader.all_keys.append(prefix + name)
