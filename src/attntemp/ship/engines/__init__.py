"""The engines attntemp ships to, one module each, behind one registry: :data:`ENGINES`.

Each module (:mod:`.transformers`, :mod:`.llamacpp`, :mod:`.vllm`) holds all that engine's
knowledge: the settings its export writes, how its audit runs and reads it, how its verify runs
and compares it, and whether it is installed; its ``ENGINE`` (:class:`~.base.Engine`) is what the
verbs call. Nothing outside this folder names an engine: the verbs and their callers look it up
here (``tests/test_rules.py`` holds that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Engine

    ENGINES: dict[str, Engine]

# The registry's names, in order, and those ``verify`` runs: what a config's help and checks read,
# without importing an engine module (which imports torch). ``tests/ship/test_engines.py`` holds
# them to :data:`ENGINES`, built at its first read (:func:`__getattr__`).
ENGINE_NAMES = ("transformers", "llama.cpp", "vllm")
VERIFIED = ("llama.cpp", "vllm")


def _registry() -> dict[str, Engine]:
    """:data:`ENGINES`, its engine modules imported at the first call."""
    if "ENGINES" not in globals():
        from . import llamacpp, transformers, vllm

        globals()["ENGINES"] = {e.name: e for e in (transformers.ENGINE, llamacpp.ENGINE, vllm.ENGINE)}
    return globals()["ENGINES"]


def __getattr__(name: str) -> Any:
    """:data:`ENGINES` built on first read (lm-evaluation-harness's lazy registry is the model)."""
    if name != "ENGINES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _registry()


def verified() -> tuple[str, ...]:
    """The engines ``attntemp verify`` runs, in registry order."""
    return tuple(name for name, e in _registry().items() if e.verify is not None)


def reading_gguf_arch() -> tuple[str, ...]:
    """The engines whose export takes a GGUF architecture name (``--gguf-arch``)."""
    return tuple(name for name, e in _registry().items() if e.reads_gguf_arch)
