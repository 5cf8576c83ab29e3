"""Timed probes, cached per machine: the faster CPU dtype for a model's linear layers
(:mod:`.dtype`) and the faster causal-attention kernel for its heads (:mod:`.kernel`)."""
