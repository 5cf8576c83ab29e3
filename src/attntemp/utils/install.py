"""Putting a finished folder in place atomically, and cleaning up after bakes that were killed.

A bake writes ``.NAME.tmp-PID-XXXX`` next to ``NAME`` and, once it is verified, renames it in:
``NAME`` (if any) becomes ``.NAME.old-PID-XXXX``, the new folder becomes ``NAME``, the old one is
deleted. A ``kill -9`` can stop this anywhere; the next bake into the same parent folder
(:func:`recover`) puts an orphaned ``.NAME.old-*`` back as ``NAME`` when ``NAME`` is missing (the
old checkpoint is never lost), deletes it when ``NAME`` is in place, and deletes the
``.NAME.tmp-*`` folders of bakes that are no longer running. A folder's owner is the PID in its
name; names from before PIDs were recorded count as abandoned after :data:`LEGACY_AGE` seconds.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from . import outputs

LOG = logging.getLogger("attntemp")
LEGACY_AGE = 3600.0
_LEFT = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-(?:(?P<pid>\d+)-)?[^.]+")


def alive(pid: int) -> bool:
    """True when a process ``pid`` exists (signal 0 probes without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _abandoned(path: Path, pid: str | None) -> bool:
    if pid is not None:
        return int(pid) != os.getpid() and not alive(int(pid))
    return time.time() - path.stat().st_mtime > LEGACY_AGE


def recover(parent: Path) -> list[str]:
    """Undo what killed bakes left in ``parent`` (see the module doc); returns what was done."""
    done: list[str] = []
    if not parent.is_dir():
        return done
    for path in sorted(parent.iterdir()):
        match = _LEFT.fullmatch(path.name)
        if match is None or not path.is_dir() or not _abandoned(path, match["pid"]):
            continue
        target = parent / match["name"]
        if match["kind"] == "old" and not target.exists():
            os.rename(path, target)
            done.append(f"recovered {target} from {path.name} (a bake was killed while replacing it)")
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path.name} (left by a killed bake)")
    for line in done:
        LOG.warning("attntemp bake: %s", line)
    return done


def target(out: str | os.PathLike[str]) -> Path:
    """``out`` as the folder it names: resolved when it holds ``..`` (``D/sub/..`` is ``D``, whose
    name and parent the rename needs: ``..`` has neither), else as given (a symlinked ``out`` stays
    the link)."""
    path = Path(out)
    return path.resolve() if ".." in path.parts else path


def staging(out: Path) -> Path:
    """A new private folder next to ``out`` named for this process: ``.NAME.tmp-PID-XXXX``."""
    out = target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-{os.getpid()}-"))


def install(tmp: Path, out: Path) -> None:
    """Give ``tmp`` the umask's modes and rename it to ``out`` (an old ``out`` removed last)."""
    out = target(out)
    outputs.honour_umask(tmp)
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-{os.getpid()}-"))
    os.rename(out, old)  # replaces the empty placeholder folder atomically
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old, out)
        raise
    shutil.rmtree(old)


def _inside(a: Path, b: Path) -> bool:
    """True when ``a`` is ``b`` or lies under it (both resolved)."""
    return a == b or b in a.parents


def check_target(name: str, out: Path, keep: dict[str, Path]) -> None:
    """Refuse an ``out`` whose replacement would delete the current folder, a parent of it, or one
    of ``keep`` (e.g. the spec file or the model's own folder)."""
    target, here = out.resolve(), Path.cwd().resolve()
    if _inside(here, target):
        raise ValueError(f"{name}={str(out)!r} is the current folder or holds it ({target}); bake into a new folder")
    for what, path in keep.items():
        if _inside(path.resolve(), target):
            raise ValueError(f"{name}={str(out)!r} holds {what} ({path}); replacing it would delete that")
