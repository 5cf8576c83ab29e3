"""Evaluation: text sources and held-out windows, the one LM-loss module, registered tasks, and the
resumable sweep store and runner. Imports ``ops``, ``hf`` and ``utils``."""
