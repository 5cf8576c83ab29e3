"""Errors that are neither bad input nor a bug in attntemp: a program attntemp runs failed."""

from __future__ import annotations


class ExternalToolError(RuntimeError):
    """A program attntemp runs (llama-perplexity, ``convert_hf_to_gguf.py``, vLLM, pip) failed.

    The message names the program and ends with the last lines it printed. The CLI prints it as one
    line and exits 1 (the input was fine; the tool it drove was not), never as a traceback."""
