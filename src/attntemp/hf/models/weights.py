"""A checkpoint's weight files, checked before anything loads (:func:`attntemp.hf.models.where.check_folder`)
and after (:func:`refuse_nonfinite`).

Each problem is one ``ValueError("model=...: <file>: <what is wrong>")``: each safetensors header is
a JSON object whose tensors have a dtype, a shape and ``[begin, end]`` offsets that tile the file (a
truncated download is caught here, not deep in the loader); an index names files inside the folder
(checked before any is opened); a pickled ``*.bin`` loads with ``torch.load(weights_only=True)``
(nothing in it runs); after loading, NaN or inf weights are refused naming the file that holds them.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeGuard

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header


def refused(name: str, path: Path, what: str) -> ValueError:
    """The error for one file of the model ``name``: ``model=...: <path>: <what>``."""
    return ValueError(f"model={name!r}: {path}: {what}")


def is_int(value: Any) -> TypeGuard[int]:
    """An integer that is not a bool (JSON's true reads as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


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
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) and o >= 0 for o in offsets)):
        return f"tensor {key!r} has data_offsets={offsets!r}; expected [begin, end], two integers"
    if offsets[1] < offsets[0]:
        return f"tensor {key!r} has data_offsets={offsets!r}; its end is before its begin"
    if not isinstance(dtype, str):
        return f"tensor {key!r} has dtype={dtype!r}; expected a name such as 'F32'"
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape)):
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
        raise refused(name, path, f"its header is a JSON {type(header).__name__}; expected an object of tensors")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise refused(name, path, "its __metadata__ is not an object of strings")
    spans = []
    for key, entry in header.items():
        if key != "__metadata__":
            span = _tensor_span(key, entry)
            if isinstance(span, str):
                raise refused(name, path, span)
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
            raise refused(name, path, f"tensor {key!r} at data_offsets=[{begin}, {end}] {how}")
        at = end
    if need < size:
        raise refused(name, path, f"has {size - need} bytes after its last tensor (not a safetensors file as written)")


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
        raise refused(name, path, f"does not load with torch.load(weights_only=True) ({why}); refused") from None
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise refused(name, path, f"holds a {type(state).__name__}, not a state dict of tensors")


INDEXES = {"model.safetensors.index.json": "model.safetensors", "pytorch_model.bin.index.json": "pytorch_model.bin"}


def index_shards(index: Path, name: str) -> list[Path]:
    """The files an index's ``weight_map`` names, each checked (before any is opened) to be a plain
    file name inside the index's folder: no absolute path, no ``..``."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise refused(name, index, "is not valid JSON") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise refused(name, index, "has no weight_map (an object of tensor names to file names)")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.strip():
            raise refused(name, index, f"weight_map[{key!r}]={shard!r} is not allowed; expected a file name")
        posix, windows = PurePosixPath(shard), PureWindowsPath(shard)
        if posix.is_absolute() or windows.is_absolute() or windows.drive or ".." in posix.parts + windows.parts:
            raise refused(name, index, f"weight_map[{key!r}]={shard!r} is not allowed: it points outside the folder")
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


def check_weights(folder: Path, name: str) -> None:
    """Raise unless ``folder`` holds weights (or a ``*.gguf`` standing in for them) whose every
    file is present and well formed: safetensors by their headers, pickles by ``torch.load``."""
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
            raise refused(name, where, f"tensor {key!r} holds {bad}; expected finite weights")
