"""Old public names stay for one minor release, as aliases that warn (utils.deprecation.RENAMED, MOVED)."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest

import attntemp
from attntemp.utils.deprecation import REMOVAL, RENAMED, alias_target

ALIASES = [(module, old) for module, names in RENAMED.items() for old in names]
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("module", "old"), ALIASES)
def test_each_old_name_is_the_new_object_and_warns_with_the_removal_version(module, old):
    where, new = alias_target(module, old)
    with pytest.warns(
        DeprecationWarning,
        match=rf"attntemp\.{re.escape(module)}\.{old} is deprecated; "
        rf"use {re.escape(where)}\.{new} \(removed in {REMOVAL}\)",
    ):
        got = getattr(importlib.import_module(f"attntemp.{module}"), old)
    assert got is getattr(importlib.import_module(where), new)


def test_a_name_never_defined_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        importlib.import_module("attntemp.ops.schedules").no_such_name  # noqa: B018


def test_the_removed_schedule_factories_build_what_they_built():
    schedules = importlib.import_module("attntemp.ops.schedules")
    with pytest.warns(DeprecationWarning):
        old = schedules.yarn(2)
    assert old == schedules.Yarn(2.0)


@pytest.mark.parametrize("old", sorted(attntemp.MOVED))
def test_each_moved_module_warns_and_points_where_its_names_went(old):
    with pytest.warns(
        DeprecationWarning, match=rf"attntemp\.{old} is deprecated; use .*attntemp\.{re.escape(attntemp.MOVED[old])}"
    ):
        getattr(attntemp, old)


def test_the_changelog_names_every_alias_and_the_removal_release():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"removed in {REMOVAL}" in text and "## [Unreleased]" in text and "## [0.1.0]" in text
    for module, old in ALIASES:
        assert f"{module}.{old}" in text, f"CHANGELOG.md does not name attntemp.{module}.{old}"


def test_one_version_source():
    """pyproject.toml reads the version from attntemp.utils.version (no second copy)."""
    py = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in py and 'attr = "attntemp.utils.version.VERSION"' in py
    project = py.split("[project]", 1)[1].split("\n[", 1)[0]  # the [project] table alone
    assert not re.search(r"^version\s*=", project, re.M)
    assert importlib.metadata.version("attntemp") == attntemp.__version__


def test_utils_imports_without_torch():
    """The bottom layer is torch-free (issue 53): its tensor checks live in ops.tensor_checks."""
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, attntemp.utils as u\n"
        "for m in pkgutil.iter_modules(u.__path__): importlib.import_module('attntemp.utils.' + m.name)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
