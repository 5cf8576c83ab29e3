"""attntemp: attention temperature as a measured, tuned and shippable knob.

Temperature ``T`` divides pre-softmax logits; the multiplier ``m = 1/T`` multiplies them.
"""

from .baking import bake, save_baked
from .core import entropy, tempered_softmax
from .engines import export
from .extend import extend_context, extended, restore_rope
from .learn import learnable
from .models import load_model
from .observe import AttentionStats, measure
from .patching import apply, patch, restore
from .spec import TemperatureSpec

__version__ = "0.1.0"

__all__ = [
    "AttentionStats",
    "TemperatureSpec",
    "__version__",
    "apply",
    "bake",
    "entropy",
    "export",
    "extend_context",
    "extended",
    "learnable",
    "load_model",
    "measure",
    "patch",
    "restore",
    "restore_rope",
    "save_baked",
    "tempered_softmax",
]
