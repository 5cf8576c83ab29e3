"""0.3.0 removed every alias that 0.2.0 kept for one minor release (the old names and the old
module paths): importing one fails, and CHANGELOG.md names each with its replacement. What still
warns is an old spelling (utils.options.REMOVAL; advise's ``--check-length``: tests/utils)."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attntemp

ROOT = Path(__file__).resolve().parents[1]

# The aliases 0.2.0 kept (its attntemp.utils.deprecation.RENAMED and attntemp.MOVED), removed in 0.3.0.
REMOVED_NAMES = {
    "advise.config": (
        "OBJECTIVES",
        "RESULTS",
        "OUTPUTS",
        "AdvisePlan",
        "preflight_advise",
        "short_lengths",
        "fitting_needles",
    ),
    "advise.demo": ("BAKED", "OUTPUTS", "MODEL_DEFAULTS", "demo_config", "default_out", "DEMO_LEARN_STEPS"),
    "advise.diagnose": ("attention_stats",),
    "advise.advice_page": ("temperature_table", "markdown"),
    "advise.run": ("write",),
    "analysis.generate": ("RESULTS",),
    "analysis.run": ("RESULTS",),
    "evaluate": ("HarnessOptions",),
    "evaluate.harness.paired": ("OUTPUTS", "check_out", "write"),
    "evaluate.harness.table": ("markdown",),
    "evaluate.limits": ("check_memory",),
    "evaluate.score": ("SCHEMA",),
    "evaluate.sweep.store": ("SCHEMA", "groups", "distinct_keys"),
    "evaluate.task_base": ("register",),
    "hf.flex_check": ("TOLERANCE",),
    "hf.learnable": ("SCHEDULES",),
    "hf.proxy": ("PROBE", "probing", "measure"),
    "hf.rope_factors": ("install",),
    "hf.models.shipped": ("assemble",),
    "hf.models.where": ("NAMES",),
    "logits.calibrate": ("RESULTS", "MAX_BINS"),
    "ops.geometry": ("FIELDS",),
    "ops.schedules": (
        "constant",
        "yarn",
        "yarn_sqrt",
        "logn",
        "sqrt_logn",
        "gated_constant",
        "llama4",
        "log_length",
        "ssmax",
    ),
    "report.build": ("OUTPUTS", "ReportConfig"),
    "ship.audit": ("reference",),
    "ship.bake": ("FORMAT",),
    "ship.schedule_export": ("split",),
    "ship.verify": ("Reference", "reference"),
    "tune.config": ("second_text", "held_out_lengths", "preflight_tune", "SecondText", "TunePlan"),
    "tune.evidence": ("BASELINE", "candidates", "check_lengths"),
    "tune.resume": ("RESULTS", "CHECKPOINT", "OUTPUTS"),
    "utils.resources": ("check_threads",),
    "utils.checks": ("positive_tensor", "finite_tensor"),
    "ship.audit.run": ("TOLERANCE", "MAX_POSITION", "MAX_THREADS"),
    "analysis.reference_profile": ("DEFAULT_WINDOW",),
}
REMOVED_MODULES = (
    "attention",
    "core",
    "rope",
    "schedules",
    "spec",
    "stats",
    "search1d",
    "extend",
    "patching",
    "models",
    "learn",
    "observe",
    "plots",
    "data",
    "tasks",
    "sweep",
    "tiny_eval",
    "evidence",
    "baking",
    "engines",
    "calibration",
    "distill",
    "sampling",
    "demo",
    "tables",
    "evaluate.harness_run",
    "evaluate.harness_table",
    "evaluate.harness_tasks",
    "evaluate.lm_eval_tasks",
    "evaluate.sweep_table",
    "evaluate.store",
    "ship.llamacpp",
    "advise.report",
    "ship.audit_proxy",
    "ship.audit_readings",
    "ship.audit_reference",
    "ops.rope_factors",
    "hf.source",
    "hf.shipped",
)
ALIASES = [(module, old) for module, names in REMOVED_NAMES.items() for old in names]


@pytest.mark.parametrize(("module", "old"), ALIASES)
def test_each_old_name_is_gone(module, old):
    with pytest.raises(ImportError):
        exec(f"from attntemp.{module} import {old}", {})


@pytest.mark.parametrize("old", REMOVED_MODULES)
def test_each_old_module_path_is_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"attntemp.{old}")
    if "." not in old:  # nor an attribute of the package
        assert not hasattr(attntemp, old)


def test_no_alias_machinery_is_left():
    """No module serves old names (``legacy_getattr``) and the package installs no meta path finder."""
    code = "import sys; n = len(sys.meta_path); import attntemp; print(len(sys.meta_path) - n)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"
    found = [p for p in (ROOT / "src" / "attntemp").rglob("*.py") if "legacy_getattr" in p.read_text()]
    assert not found and not hasattr(attntemp, "MOVED")


def test_the_changelog_names_every_removal_with_its_replacement():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{attntemp.__version__}]" in text and "## [0.2.0] - " in text and "## [0.1.0]" in text
    removed = text.split(f"## [{attntemp.__version__}]", 1)[1].split("\n## [", 1)[0]
    for module, old in ALIASES:
        assert f"`attntemp.{module}.{old}` -> `" in removed, f"CHANGELOG.md does not name attntemp.{module}.{old}"
    for old in REMOVED_MODULES:
        assert f"`attntemp.{old}` -> `" in removed, f"CHANGELOG.md does not name attntemp.{old}"


def test_one_version_source():
    """pyproject.toml reads the version from attntemp.utils.version (no second copy)."""
    py = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in py and 'attr = "attntemp.utils.version.VERSION"' in py
    project = py.split("[project]", 1)[1].split("\n[", 1)[0]  # the [project] table alone
    assert not re.search(r"^version\s*=", project, re.M)
    assert importlib.metadata.version("attntemp") == attntemp.__version__


def test_utils_imports_without_torch():
    """The bottom layer is torch-free (issue 53): its tensor checks live in ops.tensor_checks."""
    code = (
        "import importlib, pkgutil, sys, attntemp.utils as u\n"
        "for m in pkgutil.iter_modules(u.__path__): importlib.import_module('attntemp.utils.' + m.name)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
