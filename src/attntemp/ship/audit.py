"""``attntemp audit``: does an engine apply a model's RoPE scaling and attention temperature the way
its config means? Checked per position on a tiny proxy of the model, from its ``config.json`` alone.

The reference is attntemp's own math (:mod:`attntemp.ops.attention_config` over :mod:`.ops.rope` and
:mod:`.ops.schedules`): per layer group and position, the effective pre-softmax logit multiplier
``m(p) = af(p)^2 * scale_ratio * schedule(p)`` and the inverse frequencies. Each engine is measured
on a proxy with the same attention and RoPE configuration and random weights:

* transformers: :func:`attntemp.hf.proxy.measure` reads its rotary output and the q, k and scale its
  attention function receives, one query token per position;
* llama.cpp: the proxy converted to GGUF (:mod:`.audit_llamacpp`), its log-probabilities compared
  with the transformers proxy's by KL, and the multiplier that best explains them fitted;
* vLLM: checked for (its CPU build needs AVX-512); measuring through it is not written yet.

A verdict per engine: ``agrees``, ``differs`` (by how much, from which position) or ``cannot run``
(why). The command exits 1 when an engine differs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..assets import configs_path, shipped_configs
from ..ops import attention_config
from ..ops.attention_config import Group
from ..utils import checks
from ..utils.options import ints, names, option
from ..utils.tables import markdown_table

AUDIT_ENGINES = ("transformers", "llama.cpp", "vllm")
TOLERANCE = 1e-5  # relative: engines compute cos/sin in float32
MAX_POSITION = 2**31 - 1
SAME = 1e-6  # relative: figures this close at every position are shown as one number (below TOLERANCE)


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """``attntemp audit`` and :func:`run_audit`."""

    config: str = option(help="a model's config.json (no weights needed), or a shipped config's name: gpt_oss, ...")
    engines: tuple[str, ...] = option(
        AUDIT_ENGINES, f"engines to audit, comma-separated: {', '.join(AUDIT_ENGINES)}", parse=names
    )
    positions: tuple[int, ...] | None = option(
        None, "query positions, comma-separated (default: 0, 1, around L0 and 2 L0, the schedule's steps, the end)",
        parse=ints,
    )  # fmt: skip
    tolerance: float = option(TOLERANCE, "relative difference above which an engine differs", parse=float)
    engine_dir: str | None = option(None, "llama.cpp build folder (default: PATH, then ~/.cache/attntemp/engines)")
    threads: int | None = option(None, "llama.cpp threads (default: its own)", parse=int)

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError(f"engines={self.engines!r} is not allowed; expected some of {', '.join(AUDIT_ENGINES)}")
        for i, e in enumerate(self.engines):
            checks.choice(f"engines[{i}]", e, AUDIT_ENGINES)
        if self.positions is not None and not self.positions:
            raise ValueError("positions is empty; give query positions, e.g. 0,4096, or leave it out for the defaults")
        if self.engine_dir is not None and not Path(self.engine_dir).expanduser().is_dir():
            why = "a file" if Path(self.engine_dir).exists() else "no such folder"
            raise ValueError(f"engine_dir={self.engine_dir!r} is not allowed: {why}; expected llama.cpp's build folder")
        for i, p in enumerate(self.positions or ()):
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_POSITION:
                raise ValueError(f"positions[{i}]={p!r} is not allowed; expected an integer in [0, {MAX_POSITION}]")
        if checks.positive("tolerance", self.tolerance) >= 1:
            raise ValueError(f"tolerance={self.tolerance!r} is not allowed; expected a number in (0, 1)")
        if self.threads is not None:
            checks.positive_int("threads", self.threads)


def load_config(path: str) -> dict[str, Any]:
    """A ``config.json`` as a dict, from a path or a shipped config's name (``gpt_oss``:
    :func:`attntemp.assets.shipped_configs`); every problem raised as ``config='PATH': what is wrong``."""
    p = Path(path)
    if path and not p.exists() and "/" not in path and not path.endswith(".json"):
        checks.choice("config", path, shipped_configs())  # a name: one of the shipped configs
        p = configs_path() / f"{path}.json"
    if not path.strip():
        raise ValueError(f"config={path!r} is empty; expected a model's config.json file or a shipped config's name")
    if p.is_dir():
        raise ValueError(f"config={path!r} is a folder; expected a model's config.json file")
    if not p.is_file():
        raise FileNotFoundError(f"config={path!r}: no such file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"config={path!r} is not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"config={path!r}: a config JSON must be an object, not {type(data).__name__}")
    if not isinstance(attention_config.text_config(data).get("model_type"), str):
        raise ValueError(f"config={path!r} has no model_type; expected the model's config.json")
    return data


# ----------------------------------------------------------------------------- the reference
def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return abs(a - b) <= SAME * max(abs(a), abs(b))


def collapse(values: list[Any]) -> Any:
    """One value where every position has the same (to ``SAME``), else the list aligned with the positions."""
    return values[0] if all(_same(v, values[0]) for v in values) else values


def _rounded(x: float) -> float:
    return float(f"{x:.10g}")


def group_reference(g: Group, positions: tuple[int, ...]) -> dict[str, Any]:
    """A group's reference figures at ``positions``."""
    inv = [g.rope_at(p)[0] for p in positions]
    return {
        "name": g.name,
        "layers": list(g.layers),
        "logit_multiplier": collapse([_rounded(g.multiplier_at(p)) for p in positions]),
        "attention_factor": collapse([_rounded(g.rope_at(p)[1]) for p in positions]),
        "scale_ratio": _rounded(g.scale_ratio),
        "inv_freq": None
        if g.rope is None
        else collapse([[_rounded(float(x)) for x in (() if t is None else t)] for t in inv]),
        "formula": g.formula(),
    }


def reference(config: dict[str, Any], positions: tuple[int, ...]) -> dict[str, Any]:
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
        "notes": attention_config.ignored(attention_config.text_config(config)),
    }


# ----------------------------------------------------------------------------- comparing
def _per_position(value: Any, n: int) -> list[Any]:
    return (
        value if isinstance(value, list) and len(value) == n and (n > 1 or isinstance(value[0], list)) else [value] * n
    )


def _inv_lists(value: Any, n: int) -> list[list[float]]:
    if value is None:
        return [[] for _ in range(n)]
    return value if value and isinstance(value[0], list) else [value] * n


def compare_group(ref: dict[str, Any], got: dict[str, Any], positions: list[int], tol: float) -> dict[str, Any]:
    """Measured against reference figures of one group: worst ratio, worst relative inv_freq gap, from where."""
    n = len(positions)
    m_ref, m_got = _per_position(ref["logit_multiplier"], n), _per_position(got["logit_multiplier"], n)
    ratios = [g / r for g, r in zip(m_got, m_ref, strict=True)]
    worst = max(range(n), key=lambda i: abs(math.log(ratios[i])))
    out: dict[str, Any] = {"name": ref["name"], "multiplier_ratio": ratios[worst], "at_position": positions[worst]}
    out["multiplier_from"] = next((positions[i] for i in range(n) if abs(ratios[i] - 1) > tol), None)
    i_ref, i_got = _inv_lists(ref["inv_freq"], n), _inv_lists(got["inv_freq"], n)
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


def verdict(comparisons: list[dict[str, Any]], tol: float) -> tuple[str, str]:
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


# ----------------------------------------------------------------------------- the engines
def transformers_figures(config: dict[str, Any], positions: tuple[int, ...]) -> list[dict[str, Any]]:
    """transformers' figures per group of the config (one proxy layer each), as the reference's keys."""
    from ..hf import proxy

    found = attention_config.groups(config)
    out = []
    for m in proxy.measure(config, positions):
        g = next(g for g in found if m.layer in g.layers)
        out.append({
            "name": g.name,
            "layers": list(g.layers),
            "logit_multiplier": collapse([_rounded(x) for x in m.multiplier]),
            "attention_factor": collapse([_rounded(x) for x in m.attention_factor]),
            "scale_ratio": _rounded(m.scale_ratio),
            "inv_freq": collapse([[_rounded(x) for x in t] for t in m.inv_freq]) if m.rotated else None,
        })  # fmt: skip
    return out


def _engine_entry(ref: dict[str, Any], figures: list[dict[str, Any]], version: str, tol: float) -> dict[str, Any]:
    comparisons = [compare_group(r, f, ref["positions"], tol) for r, f in zip(ref["groups"], figures, strict=True)]
    word, line = verdict(comparisons, tol)
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


def vllm_unavailable() -> str | None:
    """Why vLLM cannot be audited here (no AVX-512, or not installed: scripts/build_vllm_cpu.sh's
    venv); None when it can (:mod:`attntemp.ship.audit_vllm`)."""
    from .llamacpp import engines_cache

    cpuinfo = Path("/proc/cpuinfo")
    if "avx512f" not in (cpuinfo.read_text().split() if cpuinfo.is_file() else []):
        return "this CPU lacks avx512f, which vLLM's CPU build needs"
    if not any(p.is_file() for p in engines_cache().glob("vllm-cpu-*/bin/python")):
        return f"vLLM is not installed (no {engines_cache()}/vllm-cpu-*; `bash scripts/build_vllm_cpu.sh`)"
    return None


@dataclass(frozen=True)
class AuditResult:
    """The reference and each engine's figures and verdict."""

    config: str
    model_type: str
    reference: dict[str, Any]
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        return any(e["verdict"] == "differs" for e in self.engines.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "model_type": self.model_type,
            "reference": self.reference,
            "engines": self.engines,
        }

    def render(self) -> str:
        """The reference per group and position, then one line per engine."""
        pos = self.reference["positions"]
        lines = [f"attntemp audit of {self.config} ({self.model_type}); reference from attntemp's own math", ""]
        rows = []
        for g in self.reference["groups"]:
            ms, afs = _per_position(g["logit_multiplier"], len(pos)), _per_position(g["attention_factor"], len(pos))
            inv = _inv_lists(g["inv_freq"], len(pos))
            for i, p in enumerate(pos):
                freq = f"{inv[i][0]:.6g}, {inv[i][-1]:.6g}" if inv[i] else "NoPE"
                figures = (f"{ms[i]:.6g}", f"{afs[i]:.6g}", f"{g['scale_ratio']:.6g}", freq)
                rows.append((g["name"], len(g["layers"]), p, *figures))
        head = ("group", "layers", "position", "logit multiplier", "af", "scale ratio", "inv_freq[0], [-1]")
        lines.append(markdown_table(head, rows))
        lines += [""] + [f"formula ({g['name']}): {g['formula']}" for g in self.reference["groups"]]
        lines += [f"note: {n}" for n in self.reference.get("notes", [])] + [""]
        for name, e in self.engines.items():
            version = f" ({e['version']})" if e.get("version") else ""
            lines.append(f"{name}{version}: {e['verdict']}: {e.get('summary') or e.get('reason', '')}")
        return "\n".join(lines)


def _quiet_transformers() -> Any:
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), not logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()

    def restore() -> None:
        logging.set_verbosity(level)
        if not bars:
            logging.enable_progress_bar()

    return restore


def run_audit(cfg: AuditConfig) -> AuditResult:
    """Reference, then each engine in ``cfg.engines`` (see the module doc)."""
    config = load_config(cfg.config)
    positions = tuple(sorted(set(cfg.positions or attention_config.default_positions(config))))
    ref = reference(config, positions)  # every value checked here, before any model is built
    model_type = attention_config.text_config(config)["model_type"]
    import transformers
    from huggingface_hub.errors import StrictDataclassError  # a transformers config class refusing a field

    restore = _quiet_transformers()
    try:
        figures = transformers_figures(config, positions)
    except (TypeError, KeyError, AttributeError, RuntimeError, StrictDataclassError) as exc:
        restore()
        raise ValueError(
            f"config={cfg.config!r}: transformers {transformers.__version__} cannot build a proxy of "
            f"model_type {model_type!r} ({type(exc).__name__}: {str(exc)[:160]})"
        ) from None
    try:
        ours = _engine_entry(ref, figures, f"transformers {transformers.__version__}", cfg.tolerance)
        engines = {name: _engine(name, config, ref, ours, cfg) for name in dict.fromkeys(cfg.engines)}
    finally:
        restore()
    if all(e["verdict"] == "cannot run" for e in engines.values()):  # nothing checked is not a pass
        why = "; ".join(f"{name}: {e['reason']}" for name, e in engines.items())
        raise ValueError(f"engines={cfg.engines!r}: none of them can run here, so nothing was checked ({why})")
    return AuditResult(cfg.config, model_type, ref, engines)


def _engine(name: str, config: dict[str, Any], ref: dict[str, Any], ours: dict[str, Any], cfg: AuditConfig) -> dict:
    if name == "transformers":
        return ours
    if name == "vllm":
        reason = vllm_unavailable()
        if reason is not None:
            return {"verdict": "cannot run", "reason": reason}
        from .audit_vllm import audit_vllm

        return audit_vllm(config, ours)
    from .audit_llamacpp import audit_llamacpp

    return audit_llamacpp(config, ref, ours, cfg)
