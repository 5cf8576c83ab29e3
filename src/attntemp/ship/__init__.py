"""Shipping a temperature: baked into the weights (a plain checkpoint) or exported as an engine's
own settings (transformers, vLLM, llama.cpp), a checkpoint carrying a position schedule as remote
code, and ``verify``: the engines run on what is shipped. Imports ``ops``, ``hf``, ``evaluate``
and ``utils``."""
