"""One writer per output folder: an exclusive ``flock`` on a lock file, taken before any work and
held to the last write, that names the holder's pid to a second writer and is removed when the
run ends (a user's folder keeps no file of attntemp's bookkeeping).

Removing a lock file its holder still locks is the classic race (a second writer opens the old
file just before it goes, and locks it after the holder lets go, while a third creates a new one):
each writer checks, once it holds the lock, that the path still names the file it locked, and
opens it again otherwise. A lock this process holds already is taken again at no cost (a run that
claimed its folder early calls helpers that take the same lock).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

try:  # POSIX; elsewhere a run takes no lock
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".attntemp.lock"  # one writer per output folder (sweep keeps its own .sweep.lock)
_HELD: dict[str, int] = {}  # lock files this process holds: how many holders nest
TRIES = 20  # opens of a lock file removed under us before giving up (each needs another writer's exit)


def _holder(handle: IO[str]) -> str:
    handle.seek(0)
    pid = handle.read().strip()
    return f" (pid {pid})" if pid.isdigit() else ""


def _same_file(handle: IO[str], path: Path) -> bool:
    """True when ``path`` still names the file ``handle`` has open (not removed or replaced)."""
    try:
        here, there = os.fstat(handle.fileno()), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _in_use(name: str, folder: Path, what: str, holder: str) -> ValueError:
    return ValueError(
        f"{name}={str(folder)!r} is in use by another {what}{holder}; "
        "wait for it to finish (a rerun then resumes), or use another folder"
    )


def _acquire(lock_file: Path, what: str, name: str, folder: Path) -> IO[str]:
    """The open, locked ``lock_file``; refused at once, naming the holder's pid, when another holds it."""
    assert fcntl is not None
    for _ in range(TRIES):
        handle = open(lock_file, "a+")  # held past this function: closed by exclusive
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(handle)
            handle.close()
            raise _in_use(name, folder, what, holder) from None
        if _same_file(handle, lock_file):
            return handle
        fcntl.flock(handle, fcntl.LOCK_UN)  # its holder removed it as we opened it: open the new one
        handle.close()
    raise _in_use(name, folder, what, "")


@contextmanager
def exclusive(lock_file: Path, what: str, name: str = "out", folder: Path | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (fcntl, released by the kernel even on ``kill -9``)
    for the block, the pid written in it; raise at once, naming the holder's pid, when another
    process holds it (``name``=``folder``, default the lock file's folder, is in use by another
    ``what``). The file is removed when the block ends, while still locked."""
    key = os.path.abspath(lock_file)
    if key in _HELD or fcntl is None:  # this process holds it already (or cannot lock at all)
        _HELD[key] = _HELD.get(key, 0) + 1
        try:
            yield
        finally:
            _HELD[key] -= 1
            if not _HELD[key]:
                del _HELD[key]
        return
    handle = _acquire(lock_file, what, name, lock_file.parent if folder is None else folder)
    _HELD[key] = 1
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        del _HELD[key]
        with suppress(OSError):
            lock_file.unlink()  # before the unlock: a writer that opened it checks it is still there
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
