"""Evaluation: text sources and held-out windows, the one LM-loss module, registered tasks and their
scoring store, and two wings: ``harness/`` (lm-evaluation-harness) and ``sweep/`` (the resumable
sweep store and runner). Imports ``ops``, ``hf`` and ``utils``."""


def __getattr__(name: str) -> type:
    """``attntemp.evaluate.HarnessOptions`` (before 0.2.0) is ``attntemp.evaluate.harness.HarnessOptions``,
    with a DeprecationWarning; ``attntemp.evaluate.harness`` is the lm-eval wing now, its function
    ``attntemp.evaluate.harness.harness``."""
    if name == "HarnessOptions":
        import importlib

        from ..utils import deprecation

        deprecation.warn(f"{__name__}.{name}", f"{__name__}.harness.{name}")
        return importlib.import_module(f"{__name__}.harness.paired").HarnessOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
