"""Output folders, one rule for every writing command (docs/errors.md, "Output folders"): checked
before any work starts; a folder holding the command's own outputs (:class:`Outputs`) is refused
without ``overwrite``; ``overwrite`` removes the command's own earlier outputs, all of them (also
those this run will not write again), and nothing else; an output folder of the command's (a
checkpoint, a run's folder) is replaced only when everything in it is what the command writes
there; no empty folder left behind by a failed run; one writer at a time where two would clash.

Errors name the field (``out``, ``overwrite``); the command line turns them into its flags.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from .digest import file_digest
from .locks import LOCK_NAME, exclusive

__all__ = ["LOCK_NAME", "exclusive"]  # the lock's (utils.locks), read here too

RECORD = ".attntemp-outputs.json"  # the files a run wrote in its folder, with their digests
SIGNATURES = (b"attntemp", b"Matplotlib")  # in what attntemp writes before the record existed


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


CHECKPOINT = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "chat_template.*",
    "attntemp_spec.json",
    "modeling_attntemp_schedule.py",
)  # what `bake` writes in a checkpoint folder (save_pretrained's files and attntemp's record)


@dataclass(frozen=True)
class Outputs:
    """What a command writes in its ``out``: ``files`` by name, and ``folders`` (names or fnmatch
    patterns) each with the fnmatch patterns of the files it writes inside (recursively)."""

    files: tuple[str, ...] = ()
    folders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def present(self, out: Path) -> list[str]:
        """The command's own outputs found in ``out``, sorted."""
        if not out.is_dir():
            return []
        return sorted(
            p.name + ("/" if p.is_dir() else "")
            for p in out.iterdir()
            if (p.name in self.files and not p.is_dir()) or (p.is_dir() and self.folder_patterns(p.name) is not None)
        )

    def folder_patterns(self, name: str) -> tuple[str, ...] | None:
        return next((pats for f, pats in self.folders.items() if fnmatch.fnmatchcase(name, f)), None)

    def foreign(self, out: Path) -> list[str]:
        """Files inside the command's own folders in ``out`` that it does not write there."""
        found = []
        for folder in (out / n.rstrip("/") for n in self.present(out) if n.endswith("/")):
            pats = self.folder_patterns(folder.name) or ()
            for p in sorted(folder.rglob("*")):
                if not p.is_dir() and not any(fnmatch.fnmatchcase(p.name, pat) for pat in pats):
                    found.append(str(p.relative_to(out)))
        return found


def holds_results(name: str, out: Path, found: list[str]) -> ValueError:
    """The refusal of a folder holding the command's own results ``found``."""
    return ValueError(
        f"{name}={str(out)!r} already holds results ({shown(found)}); pass overwrite=True to replace them, "
        "or choose another folder"
    )


def check_out(
    path: str | os.PathLike[str],
    results: Iterable[str] | Outputs = (),
    overwrite: bool = False,
    name: str = "out",
    any_content: bool = False,
) -> Path:
    """The checked output folder: a folder (or nothing yet) that is writable and, unless
    ``overwrite``, holds none of ``results`` (or nothing at all, with ``any_content``). With
    ``overwrite``, each own folder must hold only what the command writes there."""
    if not str(path).strip():
        raise ValueError(f"{name}={str(path)!r} is not allowed; expected a folder path")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{name}={str(out)!r} exists and is a file; expected a folder (new, or one to write into)")
    own = results if isinstance(results, Outputs) else Outputs(tuple(results))
    if out.is_dir() and not overwrite:
        found = (
            sorted(p.name for p in out.iterdir() if p.name not in (LOCK_NAME, RECORD))
            if any_content
            else own.present(out)
        )
        if found:
            raise holds_results(name, out, found)
    if out.is_dir() and overwrite:
        strangers = not_ours(out, own)
        if strangers:
            raise ValueError(
                f"{name}={str(out)!r} holds {shown(strangers)} under this command's own names, not written by it "
                f"(nor by it as it is now: {RECORD} does not list it, or it changed since); overwrite=True replaces "
                "only its own files: move that away, or choose another folder"
            )
    foreign = own.foreign(out) if out.is_dir() else []
    if foreign:
        raise ValueError(
            f"{name}={str(out)!r} holds {shown(foreign)}, not written by this command; overwrite=True replaces only "
            "its own files: move that away, or choose another folder"
        )
    check_writable(name, out)
    return out


def check_only(name: str, given: str | os.PathLike[str], out: Path, patterns: tuple[str, ...], what: str) -> None:
    """Refuse a folder ``out`` (the folder ``given`` names, resolved) holding anything that is not
    ``what`` (files matching ``patterns``): a folder replaced whole (a checkpoint) must not take a
    user's files with it."""
    if not out.is_dir():
        return
    other = [
        str(p.relative_to(out)) + ("/" if p.is_dir() else "")
        for p in sorted(out.iterdir())
        if p.is_dir() or not any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)
    ]
    if other:
        where = f"{name}={str(given)!r}" + (f" ({out})" if str(given) != str(out) else "")
        raise ValueError(
            f"{where} holds {shown(other)}, not {what}'s; overwrite=True replaces only {what}: "
            "move that away, or choose another folder"
        )


def _head(path: Path, size: int = 1 << 16) -> bytes:
    """The first ``size`` bytes of a file (a signature is looked for there, not in the whole file)."""
    with open(path, "rb") as f:
        return f.read(size)


def _recorded(out: Path) -> dict[str, str]:
    try:
        files = json.loads((out / RECORD).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def _as_outputs(results: Iterable[str] | Outputs) -> Outputs:
    return results if isinstance(results, Outputs) else Outputs(tuple(results))


def record(out: Path, own: Iterable[str] | Outputs) -> None:
    """Note the command's own top-level files in ``out`` with their digests (:data:`RECORD`), so a
    later ``overwrite`` replaces them and nothing a user put there under the same names."""
    files = {**_recorded(out)}
    for n in _as_outputs(own).present(out):
        p = out / n
        if not n.endswith("/") and p.is_file() and not p.is_symlink():
            files[n] = file_digest(p)
    tmp = out / (RECORD + ".tmp")
    tmp.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    tmp.replace(out / RECORD)


def not_ours(out: Path, own: Outputs) -> list[str]:
    """The command's own top-level file names in ``out`` that it did not write: not in the record
    with the same digest, and (for a folder from before the record) without attntemp's signature in
    their first 64 KiB. A symlink under an own name is never ours to replace through."""
    files, strangers = _recorded(out), []
    for n in own.present(out):
        p = out / n
        if n.endswith("/"):
            continue
        if p.is_symlink():
            strangers.append(n)
        elif n in files:
            if files[n] != file_digest(p):
                strangers.append(n)
        elif not any(s in _head(p) for s in SIGNATURES):
            strangers.append(n)
    return strangers


def clear(out: Path, results: Iterable[str] | Outputs) -> list[str]:
    """Remove the command's own earlier outputs from ``out`` (checked by :func:`check_out` with
    ``overwrite``: its own folders hold only its files); returns what was removed."""
    own = results if isinstance(results, Outputs) else Outputs(tuple(results))
    gone = own.present(out)
    for n in gone:
        p = out / n.rstrip("/")
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()  # a file, or a link (to a folder too): the link goes, never what it points to
    return gone


def move_in(staged: Path, out: Path) -> None:
    """Move each file and folder of ``staged`` into ``out`` (made if missing), in place of one of the
    same name (the command's own: checked and cleared before), then remove ``staged``."""
    out.mkdir(parents=True, exist_ok=True)
    for p in sorted(staged.iterdir()):
        dest = out / p.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        elif dest.exists() or dest.is_symlink():
            dest.unlink()
        os.rename(p, dest)
    staged.rmdir()


@contextmanager
def output_folder(
    path: str | os.PathLike[str],
    scratch: Iterable[str] = (),
    replace: Iterable[str] | Outputs = (),
    writer: str | None = None,
    own: Iterable[str] | Outputs | None = None,
) -> Iterator[Path]:
    """Create ``path`` (and missing parents) for a run, after removing the command's own earlier
    outputs ``replace`` (pass them with ``overwrite``, see :func:`clear`); if the run fails, remove
    the folders it created that are still empty (after the ``scratch`` files in ``path``, e.g. a
    lock file), so a failed run leaves no empty ``out`` behind. ``writer`` (the command's name): hold
    :data:`LOCK_NAME` in ``path`` for the run, taken before anything is removed, so a second writer
    is refused naming the first's pid and never clears or mixes the first's files (a run holds it
    from its start where it :func:`claimed` the folder). ``own``: the command's own outputs, refused
    when present and not ``replace``-d (written since the check by a run that ended since), recorded
    with their digests when the run ends well (:func:`record`)."""
    out = Path(path)
    made = _make(out)
    scratch = (*scratch, *((LOCK_NAME,) if writer else ()))
    try:
        with exclusive(out / LOCK_NAME, writer) if writer else nullcontext():
            if own is not None and not replace and (found := _as_outputs(own).present(out)):
                raise holds_results("out", out, found)  # written since the check, by a writer that ended since
            clear(out, replace)
            yield out
            if own is not None:
                record(out, own)
    except BaseException:
        if made:
            for name in scratch:
                (out / name).unlink(missing_ok=True)
        remove_empty(made)
        raise


def _make(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; returns those made, deepest first."""
    made, p = [], folder.absolute()
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return made


@contextmanager
def claimed(
    path: str | os.PathLike[str], writer: str, name: str = "out", lock_file: Path | None = None
) -> Iterator[Path]:
    """One ``writer`` in ``path`` from the start of a run to its last write: the folder checked (a
    folder or nothing yet, writable), made, and locked (:data:`LOCK_NAME` in it, or ``lock_file``:
    beside a folder replaced whole) before any other check or work, so a second run on it is
    refused at once, naming the first's pid, and the checks of what it holds (:func:`check_out`)
    see what the first left. The lock file goes when the run ends; a failed run leaves no folder
    it made."""
    out = Path(path)
    check_out(out, name=name)
    lock = lock_file or out / LOCK_NAME
    made = _make(lock.parent)
    try:
        with exclusive(lock, writer, name=name, folder=out):
            yield out
    except BaseException:
        remove_empty(made)
        raise


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove each folder (deepest first, as listed) while it is empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


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
