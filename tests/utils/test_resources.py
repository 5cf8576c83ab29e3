"""The huge-page preference: set only where the user left it unset and torch has not read it yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attntemp.utils.resources import THP_VARIABLE as VARIABLE
from attntemp.utils.resources import kernel_setting, prefer_huge_pages

CASES = [  # (environment before, torch imported, returns, environment after)
    ({}, False, True, {VARIABLE: "1"}),
    ({VARIABLE: "0"}, False, False, {VARIABLE: "0"}),  # the user's choice is kept
    ({VARIABLE: "1"}, True, True, {VARIABLE: "1"}),
    ({}, True, False, {}),  # too late: torch read it at its first allocation
]


@pytest.mark.skipif(sys.platform != "linux", reason="the variable is set on Linux only")
@pytest.mark.parametrize(("env", "torch_loaded", "returns", "after"), CASES)
def test_prefer_huge_pages(env, torch_loaded, returns, after):
    env = dict(env)
    modules = {"torch": object()} if torch_loaded else {}
    assert prefer_huge_pages(env, modules) is returns
    assert env == after


@pytest.mark.parametrize(
    ("text", "mode"),
    [("always [madvise] never\n", "madvise"), ("[always] madvise never", "always"), ("always madvise never", None)],
)
def test_kernel_setting(tmp_path, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text)
    assert kernel_setting(path) == mode
    assert kernel_setting(tmp_path / "missing") is None


@pytest.mark.skipif(sys.platform != "linux", reason="the variable is set on Linux only")
def test_the_command_sets_it_before_torch():
    code = "\n".join(
        [
            "import os, sys",
            "os.environ.pop('THP_MEM_ALLOC_ENABLE', None)",
            "from attntemp.cli import main",
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass",
            "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["1", "False"]
