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
token ids and the tokenizer's vocabulary fit ``vocab_size``; each safetensors header is a JSON
object whose tensors have a dtype, a shape and ``[begin, end]`` offsets that tile the file (a
truncated download is caught here, not deep in the loader, a ``*.gguf`` beside it or not); an
index names files inside the folder (checked before any is opened); a pickled ``*.bin`` loads with
``torch.load(weights_only=True)`` (nothing in it runs). After loading, :func:`refuse_nonfinite`
refuses NaN or inf weights.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import os
import re
import socket
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeGuard
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
    check_config_values(data, path, name)
    check_vocabulary(data, folder, name)
    _check_config_class(data, path, name)
    return data


def _bad(name: str, path: Path, what: str) -> ValueError:
    return ValueError(f"model={name!r}: {path}: {what}")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


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
            if value is not None and not _is_int(value):
                raise _bad(name, path, f"{prefix}{key}={value!r} is not allowed; expected an integer")
        for key in TOKEN_IDS:
            value = part.get(key)
            if any(v is not None and not _is_int(v) for v in _token_ids(value)):
                raise _bad(name, path, f"{prefix}{key}={value!r} is not allowed; expected a token id (an integer)")


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
        ids = [v for v in vocab.values() if _is_int(v)]
        return max(ids) + 1 if ids else None
    return len(vocab) if isinstance(vocab, list) else None


def check_vocabulary(cfg: dict[str, Any], folder: Path, name: str) -> None:
    """Raise when ``vocab_size`` (of the decoder part) is not above the pad, bos and eos token ids,
    or below the ids the folder's ``tokenizer.json`` encodes text to: the embedding would be indexed
    out of range (or, for the pad id, the model would not even build)."""
    inner = cfg.get("text_config")
    part = {**cfg, **inner} if isinstance(inner, dict) else cfg
    vocab = part.get("vocab_size")
    if not _is_int(vocab):
        return
    for key in TOKEN_IDS:
        for token in _token_ids(part.get(key)):
            if _is_int(token) and token >= vocab:
                raise _bad(
                    name,
                    folder / "config.json",
                    f"{key}={token} is not allowed; expected an id below vocab_size={vocab}",
                )
    spans = tokenizer_vocab_size(folder / "tokenizer.json")
    if spans is not None and spans > vocab:
        raise _bad(
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
        raise _bad(name, path, f"{key} is not allowed: {what} (the {cfg['model_type']} config)") from None
    except StrictDataclassError as exc:
        what = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()[:200]
        raise _bad(name, path, f"is refused by the {cfg['model_type']} config: {what}") from None
    except Exception:  # anything else is the loader's to say, as before
        return


# Bytes per element of the safetensors dtypes (those not listed, such as 4-bit ones, are not sized here)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}  # fmt: skip


def _tensor_span(key: str, entry: Any) -> tuple[int, int] | str:
    """``(begin, end)`` of one safetensors header entry, or what is wrong with it."""
    if not isinstance(entry, dict):
        return f"tensor {key!r} is {entry!r}; expected an object with dtype, shape and data_offsets"
    if "data_offsets" not in entry:
        return f"tensor {key!r} has no data_offsets"
    offsets, shape, dtype = entry["data_offsets"], entry.get("shape"), entry.get("dtype")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)):
        return f"tensor {key!r} has data_offsets={offsets!r}; expected [begin, end], two integers"
    if offsets[1] < offsets[0]:
        return f"tensor {key!r} has data_offsets={offsets!r}; its end is before its begin"
    if not isinstance(dtype, str):
        return f"tensor {key!r} has dtype={dtype!r}; expected a name such as 'F32'"
    if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
        return f"tensor {key!r} has shape={shape!r}; expected a list of sizes"
    if dtype in DTYPE_BYTES:
        count = 1
        for d in shape:
            count *= d
        if count * DTYPE_BYTES[dtype] != offsets[1] - offsets[0]:
            return (
                f"tensor {key!r} has {offsets[1] - offsets[0]} bytes at data_offsets={offsets!r}; "
                f"its {dtype} shape {shape} needs {count * DTYPE_BYTES[dtype]}"
            )
    return offsets[0], offsets[1]


def check_safetensors(path: Path, name: str) -> None:
    """Raise unless ``path``'s header is a JSON object whose tensors (dtype, shape, ``[begin, end]``
    offsets) tile the bytes after it, to the end of the file: a truncated file, a header of the
    wrong shape or a tensor of the wrong size is one ValueError naming the file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or n > min(size - 8, MAX_HEADER):
            raise ValueError(f"model={name!r}: {path} is not a safetensors file (or is truncated: {size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            raise ValueError(f"model={name!r}: {path} has a corrupt safetensors header") from None
    if not isinstance(header, dict):
        raise _bad(name, path, f"its header is a JSON {type(header).__name__}; expected an object of tensors")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise _bad(name, path, "its __metadata__ is not an object of strings")
    spans = []
    for key, entry in header.items():
        if key != "__metadata__":
            span = _tensor_span(key, entry)
            if isinstance(span, str):
                raise _bad(name, path, span)
            spans.append((*span, key))
    spans.sort()
    need = 8 + n + max((end for _, end, _ in spans), default=0)
    if need > size:
        raise ValueError(
            f"model={name!r}: {path} is truncated: its header lists {need} bytes, the file has {size} "
            "(an interrupted download or copy?)"
        )
    at = 0
    for begin, end, key in spans:
        if begin != at:
            how = "overlaps the tensor before it" if begin < at else f"leaves a gap of {begin - at} bytes before it"
            raise _bad(name, path, f"tensor {key!r} at data_offsets=[{begin}, {end}] {how}")
        at = end
    if need < size:
        raise _bad(name, path, f"has {size - need} bytes after its last tensor (not a safetensors file as written)")


def _unpickler_says(exc: Exception) -> str:
    """The line of torch.load's error that says what is wrong (after "WeightsUnpickler error:"), else its first."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            rest = line.partition("WeightsUnpickler error:")[2].strip()
            return rest or (lines[i + 1] if i + 1 < len(lines) else line)
    return lines[0]


def check_pickle(path: Path, name: str) -> None:
    """Raise unless the pickled checkpoint at ``path`` loads with ``torch.load(weights_only=True)``
    (memory-mapped: nothing in it runs, its tensors are not read) as names to tensors."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as exc:  # whatever the unpickler says is the file's fault
        why = f"{type(exc).__name__}: {_unpickler_says(exc)[:160]}"
        raise _bad(name, path, f"does not load with torch.load(weights_only=True) ({why}); refused") from None
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise _bad(name, path, f"holds a {type(state).__name__}, not a state dict of tensors")


INDEXES = {"model.safetensors.index.json": "model.safetensors", "pytorch_model.bin.index.json": "pytorch_model.bin"}


def index_shards(index: Path, name: str) -> list[Path]:
    """The files an index's ``weight_map`` names, each checked (before any is opened) to be a plain
    file name inside the index's folder: no absolute path, no ``..``."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise _bad(name, index, "is not valid JSON") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise _bad(name, index, "has no weight_map (an object of tensor names to file names)")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.strip():
            raise _bad(name, index, f"weight_map[{key!r}]={shard!r} is not allowed; expected a file name")
        posix, windows = PurePosixPath(shard), PureWindowsPath(shard)
        if posix.is_absolute() or windows.is_absolute() or windows.drive or ".." in posix.parts + windows.parts:
            raise _bad(name, index, f"weight_map[{key!r}]={shard!r} is not allowed: it points outside the folder")
    return [index.parent / s for s in sorted(set(weight_map.values()))]


def weight_files(folder: Path, name: str) -> list[Path]:
    """The weights files transformers would load from ``folder``: ``model.safetensors`` or the shards
    of its index or, without them, the pickled ``pytorch_model.bin`` (or its shards); [] when it
    holds none."""
    for index, single in INDEXES.items():  # transformers' order: a single file before an index
        if (folder / single).is_file():
            return [folder / single]
        if (folder / index).is_file():
            return index_shards(folder / index, name)
    return []


def check_folder(folder: Path, name: str) -> Path:
    """A local checkpoint folder: config.json parses and holds values of the right types, weights
    present, not truncated and well formed (see the module doc); a ``*.gguf`` may stand in for them."""
    if not folder.is_dir():
        raise _refuse(name, "is a file, not a folder" if folder.exists() else "is no such folder")
    read_config(folder, name)
    files = weight_files(folder, name)
    if not files and not any(folder.glob("*.gguf")):  # a GGUF is read by transformers' own converter (gguf_file=)
        raise ValueError(f"model={name!r}: {folder} holds no weights; expected one of {list(WEIGHTS)}")
    for shard in files:
        if not shard.is_file():
            raise ValueError(f"model={name!r}: {shard} is missing (listed in the weights index)")
        if shard.suffix == ".bin":
            check_pickle(shard, name)
        else:
            check_safetensors(shard, name)
    return folder


def weights_file_of(folder: Path, key: str) -> Path:
    """The file of ``folder`` that holds the tensor ``key`` (by its index; the single file, else
    the folder itself when that cannot be told)."""
    for index, single in INDEXES.items():
        if (folder / single).is_file():
            return folder / single
        try:
            return folder / json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"][key]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return folder


def refuse_nonfinite(name: str, model: Any, folder: Path | None) -> None:
    """Raise naming the first parameter of ``model`` that holds NaN or inf (weights on the meta
    device, offloaded to disk, are not read)."""
    import torch

    for key, p in model.named_parameters():
        if p.device.type != "meta" and p.is_floating_point() and not bool(torch.isfinite(p).all()):
            where = weights_file_of(folder, key) if folder is not None else Path(name)
            bad = " and ".join(w for w, found in (("NaN", p.isnan().any()), ("inf", p.isinf().any())) if found)
            raise _bad(name, where, f"tensor {key!r} holds {bad}; expected finite weights")


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
