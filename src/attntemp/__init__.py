"""attntemp: attention temperature as a measured, tuned and shippable knob.

Temperature ``T`` divides pre-softmax logits; the multiplier ``m = 1/T`` multiplies them.
"""

from .core import entropy, tempered_softmax
from .extend import extend_context, extended, restore_rope
from .models import load_model
from .patching import apply, patch, restore
from .spec import TemperatureSpec

__version__ = "0.1.0"

__all__ = [
    "TemperatureSpec",
    "__version__",
    "apply",
    "entropy",
    "extend_context",
    "extended",
    "load_model",
    "patch",
    "restore",
    "restore_rope",
    "tempered_softmax",
]
