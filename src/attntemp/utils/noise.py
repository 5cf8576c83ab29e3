"""Library noise kept off the terminal unless asked for (``--verbose``): transformers' progress bars
("Loading weights", "Writing model shards") and its info and warning lines, for one block, its
settings as they were afterwards. transformers is imported when the block starts, not before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[None]:
    """Inside: transformers' bars off and its logging at ERROR (unless ``verbose``)."""
    if verbose:
        yield
        return
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
