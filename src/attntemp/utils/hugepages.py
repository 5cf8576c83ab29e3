"""Transparent huge pages for torch's large CPU tensors.

On Linux, glibc serves every allocation of more than 32 MiB with a fresh ``mmap`` and hands it
back with ``munmap``, so each large activation of a long forward is faulted in 4 KiB page by
page: about 3.1 million page faults in one SmolLM2 forward at 16384 tokens, where a norm's
elementwise pass over a ``[L, hidden]`` tensor then spends most of its time in the kernel.
PyTorch's CPU allocator (c10's ``alloc_cpu``) asks for transparent huge pages
(``madvise(MADV_HUGEPAGE)``) on allocations of 2 MiB or more when ``THP_MEM_ALLOC_ENABLE=1`` is
set, which cuts those faults about 27x; the numbers are unchanged (only where the memory
lies changes). torch reads the variable once, at its first allocation, so it must be set before
torch is imported: the ``attntemp`` command sets it (:func:`prefer_huge_pages`), a Python user
sets it in the environment. The kernel must allow it: ``/sys/kernel/mm/transparent_hugepage/enabled``
``always`` or ``madvise`` (:func:`kernel_setting`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VARIABLE = "THP_MEM_ALLOC_ENABLE"
SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def kernel_setting(path: Path = SETTING) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``; the bracketed
    word of the sysfs file), or None where there is no such file (not Linux, or no THP)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def prefer_huge_pages(environ: dict[str, str] | None = None, modules: dict | None = None) -> bool:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` unless the user set it (any value, ``0`` included, is kept) or
    torch is already imported (too late: torch has read it). Returns whether huge pages are asked
    for from now on in this process and its children."""
    env = os.environ if environ is None else environ
    loaded = sys.modules if modules is None else modules
    if VARIABLE in env:
        return env[VARIABLE] == "1"
    if "torch" in loaded or sys.platform != "linux":
        return False
    env[VARIABLE] = "1"
    return True
