"""Old public names kept as aliases that warn (the model: lm-evaluation-harness's ``LEGACY_EXPORTS``).

A name renamed or moved stays importable from where it was for one minor release: reading it
gives the new object and a ``DeprecationWarning`` naming the new place and the release that removes
it (:data:`REMOVAL`). Each module that lost names sets ``__getattr__ = legacy_getattr(__name__)``;
the names are listed here, in one table (:data:`RENAMED`), and in CHANGELOG.md.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVAL = "0.3.0"  # the release that removes every alias below

# module (under attntemp.) -> {old name: "new name" in the same module, or "module:new name"}
RENAMED: dict[str, dict[str, str]] = {
    "advise.config": {"OBJECTIVES": "RACE_OBJECTIVES", "RESULTS": "ADVISE_RESULTS", "OUTPUTS": "ADVISE_OUTPUTS",
                      "AdvisePlan": "advise.plan:AdvisePlan", "preflight_advise": "advise.plan:preflight_advise",
                      "short_lengths": "advise.plan:short_lengths", "fitting_needles": "advise.plan:fitting_needles"},
    "advise.demo": {"BAKED": "BAKED_DIR", "OUTPUTS": "DEMO_OUTPUTS",
                    "MODEL_DEFAULTS": "advise.config:MODEL_DEFAULTS", "demo_config": "advise.config:demo_config",
                    "default_out": "advise.config:default_out", "DEMO_LEARN_STEPS": "advise.config:DEMO_LEARN_STEPS"},
    "advise.diagnose": {"attention_stats": "window_attention_stats"},
    "advise.advice_page": {"temperature_table": "temperature_lines", "markdown": "advice_markdown"},
    "advise.run": {"write": "write_advice"},
    "analysis.generate": {"RESULTS": "GENERATE_RESULTS"},
    "analysis.run": {"RESULTS": "MEASURE_RESULTS"},
    "evaluate": {"HarnessOptions": "evaluate.harness.paired:HarnessOptions"},
    "evaluate.harness.paired": {"OUTPUTS": "EVAL_OUTPUTS", "check_out": "check_eval_out", "write": "write_eval"},
    "evaluate.harness.table": {"markdown": "paired_table"},
    "evaluate.limits": {"check_memory": "check_length_memory"},
    "evaluate.score": {"SCHEMA": "SCORES_SCHEMA"},
    "evaluate.sweep.store": {"SCHEMA": "SWEEP_SCHEMA", "groups": "multiplier_groups",
                             "distinct_keys": "evaluate.sweep.config:distinct_keys"},
    "evaluate.task_base": {"register": "register_task"},
    "hf.flex_check": {"TOLERANCE": "FLEX_TOLERANCE"},
    "hf.learnable": {"SCHEDULES": "LEARNED_SCHEDULES"},
    "hf.proxy": {"PROBE": "AUDIT_PROBE", "probing": "probing_proxy", "measure": "measure_proxy"},
    "hf.rope_factors": {"install": "install_factors"},
    "hf.models.shipped": {"assemble": "assemble_gguf"},
    "hf.models.where": {"NAMES": "MODEL_NAMES"},
    "logits.calibrate": {"RESULTS": "CALIBRATION_RESULTS", "MAX_BINS": "logits.config:MAX_BINS"},
    "ops.geometry": {"FIELDS": "CONFIG_FIELDS"},
    "ops.schedules": {"constant": "Constant", "yarn": "Yarn", "yarn_sqrt": "YarnSqrt", "logn": "LogN",
                      "sqrt_logn": "SqrtLogN", "gated_constant": "GatedConstant", "llama4": "Llama4",
                      "log_length": "LogLength", "ssmax": "SSMax"},
    "report.build": {"OUTPUTS": "REPORT_OUTPUTS", "ReportConfig": "report.config:ReportConfig"},
    "ship.audit": {"reference": "ship.audit.expectation:config_reference"},
    "ship.bake": {"FORMAT": "BAKED_FORMAT"},
    "ship.schedule_export": {"split": "split_schedule"},
    "ship.verify": {"Reference": "ship.comparison:EngineReference", "reference": "ship.comparison:engine_reference"},
    "tune.config": {"second_text": "tune.plan:second_text", "held_out_lengths": "tune.plan:held_out_lengths",
                    "preflight_tune": "tune.plan:preflight_tune", "SecondText": "tune.plan:SecondText",
                    "TunePlan": "tune.plan:TunePlan"},
    "tune.evidence": {"BASELINE": "M_ONE", "candidates": "evidence_specs", "check_lengths": "pick_check_lengths"},
    "tune.resume": {"RESULTS": "TUNE_RESULTS", "CHECKPOINT": "CHECKPOINT_FILE", "OUTPUTS": "TUNE_OUTPUTS"},
    "utils.resources": {"check_threads": "check_cpu_threads"},
    "utils.checks": {"positive_tensor": "ops.tensor_checks:positive_tensor",
                     "finite_tensor": "ops.tensor_checks:finite_tensor"},
    "ship.audit.run": {"TOLERANCE": "ship.config:TOLERANCE", "MAX_POSITION": "ship.config:MAX_POSITION",
                       "MAX_THREADS": "ship.config:MAX_THREADS"},
    "analysis.reference_profile": {"DEFAULT_WINDOW": "analysis.config:DEFAULT_WINDOW"},
}  # fmt: skip
PACKAGE = "attntemp"


def alias_target(module: str, old: str) -> tuple[str, str]:
    """``(full module name, new name)`` of ``old`` in ``module`` (under ``attntemp.``)."""
    where, _, new = RENAMED[module][old].rpartition(":")
    return f"{PACKAGE}.{where or module}", new


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """The one warning every alias gives."""
    warnings.warn(f"{old} is deprecated; use {new} (removed in {REMOVAL})", DeprecationWarning, stacklevel=stacklevel)


def legacy_getattr(module_name: str, front: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """The module ``__getattr__`` that serves ``module_name``'s renamed names with a warning; for a
    package, ``front`` maps the names it gives to the submodule each is read from on first use (PEP
    562: importing the package loads none of them), without a warning."""
    module = module_name.removeprefix(f"{PACKAGE}.")
    names = RENAMED.get(module, {})

    def __getattr__(name: str) -> Any:
        if front and name in front:
            return getattr(importlib.import_module(f"{module_name}.{front[name]}"), name)
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        where, new = alias_target(module, name)
        warn(f"{module_name}.{name}", f"{where}.{new}")
        return getattr(importlib.import_module(where), new)

    return __getattr__
