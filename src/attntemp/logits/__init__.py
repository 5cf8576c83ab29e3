"""Temperature on output logits, not attention: calibration (temperature scaling), distillation
and sampling. Imports ``ops`` and ``utils`` only."""
