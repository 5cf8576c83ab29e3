"""attntemp: attention temperature as a measured, tuned and shippable knob.

Temperature ``T`` divides pre-softmax logits; the multiplier ``m = 1/T`` multiplies them.

The package's folders are its layers, each importing only from those before it (:data:`LAYERS`,
held by ``tests/test_layers.py``): ``utils`` < ``assets`` < ``ops`` < ``hf`` < ``evaluate`` <
``analysis`` < ``tune`` < ``ship`` < ``logits`` < ``report`` < ``advise`` < ``commands``. The
modules of the flat layout before it
stay importable under their old names (``attntemp.rope``, ``attntemp.attention``, ...): see
:data:`MOVED`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .utils import deprecation
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

# Old module names (the flat ones before the layered folders, evaluate's before its wings) -> where each now lives.
MOVED = {
    "attention": "ops.attention",
    "core": "ops.softmax",
    "rope": "ops.rope",
    "schedules": "ops.schedules",
    "spec": "ops.spec",
    "stats": "ops.attention_stats",
    "search1d": "ops.search",
    "extend": "hf.rope_scaling",
    "patching": "hf.patch",
    "models": "hf.loading",
    "learn": "tune.gradient",
    "observe": "analysis.measure",
    "plots": "analysis.plots",
    "data": "evaluate.corpus",
    "tasks": "evaluate.tasks",
    "sweep": "evaluate.sweep",
    "tiny_eval": "evaluate.lm",
    "evidence": "tune.runner",
    "baking": "ship.bake",
    "engines": "ship.export",
    "calibration": "logits.calibration",
    "distill": "logits.distill",
    "sampling": "logits.sampling",
    "demo": "advise.demo",
    "tables": "report.tables",
    # evaluate's wings (0.2.0)
    "evaluate.harness_run": "evaluate.harness.run",
    "evaluate.harness_table": "evaluate.harness.table",
    "evaluate.harness_tasks": "evaluate.harness.lookup",
    "evaluate.lm_eval_tasks": "evaluate.harness.task_folder",
    "evaluate.sweep_table": "evaluate.sweep.table",
    "evaluate.store": "evaluate.sweep.store",
    # ship's two llamacpp.py (0.2.0): the binary runner is llamacpp_binary, engines.llamacpp the engine
    "ship.llamacpp": "ship.llamacpp_binary",
    "advise.report": "advise.advice_page",  # no module repeats the report/ layer's name
    "ship.audit_proxy": "ship.audit.proxy",  # ship's audit wing (0.2.0)
    "ship.audit_readings": "ship.audit.reading_checks",
    "ship.audit_reference": "ship.audit.expectation",
    "ops.rope_factors": "ops.rope.factors",  # ops' RoPE wing (0.2.0)
    "hf.source": "hf.models.where",  # hf's wing of where --model comes from (0.2.0)
    "hf.shipped": "hf.models.shipped",
}


# Where an old module's names went to more than one place, the warning says so.
MOVED_NOTES = {
    "engines": "attntemp.ship.export (export) and attntemp.ship.engines.<engine> (each engine's factors)",
    "tiny_eval": (
        "attntemp.evaluate.lm (scoring), attntemp.evaluate.corpus (windows), attntemp.evaluate.tasks (passkeys)"
    ),
}


def _moved(short: str) -> ModuleType:
    """The module an old flat name now is, with a DeprecationWarning naming where it went."""
    new = MOVED_NOTES.get(short, f"{__name__}.{MOVED[short]}")
    deprecation.warn(f"{__name__}.{short}", new, stacklevel=4)
    return importlib.import_module(f"{__name__}.{MOVED[short]}")


class _MovedFinder:
    """``import attntemp.rope`` gives the module ``attntemp.ops.rope`` itself (one module object).
    A meta path finder and loader by protocol (``find_spec``; ``create_module``, ``exec_module``),
    not by the ``importlib.abc`` classes, whose import takes importlib.resources along (20 ms of
    every ``attntemp --help``)."""

    def find_spec(self, fullname, path=None, target=None):
        short = fullname.removeprefix(__name__ + ".")
        return importlib.util.spec_from_loader(fullname, self) if short in MOVED and short != fullname else None

    def create_module(self, spec) -> ModuleType:
        module = _moved(spec.name.removeprefix(__name__ + "."))
        self.specs = {**getattr(self, "specs", {}), module.__name__: module.__spec__}
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (it was imported under its new name); put back the spec that the import
        machinery replaced, so the module keeps saying where it lives."""
        module.__spec__ = self.specs[module.__name__]


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


def __getattr__(name: str) -> Any:
    """The public names of :data:`EXPORTS`, imported on first use; ``attntemp.rope`` (attribute
    access, without an import statement) for the moved modules."""
    if name in EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in MOVED:
        return _moved(name)
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
