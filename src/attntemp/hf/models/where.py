"""Where ``--model`` points, checked before anything loads (:func:`attntemp.hf.loading.resolve`).

Allowed: ``tiny``, ``smollm2``, ``gemma3-270m``, a local folder (``config.json`` that parses, and weights whose
safetensors headers fit the file: a truncated download is caught here, not deep in the loader) or
a Hugging Face hub id (``owner/name``) in the local cache, or, when the Hub can be reached, on it.
Anything else fails at once with what is allowed, instead of spending half a minute in Hub
retries: a bare name that is not cached (a typo of ``smollm2``), a hub id while ``HF_HUB_OFFLINE``
is set or the Hub is unreachable (a 3 s connection probe). Loading errors of transformers and
safetensors, and weights missing from a checkpoint (transformers would initialise them at
random), are raised as ``ValueError("model=...: ...")``.

A local folder is checked before anything loads (:func:`check_folder`), each problem one
``ValueError("model=...: <file>: <what is wrong>")``: ``config.json``'s sizes and special token ids
are integers (and the fields of the model's config class have the types transformers expects), the
token ids and the tokenizer's vocabulary fit ``vocab_size``; the weight files are checked by
:mod:`attntemp.hf.models.weights` (headers that tile the file, an index inside the folder, pickles
that load without running anything; after loading, no NaN or inf).
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .weights import check_weights, is_int, refused

MODEL_NAMES = ("tiny", "smollm2", "gemma3-270m")
ALLOWED = "tiny, smollm2, gemma3-270m, a local folder (config.json and weights) or a Hugging Face hub id (owner/name)"
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")


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
    check_config_values(data, path, name)
    check_vocabulary(data, folder, name)
    _check_config_class(data, path, name)
    return data


# The sizes attntemp reads from a config itself (memory estimates, head geometry): integers or absent
SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim")  # fmt: skip
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def _token_ids(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def check_config_values(cfg: dict[str, Any], path: Path, name: str) -> None:
    """Raise unless the sizes of ``cfg`` (and of its ``text_config``) are integers and its special
    token ids integers (``eos_token_id``: a list of them too), or absent / null."""
    for prefix, part in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if not isinstance(part, dict):
            continue
        for key in SIZE_FIELDS:
            value = part.get(key)
            if value is not None and not is_int(value):
                raise refused(name, path, f"{prefix}{key}={value!r} is not allowed; expected an integer")
        for key in TOKEN_IDS:
            value = part.get(key)
            if any(v is not None and not is_int(v) for v in _token_ids(value)):
                raise refused(name, path, f"{prefix}{key}={value!r} is not allowed; expected a token id (an integer)")


MAX_TOKENIZER_JSON = 256 * 2**20  # a tokenizer.json larger than this is not read here (its loader will)


def tokenizer_vocab_size(path: Path) -> int | None:
    """How many ids the base vocabulary of ``tokenizer.json`` at ``path`` spans (the ids plain text
    can encode to; added special tokens aside); None when the file is absent, too large to read
    cheaply or not of a known shape (the tokenizer's own loader judges it then). Read once per
    version of the file (a run resolves its model several times)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file() or stat.st_size > MAX_TOKENIZER_JSON:
        return None
    return _vocab_span(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _vocab_span(path: str, mtime_ns: int, size: int) -> int | None:
    try:
        model = json.loads(Path(path).read_text(encoding="utf-8")).get("model")
        vocab = model.get("vocab") if isinstance(model, dict) else None
    except (OSError, ValueError, RecursionError, AttributeError):
        return None
    if isinstance(vocab, dict):
        ids = [v for v in vocab.values() if is_int(v)]
        return max(ids) + 1 if ids else None
    return len(vocab) if isinstance(vocab, list) else None


def check_vocabulary(cfg: dict[str, Any], folder: Path, name: str) -> None:
    """Raise when ``vocab_size`` (of the decoder part) is not above the pad, bos and eos token ids,
    or below the ids the folder's ``tokenizer.json`` encodes text to: the embedding would be indexed
    out of range (or, for the pad id, the model would not even build)."""
    inner = cfg.get("text_config")
    part = {**cfg, **inner} if isinstance(inner, dict) else cfg
    vocab = part.get("vocab_size")
    if not is_int(vocab):
        return
    for key in TOKEN_IDS:
        for token in _token_ids(part.get(key)):
            if is_int(token) and token >= vocab:
                raise refused(
                    name,
                    folder / "config.json",
                    f"{key}={token} is not allowed; expected an id below vocab_size={vocab}",
                )
    spans = tokenizer_vocab_size(folder / "tokenizer.json")
    if spans is not None and spans > vocab:
        raise refused(
            name,
            folder / "tokenizer.json",
            f"its vocabulary has {spans} ids, more than config.json's vocab_size={vocab} "
            "(the tokenizer of another model?)",
        )


def _check_config_class(cfg: dict[str, Any], path: Path, name: str) -> None:
    """Raise when transformers' config class for ``cfg``'s model_type refuses a field's type (its
    strict validation, as the loader would refuse it later, from deep inside the tokenizer or model
    load); other problems, and model types transformers does not know, are left to the loader."""
    from huggingface_hub.errors import StrictDataclassError, StrictDataclassFieldValidationError
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ...utils import noise

    if cfg["model_type"] not in CONFIG_MAPPING:
        return
    try:
        with noise.quiet_libraries():
            CONFIG_MAPPING[cfg["model_type"]].from_dict(dict(cfg))
    except StrictDataclassFieldValidationError as exc:
        cause = exc.__cause__ or exc
        field = re.search(r"field '([^']+)'", str(exc))
        what = str(cause).strip().splitlines()[0][:200]
        key = field.group(1) if field else "a field"
        raise refused(name, path, f"{key} is not allowed: {what} (the {cfg['model_type']} config)") from None
    except StrictDataclassError as exc:
        what = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()[:200]
        raise refused(name, path, f"is refused by the {cfg['model_type']} config: {what}") from None
    except Exception:  # anything else is the loader's to say, as before
        return


def check_folder(folder: Path, name: str) -> Path:
    """A local checkpoint folder: config.json parses and holds values of the right types, weights
    present, not truncated and well formed (:func:`.weights.check_weights`)."""
    if not folder.is_dir():
        raise _refuse(name, "is a file, not a folder" if folder.exists() else "is no such folder")
    read_config(folder, name)
    check_weights(folder, name)
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
    from pickle import UnpicklingError

    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError

    log, hold = logging.getLogger("transformers.modeling_utils"), _HoldReports()
    log.addFilter(hold)
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, UnpicklingError,
            StrictDataclassError) as exc:  # fmt: skip
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
