"""``attntemp audit``: does an engine apply a model's RoPE scaling and attention temperature the way
its config means? Checked per position on a tiny proxy of the model, from its ``config.json`` alone.

The reference is attntemp's own math (:mod:`attntemp.ship.engines.expectation`): per layer group and
position, the effective pre-softmax logit multiplier ``m(p) = af(p)^2 * scale_ratio * schedule(p)``
and the inverse frequencies. Each engine is measured on a proxy with the same attention and RoPE
configuration and random weights, as its module in :mod:`attntemp.ship.engines` says: transformers
reads its rotary output and attention inputs directly; llama.cpp and vLLM run the proxy and are
compared with the transformers proxy by KL (:mod:`attntemp.ship.engine_common`).

A verdict per engine: ``agrees``, ``differs`` (by how much, from which position) or ``cannot run``
(why). The command exits 1 when an engine differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...assets import configs_path, shipped_configs
from ...ops import attention_config
from ...ops.geometry import config_dict, stated_context
from ...utils import checks
from ...utils.tables import markdown_table
from ..config import AuditConfig
from ..engines import ENGINES
from ..engines import transformers as reference_engine
from ..engines.base import AuditRun
from ..engines.expectation import config_reference, inv_lists, per_position
from ..readings import engine_checks as reading_checks


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
    if not isinstance(config_dict(data).get("model_type"), str):
        raise ValueError(f"config={path!r} has no model_type; expected the model's config.json")
    return data


@dataclass(frozen=True)
class AuditResult:
    """The reference and each engine's figures and verdict."""

    config: str
    model_type: str
    reference: dict[str, Any]
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    readings: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        """An engine differs from the config, or one of its readings was not confirmed in it."""
        unconfirmed = any(not r["confirmed"] for e in self.readings.values() for r in e.get("rows", ()))
        return unconfirmed or any(e["verdict"] == "differs" for e in self.engines.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "model_type": self.model_type,
            "reference": self.reference,
            "engines": self.engines,
            "readings": self.readings,
        }

    def markdown(self) -> str:
        """What ``attntemp audit`` prints (:meth:`render`)."""
        return self.render()

    def render(self) -> str:
        """The reference per group and position, then one line per engine; the readings checked."""
        checked = reading_checks.render(self.readings) if self.readings else ""
        return (self._render_config() + "\n\n" + checked if self.config else checked).strip()

    def _render_config(self) -> str:
        pos = self.reference["positions"]
        lines = [f"attntemp audit of {self.config} ({self.model_type}); reference from attntemp's own math", ""]
        rows = []
        for g in self.reference["groups"]:
            ms, afs = per_position(g["logit_multiplier"], len(pos)), per_position(g["attention_factor"], len(pos))
            inv = inv_lists(g["inv_freq"], len(pos))
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


def check_readings(engines: tuple[str, ...], engine_dir: str | None) -> dict[str, dict[str, Any]]:
    """The readings checked in each of ``engines`` installed here (the reference, transformers, is
    what the predictions run on), each ``cannot run`` with why where it is not."""
    checks = {name: ENGINES[name].check_readings for name in dict.fromkeys(engines)}
    return {name: check(engine_dir) for name, check in checks.items() if check is not None}


def run_audit(cfg: AuditConfig) -> AuditResult:
    """Reference, then each engine in ``cfg.engines`` (see the module doc); with ``cfg.readings``, the
    readings checked in each (:mod:`attntemp.ship.readings.engine_checks`)."""
    readings = check_readings(cfg.engines, cfg.engine_dir) if cfg.readings else {}
    if readings and all("rows" not in e for e in readings.values()):
        why = "; ".join(f"{name}: {e['reason']}" for name, e in readings.items())
        raise ValueError(
            f"engines={cfg.engines!r}: none of them can check --readings here, so no reading was checked ({why})"
        )
    if cfg.config is None:
        return AuditResult("", "", {}, {}, readings)
    return replace(_audit_config(cfg, cfg.config), readings=readings)


def past_context(config: dict[str, Any], positions: tuple[int, ...]) -> list[str]:
    """A note when ``positions`` reach past the context the config is set up for
    (``max_position_embeddings``): the figures there are the formula's, at a length no engine serves."""
    most = stated_context(config_dict(config))
    past = [p for p in positions if isinstance(most, int) and p >= most]
    if not past:
        return []
    return [
        f"--positions {','.join(map(str, past))} {'is' if len(past) == 1 else 'are'} past the model's context, "
        f"max_position_embeddings={most}: the figures there are the formula's, at a length the model is not set up for"
    ]


def _audit_config(cfg: AuditConfig, path: str) -> AuditResult:
    config = load_config(path)
    positions = tuple(sorted(set(cfg.positions or attention_config.default_positions(config))))
    ref = config_reference(config, positions)  # every value checked here, before any model is built
    ref = {**ref, "notes": [*ref.get("notes", []), *past_context(config, positions)]}
    model_type = config_dict(config)["model_type"]
    with reference_engine.quiet():
        base = reference_engine.base_entry(config, ref, path, cfg.tolerance)
        run = AuditRun(config, ref, base, cfg.engine_dir, cfg.threads)
        engines = {name: ENGINES[name].audit(run) for name in dict.fromkeys(cfg.engines)}
    if all(e["verdict"] == "cannot run" for e in engines.values()):  # nothing checked is not a pass
        why = "; ".join(f"{name}: {e['reason']}" for name, e in engines.items())
        raise ValueError(f"engines={cfg.engines!r}: none of them can run here, so nothing was checked ({why})")
    return AuditResult(path, model_type, ref, engines)
