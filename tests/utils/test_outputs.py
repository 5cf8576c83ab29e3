"""The one rule of every writing command's --out (attntemp.utils.outputs): a command's own outputs
refused without overwrite, removed with it, everything else kept; own folders only with own files."""

from pathlib import Path

import pytest

from attntemp.utils import outputs

OWN = outputs.Outputs(("result.json", "figure.png"), {"run[0-9]": ("*.json",)})


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_own_outputs_are_refused_without_overwrite_and_only_they_are_removed_with_it(tmp_path):
    out = _tree(tmp_path / "o", {"result.json": "old, by attntemp", "run0/a.json": "old", "notes.txt": "the user's",
                                 "runs/x.json": "the user's"})  # fmt: skip
    assert OWN.present(out) == ["result.json", "run0/"]
    with pytest.raises(ValueError, match=r"already holds results \(result.json, run0/\); pass overwrite=True"):
        outputs.check_out(out, OWN)
    outputs.check_out(out, OWN, overwrite=True)
    assert outputs.clear(out, OWN) == ["result.json", "run0/"]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["notes.txt", "runs", "runs/x.json"]


def test_a_users_file_inside_an_own_folder_is_refused_even_with_overwrite(tmp_path):
    out = _tree(tmp_path / "o", {"run1/a.json": "old", "run1/deep/mine.txt": "the user's"})
    with pytest.raises(ValueError, match=r"holds run1/deep/mine.txt, not written by this command"):
        outputs.check_out(out, OWN, overwrite=True)


def test_a_linked_own_folder_loses_the_link_never_its_target(tmp_path):
    target = _tree(tmp_path / "elsewhere", {"a.json": "kept"})
    out = tmp_path / "o"
    out.mkdir()
    (out / "run2").symlink_to(target, target_is_directory=True)
    outputs.check_out(out, OWN, overwrite=True)
    assert outputs.clear(out, OWN) == ["run2/"]
    assert not (out / "run2").exists() and (target / "a.json").read_text() == "kept"


def test_a_folder_replaced_whole_holds_only_what_the_command_writes(tmp_path):
    d = _tree(tmp_path / "d", {"config.json": "{}", "model.safetensors": "", "canary.txt": "the user's"})
    with pytest.raises(ValueError, match=r"out='x/sub/..' \(.*/d\) holds canary.txt, not a checkpoint's"):
        outputs.check_only("out", "x/sub/..", d, outputs.CHECKPOINT, "a checkpoint")
    (d / "canary.txt").unlink()
    outputs.check_only("out", "x/sub/..", d, outputs.CHECKPOINT, "a checkpoint")  # a checkpoint alone: allowed


def test_a_second_writer_is_refused_naming_the_pid_and_clears_nothing(tmp_path, held_lock):
    """advise, demo, tune, measure, generate and calibrate hold the folder's lock for their run: a
    second one on the same folder (another process) is refused before it removes anything."""
    from attntemp.utils.outputs import LOCK_NAME, output_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the first run's")
    with held_lock(out / LOCK_NAME) as pid:
        with pytest.raises(ValueError, match=rf"out='.*out' is in use by another advise \(pid {pid}\)"):
            with output_folder(out, replace=("report.md",), writer="advise"):
                pass
        assert (out / "report.md").read_text() == "the first run's"
    with output_folder(out, replace=("report.md",), writer="advise"):  # free again once the holder is gone
        assert not (out / "report.md").exists()


def test_a_left_lock_file_is_not_content_a_command_refuses(tmp_path):
    from attntemp.utils.outputs import LOCK_NAME, check_out

    (tmp_path / LOCK_NAME).touch()
    assert check_out(tmp_path, any_content=True) == tmp_path


OWN_FILES = ("report.md", "evidence.json")


def _write_run(out: Path) -> None:
    """A run that writes its own files and records them."""
    with outputs.output_folder(out, own=OWN_FILES):
        (out / "report.md").write_text("# the run's report\n")
        (out / "evidence.json").write_text("{}")


@pytest.mark.parametrize(
    ("what", "refused"),
    [
        ("the run's own files, unchanged", None),
        ("report.md edited by the user since", "report.md"),
        ("a user's file under an own name, no record", "report.md"),
        ("an older attntemp file with its signature, no record", None),
        ("a symlink under an own name", "report.md"),
    ],
)
def test_overwrite_replaces_only_what_the_command_wrote(tmp_path, what, refused):
    out = tmp_path / "out"
    if "no record" in what:
        out.mkdir()
        text = "made by attntemp 0.1.0\n" if "signature" in what else "# my own notes\n"
        (out / "report.md").write_text(text)
    else:
        _write_run(out)
    if "edited" in what:
        (out / "report.md").write_text("# my edits\n")
    if "symlink" in what:
        (tmp_path / "mine.md").write_text("# mine\n")
        (out / "report.md").unlink()
        (out / "report.md").symlink_to(tmp_path / "mine.md")
    if refused is None:
        outputs.check_out(out, OWN_FILES, overwrite=True)
        return
    with pytest.raises(ValueError, match=rf"holds {refused} under this command's own names, not written by it"):
        outputs.check_out(out, OWN_FILES, overwrite=True)


def test_the_record_is_not_content_and_lists_the_digests(tmp_path):
    out = tmp_path / "out"
    _write_run(out)
    import json

    files = json.loads((out / outputs.RECORD).read_text())["files"]
    assert sorted(files) == sorted(OWN_FILES) and all(len(v) == 64 for v in files.values())
    (out / "report.md").unlink()
    (out / "evidence.json").unlink()
    assert outputs.check_out(out, any_content=True) == out  # the record and the lock are not a user's files
