"""Seeing attention: statistics per layer, head and position of a real model (``measure``), the
``attntemp measure`` run, and their plots. Imports ``ops``, ``hf`` and ``evaluate`` (text)."""
