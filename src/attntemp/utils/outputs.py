"""Output folders, the same for every writing command: checked before any work starts, existing
results never replaced without ``overwrite``, no empty folder left behind by a failed run, and one
writer at a time where two would clash (a lock file).

Errors name the field (``out``, ``overwrite``); the command line turns them into its flags.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

try:  # POSIX; elsewhere a run takes no lock
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable(name: str, path: Path) -> None:
    """Raise unless a file can be created where ``path`` is (or would be created): tried for real
    with a temporary file, so read-only mounts, permissions and files in the way all show."""
    base = nearest_existing(path)
    if not base.is_dir():
        raise ValueError(f"{name}={str(path)!r} is not allowed: {str(base)!r} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".attntemp-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{name}={str(path)!r} is not writable ({str(base)!r}: {exc.strerror})") from None


def shown(names: list[str], most: int = 3) -> str:
    """The first ``most`` of ``names`` for an error line, ``...`` when there are more."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def check_out(
    path: str | os.PathLike[str],
    results: Iterable[str] = (),
    overwrite: bool = False,
    name: str = "out",
    any_content: bool = False,
) -> Path:
    """The checked output folder: a folder (or nothing yet) that is writable and, unless
    ``overwrite``, holds none of ``results`` (or nothing at all, with ``any_content``)."""
    if not str(path).strip():
        raise ValueError(f"{name}={str(path)!r} is not allowed; expected a folder path")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{name}={str(out)!r} exists and is a file; expected a folder (new, or one to write into)")
    if out.is_dir() and not overwrite:
        found = sorted(p.name for p in out.iterdir()) if any_content else [r for r in results if (out / r).exists()]
        if found:
            raise ValueError(
                f"{name}={str(out)!r} already holds results ({shown(found)}); pass overwrite=True to replace them, "
                "or choose another folder"
            )
    check_writable(name, out)
    return out


@contextmanager
def output_folder(path: str | os.PathLike[str], scratch: Iterable[str] = ()) -> Iterator[Path]:
    """Create ``path`` (and missing parents) for a run; if the run fails, remove the folders it
    created that are still empty (after the ``scratch`` files in ``path``, e.g. a lock file), so a
    failed run leaves no empty ``out`` behind."""
    out = Path(path)
    made = []
    p = out.absolute()
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        if made:
            for name in scratch:
                (out / name).unlink(missing_ok=True)
        remove_empty(made)
        raise


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove each folder (deepest first, as listed) while it is empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _holder(handle: IO[str]) -> str:
    handle.seek(0)
    pid = handle.read().strip()
    return f" (pid {pid})" if pid.isdigit() else ""


@contextmanager
def exclusive(lock_file: Path, what: str, name: str = "out") -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (fcntl, released by the kernel even on ``kill -9``);
    raise at once, naming the holder's pid, when another process holds it."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(lock_file, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ValueError(
                f"{name}={str(lock_file.parent)!r} is in use by another {what}{_holder(handle)}; "
                "wait for it to finish (a rerun then resumes), or use another folder"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(folder: Path) -> None:
    """Give ``folder`` and everything under it the modes the umask gives new files (0666 & ~umask)
    and folders (0777 & ~umask): ``tempfile.mkdtemp`` and some writers make them private."""
    mask = umask()
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            os.chmod(Path(root) / d, 0o777 & ~mask)
        for f in files:
            os.chmod(Path(root) / f, 0o666 & ~mask)
    os.chmod(folder, 0o777 & ~mask)
