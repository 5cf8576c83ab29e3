"""What ``attntemp advise`` races at a serving length N, and how each engine carries each one.

At a trained length L0 and s = N / L0 > 1 the candidates are, simplest first (the order breaks
ties: of candidates no interval tells apart, the simpler one is recommended):

- no change (m = 1, no RoPE change): the baseline every comparison is made against;
- softening, constant (m = 0.9, T = 1.11) and gated past L0 (``log_length`` with a = 0 and b
  = ln 0.9 / ln s: m = 1 up to L0, 0.9 at N): the claim that softer attention recovers distant
  context;
- sharpening gated past L0: Qwen's log-n (m = log_L0 p past L0; Qwen v1 ``use_logn_attn``);
- dynamic NTK (RoPE base grown with the sequence, nothing changes up to L0; transformers
  ``dynamic``);
- YaRN at s with m = 1, with YaRN's m = (0.1 ln s + 1)^2 (arXiv:2309.00071 eq. 22), with a global
  m tuned on windows the race does not score, and with log-n on top; YaRN at a smaller scale
  s' = (1 + s) / 2 (less interpolation, less cost below L0).

Up to L0 (N <= L0: no extension needed) only the temperature is checked: no change, m = 0.9 and
m = 1.1. :func:`carry` says how an engine carries a spec: its own settings (``attntemp export``),
a baked checkpoint (static per-layer or per-head m), a checkpoint with remote code (a position
schedule, transformers), or not at all, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..hf.rope_scaling import rope_for
from ..ops.schedules import yarn_multiplier
from ..ops.spec import TemperatureSpec
from ..ship.engines import ENGINES
from ..ship.export import export

SOFT = 0.9  # the softening multiplier raced (T = 1.11)
SHARP = 1.1  # the sharpening multiplier raced at or below the trained length
BASELINE = "no change"
TUNED_YARN = "YaRN s, tuned m"


@dataclass(frozen=True)
class Candidate:
    """A spec in the race: its name, what it is, and whether it changes anything up to L0."""

    name: str
    spec: TemperatureSpec
    family: str  # baseline, softening, sharpening, rope, rope + temperature
    gated: bool  # nothing changes up to the trained length
    note: str = ""
    engines: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "gated": self.gated,
            "note": self.note,
            "spec": self.spec.to_dict(),
            "engines": self.engines,
        }


def _yarn(length: int, trained: int, factor: float | None = None) -> dict[str, Any]:
    rope = rope_for("yarn", length, trained)
    assert rope is not None
    return rope if factor is None else {**rope, "factor": float(factor)}


def extension_candidates(length: int, trained: int) -> list[Candidate]:
    """The candidates past the trained length (s = length / trained > 1), simplest first."""
    s = length / trained
    yarn = _yarn(length, trained)
    gate_b = math.log(SOFT) / math.log(s)  # m = (n / L0)^b: 1 up to L0, SOFT at n = length
    logn: dict[str, Any] = {"schedule": "logn", "schedule_params": {"trained_len": trained}}
    smaller = 1.0 + (s - 1.0) / 2.0
    return [
        Candidate(BASELINE, TemperatureSpec(), "baseline", True),
        Candidate(f"softer m = {SOFT:g}", TemperatureSpec(multiplier=SOFT), "softening", False),
        Candidate(
            f"softer past L0 (m = {SOFT:g} at N)",
            TemperatureSpec(schedule="log_length", schedule_params={"trained_len": trained, "b": gate_b}),
            "softening",
            True,
            f"ln m = {gate_b:.4g} ln(n / L0) past L0",
        ),
        Candidate("sharper past L0 (log-n)", TemperatureSpec(**logn), "sharpening", True, "Qwen's m = log_L0(p)"),
        Candidate(f"dynamic NTK s = {s:g}", TemperatureSpec(rope=rope_for("dynamic", length, trained)), "rope", True),
        Candidate(f"{yarn_label(s)}, m = 1", TemperatureSpec(rope=yarn), "rope", False),
        Candidate(
            f"{yarn_label(s)}, YaRN's m = {yarn_multiplier(s):.4g}",
            TemperatureSpec(multiplier=yarn_multiplier(s), rope=yarn),
            "rope + temperature",
            False,
        ),
        Candidate(f"{yarn_label(s)} + log-n", TemperatureSpec(rope=yarn, **logn), "rope + temperature", False),
        Candidate(
            f"{yarn_label(smaller)}, m = 1", TemperatureSpec(rope=_yarn(length, trained, smaller)), "rope", False
        ),
    ]


def temperature_candidates() -> list[Candidate]:
    """At or below the trained length: the temperature alone."""
    return [
        Candidate(BASELINE, TemperatureSpec(), "baseline", True),
        Candidate(f"softer m = {SOFT:g}", TemperatureSpec(multiplier=SOFT), "softening", False),
        Candidate(f"sharper m = {SHARP:g}", TemperatureSpec(multiplier=SHARP), "sharpening", False),
    ]


def tuned_yarn(length: int, trained: int, m: float) -> Candidate:
    """YaRN at s with the global m a search found (on windows the race does not score)."""
    return Candidate(
        TUNED_YARN.replace("s", f"s = {length / trained:g}", 1),
        TemperatureSpec(multiplier=m, rope=_yarn(length, trained)),
        "rope + temperature",
        False,
        f"m = {m:.4g} tuned on the tuning pool's spare windows",
    )


def yarn_label(s: float) -> str:
    """What the name of every YaRN candidate at scale ``s`` starts with."""
    return f"YaRN s = {s:g}"


def candidates(length: int, trained: int) -> list[Candidate]:
    """The race's candidates at ``length`` for a model trained to ``trained`` tokens."""
    return extension_candidates(length, trained) if length > trained else temperature_candidates()


def carry(spec: TemperatureSpec, engine: str, trained: int, config: dict[str, Any] | None) -> dict[str, Any]:
    """How ``engine`` carries ``spec`` on the model of ``config`` (its config dict: the settings take
    its rope_theta and, on Gemma 3, its per-layer-type RoPE): ``{"how": nothing | settings | bake |
    remote code | not carried, "settings" or "command", "why"}``."""
    model_type = (config or {}).get("model_type")
    if spec.is_identity and not spec.rope:
        return {"how": "nothing", "settings": "serve the model as it is"}
    try:
        return {"how": "settings", "settings": export(spec, engine, trained_length=trained, config=config).render()}
    except ValueError as exc:
        why = str(exc)
    if not spec.position_dependent:
        baked = ENGINES[engine].to_bake(spec, config)  # or the equivalent spec the engine carries
        then = " and serve the baked folder" + (" with its RoPE exported" if spec.rope else "")
        name = "spec.json" if baked == spec else "carried.json"
        route = {"how": "bake", "command": f"attntemp bake --spec {name} --out BAKED{then}", "why": why}
        return route if baked == spec else {**route, "spec": baked.to_dict()}
    if ENGINES[engine].remote_code and model_type == "llama":
        return {
            "how": "remote code",
            "command": "attntemp bake --spec spec.json --out BAKED (a checkpoint whose remote code applies the "
            "schedule; load with trust_remote_code=True)",
            "why": why,
        }
    return {"how": "not carried", "why": f"{engine} has no per-position temperature: {why}"}


def with_engines(c: Candidate, trained: int, config: dict[str, Any] | None) -> Candidate:
    """``c`` with how every engine carries it on the model of ``config``."""
    engines = {e: carry(c.spec, e, trained, config) for e in ENGINES}
    return Candidate(c.name, c.spec, c.family, c.gated, c.note, engines)
