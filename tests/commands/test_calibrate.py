"""`attntemp calibrate`: fit T on an npz, print the table, write PNG and JSON; bad files exit 2."""

import json

import numpy as np
import pytest
import torch

from attntemp.cli import main
from attntemp.logits.calibration import fit_temperature

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _synthetic(n=3000, c=8, t_true=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = 3.0 * torch.randn(n, c, generator=g, dtype=torch.float64)  # [N, C]
    y = torch.multinomial(torch.softmax(z / t_true, -1), 1, generator=g).squeeze(-1)  # [N]
    return z.numpy(), y.numpy()


def test_calibrate_writes_report_and_diagram(tmp_path, capsys):
    logits, labels = _synthetic()
    np.savez(tmp_path / "held_out.npz", logits=logits, labels=labels)
    out = tmp_path / "report"
    assert main(["calibrate", "--logits", str(tmp_path / "held_out.npz"), "--out", str(out), "--bins", "10"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "calibration.json").read_text())
    fit = fit_temperature(torch.from_numpy(logits), torch.from_numpy(labels))
    assert report["temperature"] == pytest.approx(fit.temperature, rel=1e-9)
    assert f"| temperature T | 1 | {fit.temperature:.4f} |" in printed
    assert report["n_bins"] == 10 and report["n"] == 3000 and report["converged"]
    assert report["after"]["ece"] < report["before"]["ece"]
    assert report["after"]["accuracy"] == report["before"]["accuracy"]
    assert f"| ECE | {report['before']['ece']:.4f} | {report['after']['ece']:.4f} |" in printed
    assert (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"


def test_language_model_shaped_npz_with_padding(tmp_path, capsys):
    logits, labels = _synthetic(n=600)
    lm_logits, lm_labels = logits.reshape(6, 100, 8), labels.reshape(6, 100).copy()
    lm_labels[:, 90:] = -100
    np.savez(tmp_path / "lm.npz", logits=lm_logits.astype(np.float32), labels=lm_labels)
    assert main(["calibrate", "--logits", str(tmp_path / "lm.npz"), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "calibration.json").read_text())["n"] == 540
    capsys.readouterr()


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


def _bad_files(tmp_path):
    z, y = _synthetic(n=20, c=4)
    nan = z.copy()
    nan[3, 1] = np.nan
    big = y.copy()
    big[0] = 9
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip at all")
    return [
        (tmp_path / "missing.npz", "no such file"),
        (empty, "the file is empty"),
        (garbage, "not a readable .npz"),
        (_write(tmp_path / "no_labels.npz", logits=z), "missing array"),
        (_write(tmp_path / "nan.npz", logits=nan, labels=y), "NaN"),
        (_write(tmp_path / "range.npz", logits=z, labels=big), "labels hold 9"),
        (_write(tmp_path / "shape.npz", logits=z, labels=y[:10]), "labels shape"),
        (_write(tmp_path / "zero.npz", logits=z[:0], labels=y[:0]), "empty arrays"),
        (_write(tmp_path / "float.npz", logits=z, labels=y.astype(float)), "integers"),
    ]


def test_bad_files_exit_2_with_one_stderr_line(tmp_path, capsys):
    for path, message in _bad_files(tmp_path):
        code = main(["calibrate", "--logits", str(path), "--out", str(tmp_path / "out")])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code == 2, path
        assert len(lines) == 1 and lines[0].startswith("attntemp calibrate: error:"), lines
        assert message in lines[0] and "Traceback" not in captured.err
        assert captured.out == ""


def test_bad_bins_and_out(tmp_path, capsys):
    z, y = _synthetic(n=50, c=4)
    path = _write(tmp_path / "ok.npz", logits=z, labels=y)
    assert main(["calibrate", "--logits", str(path), "--out", str(tmp_path), "--bins", "0"]) == 2
    assert "--bins=0" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(["calibrate", "--logits", str(path), "--out", str(blocker)]) == 2
    assert "exists and is a file; expected a folder" in capsys.readouterr().err
