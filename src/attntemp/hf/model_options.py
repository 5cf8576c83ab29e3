"""The flags of every command that loads a model (``--model``, ``--device``, ``--dtype``,
``--threads``, ``--verbose``) as one options dataclass, importable without torch and without the
loader's own imports (``--help`` builds from it; :func:`attntemp.hf.loading.load_model` loads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..utils.options import option
from . import devices


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """The model a command loads, where and in what precision (every command that loads one has these flags)."""

    model: str = option("tiny", "tiny, smollm2, gemma3-270m, a hub id or a local folder")
    device: str = option(
        "cpu",
        "cpu, cuda, cuda:N or auto (accelerate's device_map: the GPUs, then CPU memory, then disk)",
        parse=devices.parse_device,
    )
    dtype: str | None = option(
        None,
        f"{', '.join(devices.DTYPES)} or auto (measured: the faster of float32 and bfloat16 on this CPU for the "
        "model's linear layers, cached; bfloat16 on CUDA) (default: float32 on the CPU, bfloat16 on CUDA)",
        parse=devices.parse_dtype,
    )
    threads: int | None = option(None, "CPU threads for torch (default: torch's own)", parse=devices.parse_threads)
    verbose: bool = option(False, "show transformers' own loading bars and warnings")

    def load_args(self, **override: Any) -> dict[str, Any]:
        """``load_model``'s keyword arguments for where and how to load, ``override`` on top:
        ``load_model(cfg.model, **cfg.load_args())``."""
        where = {"device": self.device, "dtype": self.dtype, "threads": self.threads, "verbose": self.verbose}
        return {**where, **override}
