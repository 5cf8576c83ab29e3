"""Issue 54, item 6: a full disk is one line naming the file (or --out) and the space left there,
exit 2, whoever raised it: an OSError with errno 28, safetensors' error, SQLite's."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from attntemp.cli import main


class SafetensorError(Exception):
    """As safetensors raises it on a full disk (not an OSError)."""


CASES = [
    ("oserror-with-file", OSError(errno.ENOSPC, "No space left on device", "{out}/scores.db"), "{out}/scores.db"),
    ("oserror-no-file", OSError(errno.ENOSPC, "No space left on device"), "{out}"),
    ("safetensors", SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                     "message: \"No space left on device\" })"), "{out}"),
    ("sqlite", sqlite3.OperationalError("database or disk is full"), "{out}"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "exc", "named"), CASES, ids=[c[0] for c in CASES])
def test_a_full_disk_is_one_line_naming_the_file_and_exit_2(name, exc, named, tmp_path, capsys, monkeypatch):
    import attntemp.analysis.run as command  # where the measure row of commands.PLAIN_COMMANDS finds its runner

    out = str(tmp_path / "out")
    if isinstance(exc, OSError) and exc.filename:
        exc.filename = exc.filename.format(out=out)

    def full(args):
        raise exc

    monkeypatch.setattr(command, "run_measure", full)
    assert main(["measure", "--length", "64", "--out", out]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("attntemp measure: error: no space left on the device writing"), err
    assert repr(named.format(out=out)) in err[0] and "MiB free there" in err[0] and "rerun" in err[0]


def test_other_errors_are_not_called_a_full_disk(tmp_path, capsys, monkeypatch):
    import attntemp.analysis.run as command  # where the measure row of commands.PLAIN_COMMANDS finds its runner

    def broken(args):
        raise OSError(errno.EACCES, "Permission denied", str(tmp_path / "x"))

    monkeypatch.setattr(command, "run_measure", broken)
    assert main(["measure", "--length", "64", "--out", str(tmp_path / "out")]) == 2
    assert "no space left" not in capsys.readouterr().err
