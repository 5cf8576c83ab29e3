"""Files shipped inside the package: ``tiny/`` is the embedded default model (see its README.md)."""

from __future__ import annotations

import importlib.resources
import pathlib


def tiny_path() -> pathlib.Path:
    """Folder of the embedded tiny RoPE model (``config.json``, weights, tokenizer, model card)."""
    return pathlib.Path(str(importlib.resources.files("attntemp") / "assets" / "tiny"))
