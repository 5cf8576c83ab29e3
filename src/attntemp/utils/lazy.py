"""A module imported on first use, so the torch-free bottom (every command's config, ``--help``)
can sit in modules that also hold tensor math.

A module that does its math with torch but whose names (a registry, a dataclass, a check) a config
needs writes::

    if TYPE_CHECKING:
        import torch
    else:
        torch = lazy("torch")

The type checker sees the real module; at run time ``torch`` is imported at the first attribute
read (``torch.tensor``, ``torch.Tensor``), never at import. Unlike ``importlib.util.LazyLoader``
(and the ``lazy_loader`` package built on it), nothing enters ``sys.modules`` until then, so
"``torch`` is not in ``sys.modules``" keeps meaning "torch was not imported"
(``tests/test_layers.py`` holds the configs to it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import torch


class LazyModule(types.ModuleType):
    """Stands for module ``name``: the first attribute read imports it and copies its namespace in
    (later reads are plain attribute reads); a name the module serves itself (its own
    ``__getattr__``) is kept once read."""

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name__)
        if "__file__" not in self.__dict__:  # the first read: the whole namespace at once
            self.__dict__.update(module.__dict__)
        value = getattr(module, attr)
        self.__dict__[attr] = value
        return value


def lazy(name: str) -> Any:
    """Module ``name``: itself when already imported, else a :class:`LazyModule` for it."""
    return sys.modules.get(name) or LazyModule(name)


def is_tensor(value: Any) -> TypeGuard[torch.Tensor]:
    """Whether ``value`` is a torch tensor, without importing torch (none exists before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.is_tensor(value))
