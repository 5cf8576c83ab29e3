"""Evaluation: text sources and held-out windows, the one LM-loss module, registered tasks and their
scoring store, and two wings: ``harness/`` (lm-evaluation-harness) and ``sweep/`` (the resumable
sweep store and runner). Imports ``ops``, ``hf`` and ``utils``."""
