"""The package version, in one place (``attntemp.__version__`` and baked checkpoints read it)."""

VERSION = "0.3.0"
