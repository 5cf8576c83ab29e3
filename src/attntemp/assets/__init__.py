"""Files shipped inside the package: ``tiny/`` is the embedded default model (see its README.md);
``configs/`` the real models' attention and RoPE configs that ``attntemp audit`` is tested on;
``remote_code/`` the modules a schedule checkpoint and attntemp's vLLM plugin carry."""

from __future__ import annotations

import importlib.resources
import pathlib


def tiny_path() -> pathlib.Path:
    """Folder of the embedded tiny RoPE model (``config.json``, weights, tokenizer, model card)."""
    return pathlib.Path(str(importlib.resources.files("attntemp") / "assets" / "tiny"))


def configs_path() -> pathlib.Path:
    """Folder of the shipped model configs (``<name>.json``; ``attntemp audit --config <name>``)."""
    return pathlib.Path(str(importlib.resources.files("attntemp") / "assets" / "configs"))


def shipped_configs() -> list[str]:
    """The names of the shipped configs, sorted (``gpt_oss``, ``llama3_1``, ...)."""
    return sorted(p.stem for p in configs_path().glob("*.json"))


def remote_code_path() -> pathlib.Path:
    """Folder of the remote-code modules (:mod:`attntemp.assets.remote_code`), copied as they are."""
    return pathlib.Path(str(importlib.resources.files("attntemp") / "assets" / "remote_code"))
