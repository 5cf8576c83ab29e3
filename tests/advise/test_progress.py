"""advise's progress lines: after a batch of forwards once ``every`` seconds have passed, none
under --quiet or --status."""

import pytest

from attntemp.advise import run
from attntemp.advise.config import AdviseConfig

LINE = "key_tokens at 512: 1 of 2 specs scored (3 s a spec)"


@pytest.mark.parametrize(
    ("flags", "shown"),
    [({}, True), ({"progress": False}, False), ({"status": True}, False)],
)
def test_scoring_lines_are_said_with_their_stage_unless_quiet_or_status(tmp_path, capsys, flags, shown):
    (tmp_path / "scores.db").touch()  # --status reads a run's store
    say = run._scoring(AdviseConfig(length=512, out=str(tmp_path), **flags), "race", every=0.0)
    assert (say is not None) is shown
    if say is not None:
        say(LINE)
        assert capsys.readouterr().err == f"advise: race: {LINE}\n"


def test_fast_batches_stay_quiet_and_slow_ones_are_said(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(run.time, "monotonic", lambda: clock[0])
    say = run._scoring(AdviseConfig(length=512), "confirm", every=30.0)
    assert say is not None
    for step in (1.0, 10.0, 18.0, 2.0, 29.0, 40.0):  # at 101, 111, 129, 131, 160, 200
        clock[0] += step
        say(f"at {clock[0]:.0f}")
    assert capsys.readouterr().err.splitlines() == ["advise: confirm: at 131", "advise: confirm: at 200"]
