"""Where ``--model`` points, checked before anything loads (:func:`attntemp.hf.loading.resolve`).

Allowed: ``tiny``, ``smollm2``, ``gemma3-270m``, a local folder (``config.json`` that parses, and weights whose
safetensors headers fit the file: a truncated download is caught here, not deep in the loader) or
a Hugging Face hub id (``owner/name``) in the local cache, or, when the Hub can be reached, on it.
Anything else fails at once with what is allowed, instead of spending half a minute in Hub
retries: a bare name that is not cached (a typo of ``smollm2``), a hub id while ``HF_HUB_OFFLINE``
is set or the Hub is unreachable (a 3 s connection probe). Loading errors of transformers and
safetensors, and weights missing from a checkpoint (transformers would initialise them at
random), are raised as ``ValueError("model=...: ...")``.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

MODEL_NAMES = ("tiny", "smollm2", "gemma3-270m")
ALLOWED = "tiny, smollm2, gemma3-270m, a local folder (config.json and weights) or a Hugging Face hub id (owner/name)"
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header


def _refuse(name: str, why: str) -> ValueError:
    close = difflib.get_close_matches(name, MODEL_NAMES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"model={name!r} {why}; expected {ALLOWED}.{hint}")


def looks_like_path(name: str) -> bool:
    """True for what can only be a path: it exists, starts with / . ~, or holds a backslash or
    more than one /."""
    return (
        Path(name).expanduser().exists()
        or name.startswith(("/", ".", "~"))
        or name.endswith("/")
        or "\\" in name
        or name.count("/") > 1
    )


def read_config(folder: Path, name: str) -> dict[str, Any]:
    """``folder/config.json`` as a dict, or a ValueError naming the model and the problem."""
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"model={name!r}: {folder} holds no config.json; expected {ALLOWED}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"model={name!r}: {path} is not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ValueError(f"model={name!r}: {path} has no model_type; not a transformers config")
    return data


def check_safetensors(path: Path, name: str) -> None:
    """Raise unless ``path``'s header parses and every tensor it lists fits inside the file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or n > min(size - 8, MAX_HEADER):
            raise ValueError(f"model={name!r}: {path} is not a safetensors file (or is truncated: {size} bytes)")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise ValueError(f"model={name!r}: {path} has a corrupt safetensors header") from None
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    need = 8 + n + max(ends, default=0)
    if need > size:
        raise ValueError(
            f"model={name!r}: {path} is truncated: its header lists {need} bytes, the file has {size} "
            "(an interrupted download or copy?)"
        )


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files of ``folder`` (shards of an index too); [] when it holds none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"{index} is not a valid safetensors index") from None
        return [folder / s for s in shards]
    return [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []


def check_folder(folder: Path, name: str) -> Path:
    """A local checkpoint folder: config.json parses, weights present and not truncated."""
    if not folder.is_dir():
        raise _refuse(name, "is a file, not a folder" if folder.exists() else "is no such folder")
    read_config(folder, name)
    if any(folder.glob("*.gguf")):
        return folder  # a GGUF is read by transformers' own converter (gguf_file=)
    if not any((folder / w).is_file() for w in WEIGHTS):
        raise ValueError(f"model={name!r}: {folder} holds no weights; expected one of {list(WEIGHTS)}")
    for shard in _weight_files(folder):
        if not shard.is_file():
            raise ValueError(f"model={name!r}: {shard} is missing (listed in the safetensors index)")
        check_safetensors(shard, name)
    return folder


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when a TCP connection to the Hub's endpoint (``HF_ENDPOINT``) opens within ``timeout``."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def cached_config(repo_id: str) -> Path | None:
    """The cached ``config.json`` of ``repo_id`` in the local Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def check_hub_id(name: str) -> str:
    """A hub id that is cached, or can be fetched now; fail fast (no retries) otherwise."""
    if not _REPO_ID.fullmatch(name) or "--" in name or ".." in name:
        raise _refuse(name, "is not a local folder, nor a valid hub id")
    cached = cached_config(name)
    if cached is not None:
        read_config(cached.parent, name)
        return name
    if "/" not in name:
        raise _refuse(name, "is not a local folder, nor in the local Hugging Face cache")
    if _offline():
        raise _refuse(name, "is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")
    if not hub_reachable():
        raise _refuse(name, "is not in the local Hugging Face cache and the Hub cannot be reached")
    return name


def check_name(name: Any) -> str:
    """``name`` as given when it is a string naming something loadable (see module doc)."""
    if not isinstance(name, str) or not name.strip():
        raise _refuse(str(name), "is empty" if isinstance(name, str) else "is not a string")
    return name


def missing_weights(info: dict[str, Any]) -> list[str]:
    """The parameters transformers reported missing from the checkpoint (it initialised them at random)."""
    return sorted(info.get("missing_keys") or ())


class _HoldReports(logging.Filter):
    """Holds transformers' load reports back while loading: shown afterwards unless the load is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg):
            self.held.append(record)
            return False
        return True


@contextmanager
def loading(name: str) -> Iterator[None]:
    """Raise what loading a checkpoint can throw (OSError, safetensors' errors, a bad config) as one
    ``ValueError("model=...: ...")``; transformers' load report is logged only when loading succeeds."""
    from safetensors import SafetensorError

    log, hold = logging.getLogger("transformers.modeling_utils"), _HoldReports()
    log.addFilter(hold)
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("model="):
            raise  # already says which model and what is wrong
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ValueError(f"model={name!r} could not be loaded: {type(exc).__name__}: {first}") from None
    finally:
        log.removeFilter(hold)
    for record in hold.held:
        log.handle(record)


def refuse_missing(name: str, info: dict[str, Any]) -> None:
    """Raise when the checkpoint lacks weights the model needs (transformers would initialise
    them at random and only warn: a bake of such a model would "verify" random weights)."""
    missing = missing_weights(info)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ValueError(f"model={name!r}: the checkpoint lacks {len(missing)} weight(s) the model needs: {shown}")


from ..utils.deprecation import legacy_getattr  # noqa: E402 (the aliases come last)

__getattr__ = legacy_getattr(__name__)  # old names that warn: attntemp.utils.deprecation.RENAMED
