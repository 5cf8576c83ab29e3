"""attntemp: attention temperature as a measured, tuned and shippable knob.

Temperature ``T`` divides pre-softmax logits; the multiplier ``m = 1/T`` multiplies them.

The package's folders are its layers, each importing only from those before it (:data:`LAYERS`,
held by ``tests/test_layers.py``): ``utils`` < ``assets`` < ``ops`` < ``hf`` < ``evaluate`` <
``analysis`` < ``tune`` < ``ship`` < ``logits`` < ``report`` < ``advise`` < ``commands``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .utils.version import VERSION

# The folders of the package, bottom to top: a module imports only from its own folder and those
# before it (this __init__, __main__ and cli sit above them all). The one statement of the order:
# tests/test_layers.py enforces the imports against it and checks the doc above and docs/layout.md.
LAYERS = (
    "utils",
    "assets",
    "ops",
    "hf",
    "evaluate",
    "analysis",
    "tune",
    "ship",
    "logits",
    "report",
    "advise",
    "commands",
)

# The public names, each imported from its module on first use (PEP 562), so that `import
# attntemp` (and `attntemp --help`) does not load torch and transformers.
EXPORTS = {
    "AttentionStats": "analysis.measure",
    "measure": "analysis.measure",
    "monitor": "analysis.monitor",
    "learnable": "hf.learnable",
    "load_model": "hf.loading",
    "apply": "hf.patch",
    "patch": "hf.patch",
    "restore": "hf.patch",
    "extend_context": "hf.rope_scaling",
    "extended": "hf.rope_scaling",
    "restore_rope": "hf.rope_scaling",
    "entropy": "ops.softmax",
    "tempered_softmax": "ops.softmax",
    "TemperatureSpec": "ops.spec",
    "Rope": "ops.rope.params",
    "bake": "ship.bake",
    "save_baked": "ship.bake",
    "export": "ship.export",
    "AdviseConfig": "advise.config",
    "run_advise": "advise.run",
    "TuneConfig": "tune.config",
    "run_tune": "tune.runner",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports these
    from .advise.config import AdviseConfig
    from .advise.run import run_advise
    from .analysis.measure import AttentionStats, measure
    from .analysis.monitor import monitor
    from .hf.learnable import learnable
    from .hf.loading import load_model
    from .hf.patch import apply, patch, restore
    from .hf.rope_scaling import extend_context, extended, restore_rope
    from .ops.rope.params import Rope
    from .ops.softmax import entropy, tempered_softmax
    from .ops.spec import TemperatureSpec
    from .ship.bake import bake, save_baked
    from .ship.export import export
    from .tune.config import TuneConfig
    from .tune.runner import run_tune

__version__ = VERSION


def __getattr__(name: str) -> Any:
    """The public names of :data:`EXPORTS`, imported on first use."""
    if name in EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})


__all__ = [
    "AdviseConfig",
    "AttentionStats",
    "Rope",
    "TemperatureSpec",
    "TuneConfig",
    "__version__",
    "apply",
    "bake",
    "entropy",
    "export",
    "extend_context",
    "extended",
    "learnable",
    "load_model",
    "measure",
    "monitor",
    "patch",
    "restore",
    "restore_rope",
    "run_advise",
    "run_tune",
    "save_baked",
    "tempered_softmax",
]
