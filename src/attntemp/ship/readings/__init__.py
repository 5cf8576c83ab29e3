"""Engine readings: what each inference engine, by version, computes from the RoPE settings it is handed.

One function per (engine, version range), each behind a :class:`~.base.Reader` in :data:`READERS`:
transformers 5.x (the reference), vLLM 0.11-0.21, 0.22-0.29 and >= 0.30, SGLang 0.5, llama.cpp, TGI 3.3,
MLX-LM 0.32, exllamav2 0.3 and exllamav3 1.6. A reader takes what the engine is handed
(:class:`~.base.Handed`: an HF-style ``rope_parameters`` dict, the rotary dim, ``rope_theta``, the trained
length, ``max_position_embeddings`` as handed and the serving limit) and a request length ``n``, and
returns a :class:`~.base.Reading`: the frequencies used, the logit multiplier applied, when they switch,
what it drops and what it refuses or breaks, with the source file and version it was read from.
``../shared/reference/engine_readings.md`` is the map these were confirmed against; ``docs/readings.md`` is
generated from them (``scripts/readings_page.py``).

:func:`meant` is what a spec's rope means (transformers' reading of it, attntemp's ``ntk`` as an explicit
``rope_theta``), :func:`differs` says where one reading departs from another, and :func:`departure` is the
one static check that a reader computes what is meant at every checked request length: what
:mod:`attntemp.ship.engines.routes` checks every export against and what ``attntemp.advise.carry``
asks of two specs that should read alike.
"""

from __future__ import annotations

from ...ops.rope.bases import ntk_base
from ...ops.rope.params import Rope
from .base import Handed, Reader, Reading
from .of_exllama import EXLLAMAV2, EXLLAMAV3
from .of_llamacpp import GGUF_FACTOR, LLAMACPP
from .of_sglang import SGLANG
from .of_tgi_mlx import MLX, TGI
from .of_transformers import TRANSFORMERS
from .of_vllm import VLLM_READERS

READERS: tuple[Reader, ...] = (TRANSFORMERS, *VLLM_READERS, SGLANG, LLAMACPP, TGI, MLX, EXLLAMAV2, EXLLAMAV3)
READING_TOLERANCE = 1e-4  # relative, on every frequency and on the logit multiplier
PROBE_DIM, PROBE_THETA, PROBE_L0 = 128, 10000.0, 4096  # where the model's are not known: the check is structural

__all__ = [
    "GGUF_FACTOR",
    "PROBE_DIM",
    "PROBE_L0",
    "PROBE_THETA",
    "READERS",
    "READING_TOLERANCE",
    "Handed",
    "Reader",
    "Reading",
    "departure",
    "differs",
    "lengths",
    "meant",
    "reader_for",
    "readers_of",
]


def readers_of(engine: str) -> tuple[Reader, ...]:
    """The readers of ``engine`` (its name in :data:`attntemp.ship.engines.ENGINES`), oldest version first."""
    return tuple(r for r in READERS if r.engine == engine)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.strip().split("+")[0].split(".")[:3] if p.isdigit())


def _covers(versions: str, got: tuple[int, ...]) -> bool:
    """Whether a reader's range ("0.11-0.21", ">=0.30", "0.5.x", "5.x") holds the version ``got``."""
    if versions.startswith(">="):
        return got >= _version(versions[2:])
    if "-" in versions:
        low, high = (_version(v) for v in versions.split("-", 1))
        return low <= got[: len(low)] and got[: len(high)] <= high
    stem = _version(versions.removesuffix(".x"))
    return bool(stem) and got[: len(stem)] == stem


def reader_for(engine: str, version: str) -> Reader:
    """The reader of ``engine`` whose version range holds ``version`` (e.g. ``reader_for("vllm", "0.32.0")``);
    a ValueError naming the ranges read where none does."""
    got = _version(version)
    found = [r for r in readers_of(engine) if got and _covers(r.versions, got)]
    if not found:
        ranges = ", ".join(r.versions for r in readers_of(engine)) or "none"
        raise ValueError(f"version={version!r} of {engine} has no reading; read: {ranges}")
    return found[-1]


def meant(params: Rope, dim: int, rope_theta: float, l0: int) -> Handed:
    """What a spec's rope (its L0 ``l0``) means, as transformers is handed it: the rope itself (its
    dict form, the engine's settings) with the model's ``max_position_embeddings`` at L0 (dynamic
    starts there), attntemp's static ``ntk`` as plain RoPE at ``rope_theta * s^(d / (d - 2))``
    (:func:`attntemp.ops.rope.bases.ntk_base`)."""
    if params.kind == "ntk":
        return Handed(
            {"rope_type": "default", "rope_theta": ntk_base(rope_theta, params.factor, dim)}, dim, rope_theta, l0
        )
    return Handed(params.to_dict(), dim, rope_theta, l0)


def lengths(l0: int, context: int) -> tuple[int, ...]:
    """The request lengths a route is checked at: half L0, L0, L0 + 1, between L0 and the context, the
    context (those up to ``context``)."""
    picks = {max(1, l0 // 2), l0, l0 + 1, (l0 + context) // 2, context}
    return tuple(sorted(n for n in picks if n <= max(context, l0)))


def differs(got: Reading, want: Reading, multiplier: float = 1.0, tol: float = READING_TOLERANCE) -> str:
    """Nothing (the empty string) where ``got`` computes what ``want`` (times the spec's own logit
    ``multiplier``) means, else how it departs: what it refuses or breaks, frequencies that vary
    within the request, frequencies or a logit multiplier off by more than ``tol`` (relative)."""
    where = f"{got.label} at n = {got.n}"
    if got.breaks:
        return f"{where}: {got.breaks}"
    if want.uniform and not got.uniform:
        return f"{where}: the request's positions read different frequencies ({got.switch})"
    rel = float(((got.inv_freq - want.inv_freq).abs() / want.inv_freq).max())
    if rel > tol:
        return f"{where}: frequencies off by up to {rel:.3g} (relative; {got.switch})"
    m = want.multiplier * multiplier
    if abs(got.multiplier / m - 1) > tol:
        dropped = f"; it drops {', '.join(got.dropped)}" if got.dropped else ""
        return f"{where}: logit multiplier {got.multiplier:.6g}, meant {m:.6g}{dropped}"
    return ""


def departure(reader: Reader, handed: Handed, want: Handed, multiplier: float, context: int) -> str:
    """Nothing (the empty string) where ``reader`` computes ``handed`` as transformers computes ``want``,
    times ``multiplier`` on the logits (:func:`differs`), at every checked request length (:func:`lengths`:
    half ``want``'s L0 to ``context``); else its first departure. A reading that cannot take the settings
    raises ``ValueError``."""
    for n in lengths(want.l0, context):
        if why := differs(reader(handed, n), TRANSFORMERS(want, n), multiplier):
            return why
    return ""
