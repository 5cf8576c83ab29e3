"""``attntemp completion``: shtab's script from the full parser, so every command's flags complete."""

import json
import shutil
import subprocess

import pytest

from attntemp.cli import COMMANDS, main


def _script(shell, capsys):
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


CASES = [
    ("attntemp sw", "sweep"),
    ("attntemp sweep --le", "--lengths"),
    ("attntemp verify --eng", "--engine-dir"),
    ("attntemp completion z", "zsh"),
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
@pytest.mark.parametrize("line, want", CASES)
def test_bash_completes_commands_and_every_commands_flags(tmp_path, capsys, line, want):
    path = tmp_path / "attntemp.bash"
    path.write_text(_script("bash", capsys))
    words = line.split()
    probe = (
        f"source {path}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
        f"COMP_POINT={len(line)}; _shtab_attntemp; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert want in done.stdout.split(), done.stdout


def test_zsh_and_tcsh_scripts_name_every_command(capsys):
    for shell in ("zsh", "tcsh"):
        script = _script(shell, capsys)
        assert all(name in script for name in COMMANDS), shell
    assert _script("zsh", capsys).startswith("#compdef attntemp")


def test_json_holds_the_script(capsys):
    assert main(["completion", "bash", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["shell"] == "bash" and "_shtab_attntemp" in out["script"]
