"""``attntemp verify`` as a run: the spec and sizes checked, then the engine's own module
(:mod:`.verify` for llama.cpp, :mod:`.vllm_engine` for vLLM, which builds on :mod:`.verify`).
The caller of both, so neither imports its caller."""

from __future__ import annotations

from ..hf.loading import load_model
from ..ops.spec import TemperatureSpec
from ..utils.resources import vllm_cpu_refusal
from . import llamacpp
from .verify import VerifyConfig, VerifyResult, check_size, check_work_dir, llamacpp_run, work_folder
from .vllm_engine import run_vllm


def check_vllm_cpu(device: str | None, cpuinfo: str = "/proc/cpuinfo") -> None:
    """On the CPU, refuse ``--engine vllm`` in one line before any work where vLLM's CPU build
    cannot run (no AVX-512); on a CUDA device vLLM's GPU build has no such need."""
    why = None if (device or "cpu").startswith("cuda") else vllm_cpu_refusal(cpuinfo)
    if why:
        raise ValueError(f"engine='vllm' cannot run on this machine: {why}; use --engine llama.cpp")


def run_verify(cfg: VerifyConfig) -> VerifyResult:
    """Load the spec and model, run the engine on held-out windows, compare (see the module doc)."""
    spec = TemperatureSpec.load(cfg.spec)
    check_work_dir(cfg.work_dir)
    check_size(cfg, spec)
    if cfg.engine == "vllm":
        check_vllm_cpu(cfg.device)
        return run_vllm(cfg, spec)
    if cfg.engine == "llama.cpp" and spec.position_dependent:
        raise ValueError(
            f"spec={cfg.spec!r} has the position-dependent schedule {spec.schedule!r}: llama.cpp has no "
            "per-position temperature. `attntemp bake` ships it as a checkpoint that carries its schedule "
            "(transformers with trust_remote_code=True; vLLM with attntemp's plugin: --engine vllm checks it)"
        )
    llama = llamacpp.find_llamacpp(cfg.engine_dir)
    model, tok = load_model(cfg.model, **cfg.load_args(dtype="float32"))
    with work_folder(cfg.work_dir) as work:
        return llamacpp_run(cfg, spec, llama, model, tok, work)
