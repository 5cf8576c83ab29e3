"""Tuning m = 1/T: global search against a task, label-free entropy matching, gradient training
of per-head multipliers, and the runner that checks a tuned spec on held-out text. Imports
``ops``, ``hf``, ``evaluate`` and ``analysis``."""
