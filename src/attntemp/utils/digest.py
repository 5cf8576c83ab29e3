"""Digests of large files, streamed and cached: what a sweep keys its points on, so a checkpoint
changed in place (same names, sizes and tensor shapes, other weights) is told apart.

A file is read in 1 MiB chunks into ``hashlib.blake2b``; the digest is cached in a small JSON file
keyed by the file's resolved path with its size, ``mtime_ns`` and inode, so it is computed once
per version of the file. A cache that cannot be read or written is ignored (the digest is
computed again), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 20  # bytes read at a time


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _read_cache(cache: Path | None) -> dict[str, dict]:
    if cache is None:
        return {}
    try:
        found = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write_cache(cache: Path, entries: dict[str, dict]) -> None:
    """Replace ``cache`` atomically (a temporary file renamed over it); skipped when not writable."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".digests-")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, cache)
    except OSError:
        return


def file_digest(path: str | os.PathLike[str]) -> str:
    """blake2b (32 bytes, hex) of a file's bytes, read in :data:`CHUNK`-sized pieces."""
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def files_digest(paths: Iterable[Path], cache: Path | None = None) -> str:
    """One digest of ``paths`` (each file's name and contents, in the order given), with each
    file's own digest taken from ``cache`` when its size, mtime and inode are unchanged."""
    entries = _read_cache(cache)
    total = hashlib.blake2b(digest_size=16)
    changed = False
    for path in paths:
        key, stamp = str(Path(path).resolve()), _stamp(Path(path))
        hit = entries.get(key)
        if not (isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("digest"), str)):
            hit = {"stamp": stamp, "digest": file_digest(path)}
            entries[key], changed = hit, True
        total.update(Path(path).name.encode() + b"\0" + hit["digest"].encode() + b"\n")
    if changed and cache is not None:
        _write_cache(cache, entries)
    return total.hexdigest()
