"""What every reading shares: what an engine is handed (:class:`Handed`), what it computes from it
(:class:`Reading`), and the registry entry of one engine's version range (:class:`Reader`).

A reading turns the RoPE settings written for an engine into what that engine computes for a
request of ``n`` tokens: the inverse frequencies ``inv_freq`` ``[dim/2]`` of the request's positions
and the factor on cos and sin (both q and k are rotated with it, so the logits get it squared: the
logit multiplier). Each says when its frequencies switch, the keys it drops, and what it refuses or
breaks, and cites the file and version it was read from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ...ops import rope
from ...ops.geometry import stated_l0
from ...utils import checks

STATIC = "never: fixed at load"


# ----------------------------------------------------------------------------- what an engine is handed
@dataclass(frozen=True)
class Handed:
    """The RoPE settings an engine is handed, as its reading takes them.

    ``rope``: HF-style ``rope_parameters`` as the engine sees them (``{}``: none), its own keys too
    (vLLM's ``attn_factor``, ``short_mscale``; llama.cpp's GGUF ``attn_factor`` and ``rope_freqs``); a
    ``rope_theta`` there replaces the model's. ``dim``: the rotary dimension; ``rope_theta``: the
    model's base; ``l0``: the trained length (the checkpoint's ``max_position_embeddings``);
    ``positions``: ``max_position_embeddings`` as handed (an override; None: ``l0``); ``limit``: the
    serving limit (vLLM ``--max-model-len``, llama.cpp ``-c``, TGI ``--max-total-tokens``, exllamav2
    ``max_seq_len``; None: the engine's default)."""

    rope: Mapping[str, Any] = field(default_factory=dict, hash=False)
    dim: int = 128
    rope_theta: float = 10000.0
    l0: int = 4096
    positions: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if checks.positive_int("dim", self.dim) % 2:
            raise ValueError(f"dim={self.dim} is not allowed; expected an even rotary dimension")
        checks.positive("rope_theta", self.rope_theta)
        checks.positive_int("l0", self.l0)
        for name in ("positions", "limit"):
            if getattr(self, name) is not None:
                checks.positive_int(name, getattr(self, name))

    @property
    def kind(self) -> str:
        """``rope_type`` (``type`` in older configs; ``default`` where none is given)."""
        return str(self.rope.get("rope_type", self.rope.get("type", "default")))

    @property
    def base(self) -> float:
        """The RoPE base the engine is handed: the rope's ``rope_theta``, else the model's."""
        return float(self.rope.get("rope_theta", self.rope_theta))

    @property
    def max_positions(self) -> int:
        """``max_position_embeddings`` as the engine sees it."""
        return self.positions or self.l0

    @property
    def orig(self) -> int:
        """The rope's ``original_max_position_embeddings``, else ``max_position_embeddings`` (as
        transformers' ``standardize_rope_params`` fills it)."""
        stated = stated_l0(self.rope)
        return self.max_positions if stated is None else checks.positive_int("original_max_position_embeddings", stated)

    def factor(self, default: float | None = None) -> float:
        """The rope's ``factor`` (``default`` where it has none; a ValueError where neither)."""
        value = self.rope.get("factor", default)
        if value is None:
            raise ValueError(f"rope_type={self.kind!r} needs 'factor'; got keys {sorted(self.rope)}")
        return checks.at_least("factor", value, 1.0)


# ----------------------------------------------------------------------------- what it computes
@dataclass(frozen=True)
class Found:
    """What a reading function computes (:class:`Reader` adds who and where from): ``inv_freq``
    ``[dim/2]`` at the request's positions (its last position where they differ: ``uniform`` False),
    the cos/sin ``factor``, ``switch``, the ``dropped`` keys, ``breaks`` ("" or what it refuses or
    breaks) and ``unconfirmed`` ("" or why the row is not confirmed from source)."""

    inv_freq: torch.Tensor
    factor: float = 1.0
    switch: str = STATIC
    dropped: tuple[str, ...] = ()
    breaks: str = ""
    uniform: bool = True
    unconfirmed: str = ""


@dataclass(frozen=True)
class Reading:
    """What one engine version computes for a request of ``n`` tokens from the settings it is handed.

    ``inv_freq`` ``[dim/2]``: the frequencies of the request's positions (of its last position where
    ``uniform`` is False); ``multiplier``: the logit multiplier, the cos/sin factor squared;
    ``switch``: when the frequencies change; ``dropped``: keys it ignores; ``breaks``: "" or what it
    refuses ("refuses: ...") or breaks ("NaN ..."); ``source``: the file(s) and version read;
    ``confirmed``: False where part of the row rests on inference, ``unconfirmed`` saying what."""

    engine: str
    versions: str
    n: int
    inv_freq: torch.Tensor = field(compare=False)
    multiplier: float
    switch: str
    dropped: tuple[str, ...]
    breaks: str
    uniform: bool
    source: str
    confirmed: bool
    unconfirmed: str = ""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.versions}"


@dataclass(frozen=True)
class Reader:
    """One (engine, version range) in the registry: ``engine`` as :data:`attntemp.ship.engines.ENGINES`
    names it where it is there, ``versions`` the range, ``source`` where it was read, ``compute`` the
    reading function ``(handed, n) -> Found``."""

    engine: str
    versions: str
    source: str
    compute: Callable[[Handed, int], Found]

    @property
    def label(self) -> str:
        return f"{self.engine} {self.versions}"

    def __call__(self, handed: Handed, n: int) -> Reading:
        """What this engine version computes for a request of ``n`` tokens from ``handed``."""
        checks.positive_int("n", n)
        got = self.compute(handed, n)
        if got.inv_freq.shape != (handed.dim // 2,):
            raise ValueError(
                f"{self.label}: inv_freq has shape {tuple(got.inv_freq.shape)}; expected ({handed.dim // 2},)"
            )
        return Reading(
            engine=self.engine,
            versions=self.versions,
            n=n,
            inv_freq=got.inv_freq,
            multiplier=rope.cos_sin_multiplier(got.factor),
            switch=got.switch,
            dropped=got.dropped,
            breaks=got.breaks,
            uniform=got.uniform,
            source=self.source,
            confirmed=not got.unconfirmed,
            unconfirmed=got.unconfirmed,
        )


# ----------------------------------------------------------------------------- helpers
def plain_inv_freq(handed: Handed, base: float | None = None) -> torch.Tensor:
    """Plain RoPE's ``inv_freq`` ``[dim/2]`` at ``base`` (default: the base handed)."""
    return rope.default(handed.dim, handed.base if base is None else base)[0]


def dropped(handed: Handed, read: set[str] | frozenset[str]) -> tuple[str, ...]:
    """The keys of the rope handed that the engine does not read (``rope_type``/``type`` aside)."""
    return tuple(sorted(set(handed.rope) - set(read) - {"rope_type", "type"}))


def refusal(handed: Handed, why: str) -> Found:
    """An engine that refuses the settings (or the request): plain frequencies, ``breaks`` says why
    (``refuses: why``, or ``why`` itself where it starts with "refuses")."""
    return Found(plain_inv_freq(handed), breaks=why if why.startswith("refuses") else f"refuses: {why}")


def past_limit(n: int, limit: int, what: str) -> str:
    """The refusal of a request longer than the engine's serving limit (empty where it fits)."""
    return f"refuses: n = {n} > {what} = {limit}" if n > limit else ""


def unread(handed: Handed, engine: str, known: tuple[str, ...]) -> ValueError:
    """The error for a ``rope_type`` a reading does not cover."""
    return ValueError(f"rope_type={handed.kind!r} has no reading for {engine}; read: {', '.join(known)}")


def factors(handed: Handed, key: str) -> torch.Tensor:
    """The rope's per-pair ``key`` list (``short_factor``, ``long_factor``) as ``[dim/2]``."""
    values = handed.rope.get(key)
    if values is None or len(values) != handed.dim // 2:
        got = "none" if values is None else f"{len(values)} values"
        raise ValueError(f"rope {key} has {got}; expected dim // 2 = {handed.dim // 2} values")
    return torch.tensor([float(v) for v in values], dtype=torch.float32)  # [dim/2]


def sqrt_scale(scale: float, l0: int) -> float:
    """LongRoPE's default cos/sin factor ``sqrt(1 + ln s / ln L0)`` (1 for s <= 1)."""
    return rope.longrope_attention_factor(max(scale, 1.0), l0)
