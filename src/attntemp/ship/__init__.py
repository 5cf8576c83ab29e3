"""Shipping a temperature: baked into the weights (a plain checkpoint) or exported as an engine's
own settings (transformers, vLLM, llama.cpp). Imports ``ops``, ``hf`` and ``utils``."""
