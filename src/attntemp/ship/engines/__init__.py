"""The engines attntemp ships to, one module each, behind one registry: :data:`ENGINES`.

Each module (:mod:`.transformers`, :mod:`.llamacpp`, :mod:`.vllm`) holds all that engine's
knowledge: the settings its export writes, how its audit runs and reads it, how its verify runs
and compares it, and whether it is installed; its ``ENGINE`` (:class:`~.base.Engine`) is what the
verbs call. Nothing outside this folder names an engine: the verbs and their callers look it up
here (``tests/test_rules.py`` holds that).
"""

from __future__ import annotations

from . import llamacpp, transformers, vllm
from .base import Engine

ENGINES: dict[str, Engine] = {e.name: e for e in (transformers.ENGINE, llamacpp.ENGINE, vllm.ENGINE)}


def verified() -> tuple[str, ...]:
    """The engines ``attntemp verify`` runs, in registry order."""
    return tuple(name for name, e in ENGINES.items() if e.verify is not None)


def reading_gguf_arch() -> tuple[str, ...]:
    """The engines whose export takes a GGUF architecture name (``--gguf-arch``)."""
    return tuple(name for name, e in ENGINES.items() if e.reads_gguf_arch)
