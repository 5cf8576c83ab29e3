"""Run vLLM on given tokens: its own venv, attntemp's schedule plugin installed there, and
``scripts/vllm_logprobs.py`` returning each row's prompt log-probabilities.

vLLM pins its own torch and transformers, so it runs as a subprocess: ``scripts/vllm_logprobs.py``
under ``~/.cache/attntemp/engines/vllm-cpu-*/bin/python`` (``scripts/build_vllm_cpu.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch

from ..utils.errors import ExternalToolError
from . import remote_code
from .engine_common import engines_cache

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "vllm_logprobs.py"


def find_vllm(engine_dir: str | None) -> Path:
    """The python of a venv with vLLM: ``engine_dir``/bin/python, else the newest in the engines cache."""
    if engine_dir:
        found = [Path(engine_dir).expanduser() / "bin" / "python"]
    else:
        found = sorted(engines_cache().glob("vllm-cpu-*/bin/python"), reverse=True)
    for python in found:
        if python.is_file() and os.access(python, os.X_OK):
            return python
    where = f"engine_dir={engine_dir!r}" if engine_dir else f"{engines_cache()}/vllm-cpu-*"
    raise FileNotFoundError(f"no vLLM venv in {where}; install it with `bash scripts/build_vllm_cpu.sh`")


def ensure_plugin(python: Path, work: Path) -> list[str]:
    """Install the schedule plugin (remote_code.write_vllm_plugin) into vLLM's venv; the command."""
    folder = remote_code.write_vllm_plugin(work / "vllm_plugin")
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(folder)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise ExternalToolError(f"installing the vLLM schedule plugin failed: {done.stderr[-800:]}")
    return cmd


def run_logprobs(
    python: Path,
    model_dir: Path,
    ids: torch.Tensor | list[list[int]],
    overrides,
    top: int,
    work: Path,
    max_model_len: int | None = None,
    allow_long: bool = True,
) -> dict:
    """``scripts/vllm_logprobs.py`` in vLLM's venv on the rows of ``ids`` (``[C, L]`` or lists of
    token ids), served to ``max_model_len`` (default: the longest row + 1). ``allow_long``: let
    ``--max-model-len`` pass the length vLLM derives from the config (``VLLM_ALLOW_LONG_MAX_MODEL_LEN``)."""
    rows = ids.tolist() if isinstance(ids, torch.Tensor) else [list(r) for r in ids]
    src, out = work / "ids.json", work / "vllm_out.json"
    src.write_text(json.dumps(rows))
    cmd = [str(python), str(SCRIPT), "--model", str(model_dir), "--ids", str(src), "--out", str(out)]
    cmd += ["--max-model-len", str(max_model_len or max(len(r) for r in rows) + 1), "--top", str(top)]
    cmd += ["--hf-overrides", json.dumps(overrides)] if overrides else []
    # the windows may pass max_position_embeddings (no RoPE change): vLLM refuses that unless told
    env = {**os.environ, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1" if allow_long else "0"}
    out.unlink(missing_ok=True)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=env)
    if not out.is_file():  # written last and atomically: present means complete (see the script)
        raise ExternalToolError(f"vLLM exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
    return {**json.loads(out.read_text()), "command": cmd}


def vllm_version(python: Path) -> str:
    """The vLLM version installed in ``python``'s venv (from its metadata, without importing vLLM)."""
    code = "import importlib.metadata as m; print(m.version('vllm-cpu') if 'vllm-cpu' in "
    code += "{d.metadata['Name'] for d in m.distributions()} else m.version('vllm'))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise ExternalToolError(f"cannot read vLLM's version in {python}: {done.stderr[-400:]}")
    return done.stdout.strip()
