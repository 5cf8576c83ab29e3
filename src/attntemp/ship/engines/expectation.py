"""``attntemp audit``'s reference and its comparison: attntemp's own figures for a config per layer
group and position (:mod:`attntemp.ops.attention_config` over :mod:`attntemp.ops.rope` and
:mod:`attntemp.ops.schedules`), and an engine's figures measured against them, group by group,
into a verdict. The engines' audits (:mod:`attntemp.ship.engines`) build their entries with
:func:`engine_entry`.
"""

from __future__ import annotations

import math
from typing import Any

from ...ops import attention_config
from ...ops.attention_config import Group

SAME = 1e-6  # relative: figures this close at every position are shown as one number (below the tolerance)


# ----------------------------------------------------------------------------- the reference
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return abs(a - b) <= SAME * max(abs(a), abs(b))


def collapse(values: list[Any]) -> Any:
    """One value where every position has the same (to ``SAME``), else the list aligned with the positions."""
    return values[0] if all(_same(v, values[0]) for v in values) else values


def rounded(x: float) -> float:
    """``x`` to 10 significant digits, as the figures are reported."""
    return float(f"{x:.10g}")


def group_reference(g: Group, positions: tuple[int, ...]) -> dict[str, Any]:
    """A group's reference figures at ``positions``."""
    inv = [g.rope_at(p)[0] for p in positions]
    return {
        "name": g.name,
        "layers": list(g.layers),
        "logit_multiplier": collapse([rounded(g.multiplier_at(p)) for p in positions]),
        "attention_factor": collapse([rounded(g.rope_at(p)[1]) for p in positions]),
        "scale_ratio": rounded(g.scale_ratio),
        "inv_freq": None
        if g.rope is None
        else collapse([[rounded(float(x)) for x in (() if t is None else t)] for t in inv]),
        "formula": g.formula(),
    }


def config_reference(config: dict[str, Any], positions: tuple[int, ...]) -> dict[str, Any]:
    """The reference of ``config``: the primary group's figures on top, every group under ``groups``."""
    found = attention_config.groups(config)
    main = attention_config.primary(found)
    rows = [group_reference(g, positions) for g in found]
    top = rows[found.index(main)]
    roped = top if main.rope else next((r for g, r in zip(found, rows, strict=True) if g.rope), top)
    return {
        "logit_multiplier": top["logit_multiplier"],
        "positions": list(positions),
        "inv_freq": roped["inv_freq"],
        "formula": top["formula"],
        "primary": top["name"],
        "groups": rows,
        "notes": attention_config.ignored(main.geometry),
    }


# ----------------------------------------------------------------------------- comparing
def per_position(value: Any, n: int) -> list[Any]:
    """A figure as one value per position (a collapsed figure repeated ``n`` times)."""
    return (
        value if isinstance(value, list) and len(value) == n and (n > 1 or isinstance(value[0], list)) else [value] * n
    )


def inv_lists(value: Any, n: int) -> list[list[float]]:
    """inv_freq as one list per position (empty lists for NoPE)."""
    if value is None:
        return [[] for _ in range(n)]
    return value if value and isinstance(value[0], list) else [value] * n


def compare_group(ref: dict[str, Any], got: dict[str, Any], positions: list[int], tol: float) -> dict[str, Any]:
    """Measured against reference figures of one group: worst ratio, worst relative inv_freq gap, from where."""
    n = len(positions)
    m_ref, m_got = per_position(ref["logit_multiplier"], n), per_position(got["logit_multiplier"], n)
    ratios = [g / r for g, r in zip(m_got, m_ref, strict=True)]
    worst = max(range(n), key=lambda i: abs(math.log(ratios[i])))
    out: dict[str, Any] = {"name": ref["name"], "multiplier_ratio": ratios[worst], "at_position": positions[worst]}
    out["multiplier_from"] = next((positions[i] for i in range(n) if abs(ratios[i] - 1) > tol), None)
    i_ref, i_got = inv_lists(ref["inv_freq"], n), inv_lists(got["inv_freq"], n)
    out["rotates"] = (got["inv_freq"] is not None, ref["inv_freq"] is not None)
    gaps = [_inv_gap(a, b) for a, b in zip(i_got, i_ref, strict=True)]
    k = max(range(n), key=lambda i: gaps[i][0])
    out.update(inv_freq_difference=gaps[k][0], inv_freq_pair=gaps[k][1])
    out["inv_freq_from"] = next((positions[i] for i in range(n) if gaps[i][0] > tol), None)
    return out


def _inv_gap(got: list[float], ref: list[float]) -> tuple[float, int | None]:
    """Largest relative difference and its pair; ``inf`` when the sizes differ (one rotates, one not)."""
    if len(got) != len(ref):
        return math.inf, None
    if not ref:
        return 0.0, None
    rel = [abs(g - r) / abs(r) if r else abs(g) for g, r in zip(got, ref, strict=True)]
    j = max(range(len(rel)), key=rel.__getitem__)
    return rel[j], j


def engine_verdict(comparisons: list[dict[str, Any]], tol: float) -> tuple[str, str]:
    """``(verdict, one line)`` of an engine's group comparisons."""
    said = []
    for c in comparisons:
        if c["rotates"][0] != c["rotates"][1]:
            said.append(
                f"{c['name']}: {'rotates q and k' if c['rotates'][0] else 'does not rotate'} against the config"
            )
            continue
        if c["multiplier_from"] is not None:
            said.append(
                f"{c['name']}: logit multiplier x{c['multiplier_ratio']:.6g} of the reference (at position "
                f"{c['at_position']}), from position {c['multiplier_from']}"
            )
        if c["inv_freq_from"] is not None:
            said.append(
                f"{c['name']}: inv_freq up to {c['inv_freq_difference']:.3g} relative (pair {c['inv_freq_pair']}), "
                f"from position {c['inv_freq_from']}"
            )
    if said:
        return "differs", "; ".join(said)
    return "agrees", f"every group within {tol:g} relative at every position"


def engine_entry(ref: dict[str, Any], figures: list[dict[str, Any]], version: str, tol: float) -> dict[str, Any]:
    """An engine's audit entry from its figures per group: verdict, summary, the primary group's figures."""
    comparisons = [compare_group(r, f, ref["positions"], tol) for r, f in zip(ref["groups"], figures, strict=True)]
    word, line = engine_verdict(comparisons, tol)
    main = next(i for i, r in enumerate(ref["groups"]) if r["name"] == ref["primary"])
    return {
        "verdict": word,
        "summary": line,
        "version": version,
        "logit_multiplier": figures[main]["logit_multiplier"],
        "inv_freq": figures[main]["inv_freq"] or next((f["inv_freq"] for f in figures if f["inv_freq"]), None),
        "largest_multiplier_ratio": max((c["multiplier_ratio"] for c in comparisons), key=lambda r: abs(math.log(r))),
        "largest_inv_freq_difference": max(c["inv_freq_difference"] for c in comparisons),
        "groups": [{**f, **c} for f, c in zip(figures, comparisons, strict=True)],
    }
