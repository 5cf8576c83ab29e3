"""``attntemp audit --readings``: the engine readings (:mod:`attntemp.ship.readings`) checked in the
engines installed here, on a proxy each can run.

The proxy is a random float32 Llama (head_dim 64: vLLM's CPU attention refuses 16; L0 = 256; q and
k weights large enough that attention is far from uniform). Each :class:`Case` hands the engine a
RoPE setting, a request of ``n`` tokens and a serving limit. The installed version's reading
predicts what the engine computes: the frequencies and the logit multiplier (run on the
transformers proxy with its rotary ``inv_freq`` and cos/sin factor replaced by the reading's), or a
break (NaN from a position on, a refusal). The engine runs the same proxy with the same settings.

* frequencies and multiplier: the mean KL(prediction || engine) per token over the request's
  positions at most the tolerance (:data:`READINGS_KL`): ``confirmed``;
* a break past a position (vLLM reading past its cos/sin cache): the engine agrees before that
  position and, from it on, returns NaN or log-probabilities the reading's RoPE does not give (KL
  over the tolerance) at :data:`UNDEFINED_SHARE` of the later positions or more (memory read past
  a table: a row may match by chance, and which rows are NaN changes from run to run): ``confirmed``;
* a refusal: the engine refuses (no output): ``confirmed``.

Beside each, the KL from transformers' reading of the same settings to the engine says whether the
case tells the two readings apart (a check that cannot fail proves nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...ops.rope import factors as rope_factors
from ...utils.tables import markdown_table
from ..engine_common import kl, per_row_kl
from . import Reading
from .base import Handed

L0, DIM, THETA = 256, 64, 10000.0
PROXY_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": DIM,
    "max_position_embeddings": L0,
    "rope_theta": THETA,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
READINGS_KL = 1e-4  # mean KL per token, float32 on both sides over every position of the request
BREAK_AT = "undefined past position "
UNDEFINED_SHARE = 0.9


@dataclass(frozen=True)
class Case:
    """One setting handed to an engine: ``rope`` (HF ``rope_parameters``, without ``rope_theta``),
    a request of ``n`` tokens, the serving limit ``limit`` (vLLM ``--max-model-len``) and
    ``max_position_embeddings`` as handed (``positions``; None: L0)."""

    name: str
    rope: dict[str, Any] = field(hash=False)
    n: int
    limit: int
    positions: int | None = None

    def handed(self) -> Handed:
        return Handed(self.rope, DIM, THETA, L0, self.positions, self.limit)

    def overrides(self) -> dict[str, Any]:
        """vLLM's ``--hf-overrides`` for this case."""
        body: dict[str, Any] = {"rope_parameters": {**self.rope, "rope_theta": THETA}}
        return body if self.positions is None else {**body, "max_position_embeddings": self.positions}


def longrope_past_l0(s: float, cos_sin: float) -> dict[str, Any]:
    """advise's "YaRN past L0" carrier: longrope, short factors 1, long factors YaRN's divisors."""
    long = rope_factors.init_factors("yarn", DIM, THETA, s, L0)  # [d/2]
    return rope_factors.longrope_parameters(long, s, L0, cos_sin)


def cases() -> tuple[Case, ...]:
    """The settings issue 51 names: dynamic, yarn with an explicit attention factor, longrope under
    and past L0 (and served past L0 with a short request)."""
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": L0, "attention_factor": 1.2}
    lr = longrope_past_l0(2.0, 1.1)
    return (
        Case("dynamic s = 2, request under L0", dynamic, 200, 2 * L0),
        Case("dynamic s = 2, request past L0", dynamic, 400, 2 * L0),
        Case("yarn s = 2, attention_factor 1.2", yarn, 400, 2 * L0, 2 * L0),
        Case("longrope (YaRN past L0), served to L0, request under L0", lr, 200, L0, 2 * L0),
        Case("longrope (YaRN past L0), served to 2 L0, request under L0", lr, 200, 2 * L0, 2 * L0),
        Case("longrope (YaRN past L0), served to 2 L0, request past L0", lr, 400, 2 * L0, 2 * L0),
    )


def random_row(n: int, seed: int = 0) -> list[int]:
    """``n`` random byte tokens (seeded), BOS (256) first."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (n,), generator=g)  # [n]
    ids[0] = 256
    return ids.tolist()


@torch.no_grad()
def predicted_logp(model: Any, row: list[int], reading: Reading) -> torch.Tensor:
    """The proxy's log-probabilities ``[n - 1, V]`` (position p predicts token p + 1) with every
    rotary module's ``inv_freq`` and cos/sin factor set to the reading's; restored after."""
    rotaries = [m for m in model.modules() if hasattr(m, "inv_freq") and hasattr(m, "attention_scaling")]
    saved = [(m.inv_freq.clone(), m.attention_scaling) for m in rotaries]
    try:
        for m in rotaries:
            m.inv_freq.copy_(reading.inv_freq.to(m.inv_freq))  # [d/2]
            m.attention_scaling = math.sqrt(reading.multiplier)
        logits = model(torch.tensor([row])).logits[0, :-1]  # [n-1, V]
        return torch.log_softmax(logits.double(), -1)  # [n-1, V]
    finally:
        for m, (inv, af) in zip(rotaries, saved, strict=True):
            m.inv_freq.copy_(inv)
            m.attention_scaling = af


def break_from(reading: Reading) -> int | None:
    """The first position the reading says is undefined (None: no such break)."""
    if BREAK_AT not in reading.breaks:
        return None
    return int(reading.breaks.split(BREAK_AT, 1)[1].split(":")[0].split()[0])


def reading_verdict(
    case: Case, reading: Reading, mine: torch.Tensor | None, got: torch.Tensor | None, meant: float | None
) -> dict:
    """The row of one case: the reading's prediction against what the engine returned (``meant``: the
    KL from transformers' reading of the same settings to the engine)."""
    row = {"case": case.name, "n": case.n, "limit": case.limit, "reading": reading.label,
           "predicts": reading.breaks or f"x{reading.multiplier:.4g} on the logits; {reading.switch}",
           "kl_transformers_reading": meant}  # fmt: skip
    if reading.breaks.startswith("refuses"):
        return {**row, "kl": None, "confirmed": got is None, "how": "engine refused" if got is None else "engine ran"}
    if got is None or mine is None:
        return {**row, "kl": None, "confirmed": False, "how": "engine refused, the reading predicts it runs"}
    first = break_from(reading)
    nan_rows = torch.isnan(got).any(-1)  # [n-1]
    if first is not None:  # row p: the logits at position p, undefined once p >= first
        value = kl(mine[:first], got[:first])
        past = per_row_kl(mine[first:], got[first:])  # [n-1-first]
        off = torch.isnan(past) | (past > READINGS_KL)  # [n-1-first]
        clean = not bool(nan_rows[:first].any())
        nans, offs = int(nan_rows[first:].sum()), int((off & ~torch.isnan(past)).sum())
        how = f"KL {value:.3g} before {first}; from {first}: {nans} NaN, {offs} off its RoPE, of {got.shape[0] - first}"
        undefined = float(off.double().mean()) >= UNDEFINED_SHARE
        return {**row, "kl": value, "confirmed": clean and value <= READINGS_KL and undefined, "how": how}
    value = kl(mine, got)
    how = "NaN in the engine's output" if bool(nan_rows.any()) else f"KL {value:.3g} (limit {READINGS_KL:g})"
    return {**row, "kl": value, "confirmed": value <= READINGS_KL and not bool(nan_rows.any()), "how": how}


def render(checked: dict[str, dict[str, Any]]) -> str:
    """One table per engine checked: the case, what the reading predicts, the engine's figure, confirmed."""
    lines = []
    for name, e in checked.items():
        if "rows" not in e:
            lines.append(f"readings in {name}: cannot run: {e['reason']}")
            continue
        lines.append(
            f"readings in {name} {e['version']} ({e['reading']}; mean KL per token at most {e['tolerance']:g}):"
        )
        rows = [(r["case"], r["n"], r["limit"], r["predicts"], r["how"], _fmt(r["kl_transformers_reading"]),
                 "yes" if r["confirmed"] else "**no**") for r in e["rows"]]  # fmt: skip
        head = (
            "case",
            "n",
            "limit",
            "the reading predicts",
            "the engine",
            "KL from transformers' reading",
            "confirmed",
        )
        lines += [markdown_table(head, rows), ""]
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"
