"""Evaluation: text sources and held-out windows, the one LM-loss module, registered tasks and their
scoring store, and two wings: ``harness/`` (lm-evaluation-harness) and ``sweep/`` (the resumable
sweep store and runner). Imports ``ops``, ``hf`` and ``utils``."""

from ..utils.deprecation import legacy_getattr

__getattr__ = legacy_getattr(__name__)  # HarnessOptions, read here before 0.2.0: attntemp.utils.deprecation.RENAMED
