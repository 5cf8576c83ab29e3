"""The CLI answers ``--help``, argparse's errors and completion from the real parsers, built from
the commands' torch-free configs: no torch, transformers or numpy imported."""

import json
import subprocess
import sys

from attntemp import cli

# Run in a fresh interpreter where importing torch, transformers or numpy raises: every command's
# --help, a bad flag, a missing value and the completion script must not need them.
BLOCKED = """
import importlib.abc, io, contextlib, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "numpy"):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Blocked())
from attntemp.cli import COMMANDS, main

def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return {"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()}

runs = [run([c, "--help"]) for c in COMMANDS]
runs += [run(["tune", "--out", "x", "--no-such-flag"]), run(["sweep", "--lengths"]), run(["completion", "bash"])]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
print(json.dumps({"runs": runs, "heavy": heavy}))
"""


def _blocked_runs():
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def test_help_errors_and_completion_need_no_torch():
    got = _blocked_runs()
    assert got["heavy"] == []
    runs = {" ".join(r["argv"]): r for r in got["runs"]}
    for name in cli.COMMANDS:
        r = runs[f"{name} --help"]
        assert (r["code"], r["err"]) == (0, ""), r
        assert r["out"].startswith(f"usage: attntemp {name}"), r["out"][:200]
    bad = runs["tune --out x --no-such-flag"]
    assert bad["code"] == 2 and bad["err"].count("\n") == 1 and "--no-such-flag" in bad["err"], bad
    missing = runs["sweep --lengths"]
    assert missing["code"] == 2 and "--lengths" in missing["err"], missing
    script = runs["completion bash"]
    assert script["code"] == 0 and "--engine-dir" in script["out"] and "--lengths" in script["out"]


def test_each_commands_config_imports_without_torch():
    """The configs (the plain commands' table rows and the command modules) leave torch,
    transformers and numpy out of ``sys.modules``: --help builds from them alone."""
    code = (
        "import importlib, sys\n"
        "from attntemp.commands import PLAIN_COMMANDS, MODULE_HELP, load_named\n"
        "for row in PLAIN_COMMANDS.values(): load_named(row.config)\n"
        "for name in MODULE_HELP: importlib.import_module('attntemp.commands.' + name)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
