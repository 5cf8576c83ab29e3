"""attntemp: attention temperature as a measured, tuned and shippable knob.

Temperature ``T`` divides pre-softmax logits; the multiplier ``m = 1/T`` multiplies them.
"""

from .core import entropy, tempered_softmax

__version__ = "0.1.0"

__all__ = ["__version__", "entropy", "tempered_softmax"]
