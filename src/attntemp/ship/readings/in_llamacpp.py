"""The readings checked in llama.cpp (:mod:`attntemp.ship.readings.engine_checks` for the method).

llama.cpp is handed a GGUF converted from the HF config by its own ``convert_hf_to_gguf.py``, plus
run-time flags, as its reading takes them (:mod:`attntemp.ship.readings.of_llamacpp`): the HF
rope keys (the converter's reading is part of the check), ``--override-kv`` keys, a ``rope_freqs``
tensor and the ``--yarn-*`` flags. Each case's proxy is the one float32 Llama with only its
``config.json`` rope changed; ``llama-perplexity --kl-divergence`` runs two chunks of ``n`` tokens
and prints the mean KL(prediction || llama.cpp) over each chunk's second half.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...ops.rope import factors as rope_factors
from ...utils.errors import ExternalToolError
from .. import llamacpp_binary as llamacpp
from ..engine_common import save_proxy, scored
from . import Reading, readers_of
from .base import Handed
from .engine_checks import (
    DIM,
    L0,
    PROXY_CONFIG,
    READINGS_KL,
    THETA,
    longrope_past_l0,
    predicted_logp,
    random_row,
)
from .of_llamacpp import GGUF_FACTOR, LLAMACPP

CHUNKS = 2


@dataclass(frozen=True)
class LlamaCase:
    """A rope written in the proxy's ``config.json`` (``rope``; ``max_position_embeddings`` ``positions``),
    ``flags`` for llama-perplexity, a ``rope_freqs`` tensor (``freqs``), and chunks of ``n`` tokens."""

    name: str
    rope: dict[str, Any] = field(hash=False)
    n: int
    positions: int = L0
    flags: tuple[str, ...] = ()
    freqs: tuple[float, ...] | None = None
    context: int | None = None  # --override-kv llama.context_length: the GGUF's n_ctx_train
    gguf_factor: float | None = None  # --override-kv llama.rope.scaling.attn_factor (export's route for m)

    def handed(self) -> Handed:
        """What llama.cpp is handed, as its reading takes it (HF keys, flags, rope_freqs)."""
        given: dict[str, Any] = dict(self.rope)
        given.update({f: float(v) for f, v in zip(self.flags[::2], self.flags[1::2], strict=True)})
        if self.freqs is not None:
            given["rope_freqs"] = list(self.freqs)
        if self.gguf_factor is not None:
            given[GGUF_FACTOR] = self.gguf_factor
        return Handed(given, DIM, THETA, L0, self.context or self.positions, self.n)

    def meant(self) -> Handed:
        """What the same config means in transformers (``rope_freqs``: YaRN past L0's longrope)."""
        rope = longrope_past_l0(2.0, 1.0) if self.freqs is not None else self.rope
        return Handed(rope, DIM, THETA, L0, self.positions)

    def args(self) -> tuple[str, ...]:
        over: tuple[str, ...] = ("--override-kv", f"llama.context_length=int:{self.context}") if self.context else ()
        if self.gguf_factor is not None:
            over += ("--override-kv", f"llama.{GGUF_FACTOR}=float:{self.gguf_factor}")
        return (*self.flags, *over)


def llama_cases() -> tuple[LlamaCase, ...]:
    """dynamic (the converter writes nothing), yarn with an explicit attention factor (dropped), the
    ``--yarn-attn-factor`` flag (replaced), the GGUF's ``rope.scaling.attn_factor`` through
    ``--override-kv`` (multiplies YaRN's own: how export carries m), and YaRN past L0 as a
    ``rope_freqs`` tensor (every position)."""
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": L0, "attention_factor": 1.2}
    divisors = tuple(float(v) for v in rope_factors.init_factors("yarn", DIM, THETA, 2.0, L0))
    return (
        LlamaCase("dynamic s = 2, request past L0", {"rope_type": "dynamic", "factor": 2.0}, 2 * L0, context=2 * L0),
        LlamaCase("yarn s = 2, attention_factor 1.2", yarn, 2 * L0, 2 * L0),
        LlamaCase("yarn s = 2, --yarn-attn-factor 1.5", yarn, 2 * L0, 2 * L0, ("--yarn-attn-factor", "1.5")),
        LlamaCase(
            "yarn s = 2, --override-kv attn_factor 0.9 (export's route for m)", yarn, 2 * L0, 2 * L0, gguf_factor=0.9
        ),
        LlamaCase("YaRN past L0 as rope_freqs, request under L0", {}, L0 * 3 // 4, freqs=divisors),
    )


def write_case(proxy: Path, case: LlamaCase, work: Path, llama: llamacpp.LlamaCpp) -> Path:
    """The case's GGUF: the proxy with its config's rope replaced, converted (and given ``rope_freqs``)."""
    folder = work / "case"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(proxy, folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("rope_scaling", None)
    config["rope_parameters"] = {"rope_type": "default", **case.rope, "rope_theta": THETA}
    config["max_position_embeddings"] = case.positions
    (folder / "config.json").write_text(json.dumps(config))
    assert llama.convert is not None
    gguf = work / "case.gguf"
    llamacpp.convert(llama.convert, folder, gguf)
    if case.freqs is None:
        return gguf
    return llamacpp.with_rope_freqs(gguf, case.freqs, work / "case-freqs.gguf")


def engine_kl(model: Any, case: LlamaCase, reading: Reading, gguf: Path, llama, work: Path) -> float:
    """llama-perplexity's mean KL(``reading``'s prediction || llama.cpp) per scored token."""
    rows = [random_row(case.n, seed=i) for i in range(CHUNKS)]
    part = scored(case.n)
    logp = [predicted_logp(model, row, reading)[part] for row in rows]  # [n-1-n/2, V] each
    base = llamacpp.write_base(work / "base.kld", torch.tensor(rows), logp)
    cmd = llamacpp.kl_command(llama, gguf, base, case.n, case.args(), None)
    return max(llamacpp.run_kl(cmd, case.n).kl.value, 0.0) + 0.0


def check_llamacpp(llama: llamacpp.LlamaCpp, work: Path) -> dict[str, Any]:
    """Every llama.cpp case against its reading (and transformers' reading beside it)."""
    model = save_proxy(PROXY_CONFIG, work / "proxy").eval()
    hf, rows = readers_of("transformers")[0], []
    for case in llama_cases():
        reading = LLAMACPP(case.handed(), case.n)
        row = {"case": case.name, "n": case.n, "limit": case.n, "reading": reading.label,
               "predicts": reading.breaks or f"x{reading.multiplier:.4g} on the logits; {reading.switch}"}  # fmt: skip
        try:
            gguf = write_case(work / "proxy", case, work, llama)
            value = engine_kl(model, case, reading, gguf, llama, work)
            away = engine_kl(model, case, hf(case.meant(), case.n), gguf, llama, work)
        except ExternalToolError as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            rows.append({**row, "kl": None, "kl_transformers_reading": None, "confirmed": False,
                         "how": f"llama.cpp failed: {(lines or [''])[-1][-200:]}"})  # fmt: skip
            continue
        how = f"KL {value:.3g} (limit {READINGS_KL:g})"
        rows.append(
            {**row, "kl": value, "kl_transformers_reading": away, "confirmed": value <= READINGS_KL, "how": how}
        )
    return {"engine": "llama.cpp", "version": llamacpp.version(llama), "reading": LLAMACPP.label,
            "source": LLAMACPP.source, "tolerance": READINGS_KL, "rows": rows}  # fmt: skip


def check_llamacpp_installed(engine_dir: str | None) -> dict[str, Any]:
    """The readings checked in the llama.cpp build at ``engine_dir`` (default: PATH, then the engines
    cache), or ``cannot run`` with why."""
    try:
        llama = llamacpp.find_llamacpp(engine_dir)
    except FileNotFoundError as exc:
        return {"engine": "llama.cpp", "verdict": "cannot run", "reason": str(exc)}
    if llama.convert is None:
        return {
            "engine": "llama.cpp",
            "verdict": "cannot run",
            "reason": f"no convert_hf_to_gguf.py beside {llama.perplexity}",
        }
    with tempfile.TemporaryDirectory(prefix="attntemp-readings-") as tmp:
        return check_llamacpp(llama, Path(tmp))
