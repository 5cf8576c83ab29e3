"""advise's progress lines: after a batch of forwards once ``every`` seconds have passed, none
under --quiet or --status; and the plan's cost, said before the race."""

import pytest

from attntemp.advise import status
from attntemp.advise.config import AdviseConfig

LINE = "key_tokens at 512: 1 of 2 specs scored (3 s a spec)"


@pytest.mark.parametrize(
    ("flags", "shown"),
    [({}, True), ({"progress": False}, False), ({"status": True}, False)],
)
def test_scoring_lines_are_said_with_their_stage_unless_quiet_or_status(tmp_path, capsys, flags, shown):
    (tmp_path / "scores.db").touch()  # --status reads a run's store
    say = status.scoring_line(AdviseConfig(length=512, out=str(tmp_path), **flags), "race", every=0.0)
    assert (say is not None) is shown
    if say is not None:
        say(LINE)
        assert capsys.readouterr().err == f"advise: race: {LINE}\n"


def test_fast_batches_stay_quiet_and_slow_ones_are_said(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(status.time, "monotonic", lambda: clock[0])
    say = status.scoring_line(AdviseConfig(length=512), "confirm", every=30.0)
    assert say is not None
    for step in (1.0, 10.0, 18.0, 2.0, 29.0, 40.0):  # at 101, 111, 129, 131, 160, 200
        clock[0] += step
        say(f"at {clock[0]:.0f}")
    assert capsys.readouterr().err.splitlines() == ["advise: confirm: at 131", "advise: confirm: at 200"]


def test_the_cost_line_says_rows_seconds_a_row_and_the_total_before_the_race():
    """12 candidates, 4 race windows of 1 objective row and 2 passkey prefills, 3 documents and 5
    prompts to confirm: 144 race rows, 96 confirmation rows at N; at 2 s a row (the diagnosis's), 8 min."""
    from types import SimpleNamespace

    from attntemp.advise.plan import Retrieval
    from attntemp.evaluate.score import Result

    cfg = AdviseConfig(length=512, race_windows=4, n_docs=3, trials=5, workers=1)
    plan = SimpleNamespace(cfg=cfg, retrieval=Retrieval("passkey", 1, 2), short_lengths=())
    count = status.Counter()
    assert "no row at that length timed yet" in status.cost_line(plan, 12, count)
    count.add("diagnosis", [Result(None, "key_tokens", 512, {}, "k", 4.0, False, 2)])
    line = status.cost_line(plan, 12, count)
    assert line.startswith("plan: at most 144 race rows and 96 confirmation rows at 512 tokens; 2 s a row at 512")
    assert "at most 8 min" in line and "--budget" in line and "--workers" in line
    count.add("diagnosis", [Result(None, "key_tokens", 512, {}, "k", 636.0, False, 2)])  # 160 s a row now
    assert "; 160 s a row at 512 here" in status.cost_line(plan, 12, count)  # not 1.6e+02
    multikey = SimpleNamespace(cfg=cfg, retrieval=Retrieval("multikey", 8, 1))
    assert status.planned_rows(multikey, 12) == (96, 12 * (3 + 1))  # 5 keys: one haystack of 8


def test_the_cost_line_counts_and_times_the_rows_below_the_trained_length():
    """The cost below L0 is rows too (every candidate on every race window, then on every document):
    each length timed by no change's own cost rows, not by the rows at N; a length not timed yet
    is said and left out of the total, not guessed."""
    from types import SimpleNamespace

    from attntemp.advise.plan import Retrieval
    from attntemp.evaluate.score import Result

    cfg = AdviseConfig(length=512, race_windows=4, n_docs=3, trials=5, workers=1)
    plan = SimpleNamespace(cfg=cfg, retrieval=Retrieval("passkey", 1, 2), short_lengths=(128, 256))
    count = status.Counter()
    count.add("diagnosis", [Result(None, "key_tokens", 512, {}, "k", 4.0, False, 2)])  # 2 s a row at N
    count.add("diagnosis", [Result(None, "key_tokens", 256, {}, "k", 400.0, False, 2)])  # not a cost row
    line = status.cost_line(plan, 10, count)
    assert "40 and 30 at each of 128, 256 (the cost below L0)" in line
    assert "none timed at 128, 256 (left out of the total)" in line and "at most 7 min" in line  # (120 + 80) x 2 s
    count.add("diagnosis", [Result(None, "perplexity", 128, {}, "k", 3.0, False, 2)])  # 1.5 s a row
    count.add("diagnosis", [Result(None, "perplexity", 256, {}, "k", 6.0, False, 2)])  # 3 s a row
    line = status.cost_line(plan, 10, count)
    assert "2 s a row at 512, 1.5 s at 128, 3 s at 256 here" in line and "none timed" not in line
    assert "at most 12 min" in line  # 400 s + 70 rows x 1.5 s + 70 x 3 s = 715 s
