"""Hugging Face transformers models: introspection, RoPE extension, the temperature patch,
learnable temperatures and loading. Imports ``attntemp.ops`` and ``attntemp.utils`` only."""
