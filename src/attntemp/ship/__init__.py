"""Shipping a temperature: baked into the weights (a plain checkpoint) or exported as an engine's
own settings, a checkpoint carrying a position schedule as remote code, ``audit`` (do the engines
apply a config as meant) and ``verify`` (the engines run on what is shipped). Each engine's
knowledge is its module in :mod:`attntemp.ship.engines`; the verbs dispatch through its registry.
Imports ``ops``, ``hf``, ``evaluate``, ``assets`` and ``utils``."""
