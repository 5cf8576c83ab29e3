"""Evaluation: text sources and held-out windows, the one LM-loss module, registered tasks, and the
resumable sweep store and runner. Imports ``ops``, ``hf`` and ``utils``."""

# The lm-evaluation-harness bridge (lm-eval itself is imported only when it runs). Bound here, after
# its module loads, so that ``attntemp.evaluate.harness`` is the function, not the module.
from .harness import HarnessOptions, harness

__all__ = ["HarnessOptions", "harness"]
