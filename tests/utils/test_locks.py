"""One writer per output folder (attntemp.utils.locks, outputs.claimed): taken before any work,
removed when the run ends, safe against the removal race, taken again at no cost by its holder."""

import fcntl
import os

import pytest

from attntemp.utils import locks, outputs
from attntemp.utils.locks import LOCK_NAME, exclusive


def _locked_elsewhere(path) -> bool:
    """Whether a new open of ``path`` cannot take the lock (flock conflicts between open files)."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_the_lock_file_goes_when_the_run_ends_and_its_holder_takes_it_again(tmp_path):
    lock = tmp_path / LOCK_NAME
    with exclusive(lock, "measure"):
        assert lock.read_text() == str(os.getpid()) and _locked_elsewhere(lock)
        with exclusive(lock, "measure"):  # a helper of the same run: no conflict with itself
            assert _locked_elsewhere(lock)
        assert _locked_elsewhere(lock)  # still held by the outer block
    assert not lock.exists()


def test_a_lock_file_removed_as_it_was_opened_is_opened_again(tmp_path, monkeypatch):
    """The holder removed the file between this writer's open and its flock (and a third made a
    new one): the lock of the removed file guards nothing, so the writer locks the new file."""
    lock = tmp_path / LOCK_NAME
    real, swapped = fcntl.flock, []

    def flock(handle, op):
        real(handle, op)
        if op & fcntl.LOCK_EX and not swapped:
            swapped.append(True)
            lock.unlink()
            lock.touch()

    monkeypatch.setattr(locks.fcntl, "flock", flock)
    with exclusive(lock, "measure"):
        monkeypatch.setattr(locks.fcntl, "flock", real)
        assert swapped and _locked_elsewhere(lock)  # the file the path names now is the one held


def test_a_refused_claim_leaves_nothing_and_a_failed_run_no_folder(tmp_path, held_lock):
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), outputs.claimed(out, "measure"):
        assert (out / LOCK_NAME).is_file()
        raise RuntimeError("the run failed")
    assert not (tmp_path / "a").exists()
    out.mkdir(parents=True)
    with held_lock(out / LOCK_NAME) as pid:
        with pytest.raises(ValueError, match=rf"out='{out}' is in use by another tune \(pid {pid}\)"):
            with outputs.claimed(out, "tune"):
                pass
    with outputs.claimed(out, "tune"):
        (out / "spec.json").write_text("{}")
    assert os.listdir(out) == ["spec.json"]


def test_results_written_since_the_check_are_refused_under_the_lock(tmp_path):
    """A writer that checked ``out`` before another's run ended: refused when it takes the lock,
    not mixed into (or over) the other's results."""
    out = tmp_path / "o"
    outputs.check_out(out, ("stats.json",))
    out.mkdir()
    (out / "stats.json").write_text("the other run's")
    with pytest.raises(ValueError, match=r"already holds results \(stats.json\)"):
        with outputs.output_folder(out, writer="measure", own=("stats.json",)):
            (out / "stats.json").write_text("this run's")
    assert (out / "stats.json").read_text() == "the other run's" and not (out / LOCK_NAME).exists()
