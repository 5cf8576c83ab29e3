"""The flags built from the config dataclasses: defaults and help written once, bad values refused
with one line on stderr naming the flag and exit code 2, before any model is loaded."""

import argparse
import dataclasses

import pytest

from attntemp.cli import build_parser, main
from attntemp.evaluate.sweep import SweepConfig
from attntemp.tune.runner import TuneConfig
from attntemp.utils.options import add_options, from_args


def test_flags_carry_the_dataclass_defaults_and_help():
    p = argparse.ArgumentParser()
    add_options(p, SweepConfig)
    cfg = from_args(SweepConfig, p.parse_args(["--out", "x"]))
    assert cfg == SweepConfig(out="x")  # nothing given: the dataclass's own defaults
    text = p.format_help()
    for f in dataclasses.fields(SweepConfig):
        if "cli" in f.metadata:
            assert f.metadata["cli"]["help"].split("(")[0][:20].strip() in " ".join(text.split())
    assert "(default: 512,1024)" in " ".join(text.split())
    cfg = from_args(TuneConfig, _parse(TuneConfig, ["--out", "x", "--check-lengths", "", "--docs", "3"]))
    assert cfg.check_lengths == () and cfg.n_docs == 3


def _parse(cls, argv):
    p = argparse.ArgumentParser()
    add_options(p, cls)
    return p.parse_args(argv)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["sweep", "--out", "x", "--docs", "0"], "--docs=0"),
        (["sweep", "--out", "x", "--lengths", "1,b"], "--lengths '1,b'"),
        (["sweep", "--out", "x", "--lengths", "0"], "--lengths[0]=0"),
        (["sweep", "--out", "x", "--rope", "yarm"], "Did you mean 'yarn'"),
        (["sweep", "--out", "x", "--multipliers", "1:0.5:0.1"], "LO:HI:STEP"),
        (["sweep", "--out", "x", "--tasks", "pasky"], "--tasks[0]='pasky'"),
        (["tune", "--out", "x", "--length", "1e3"], "--length '1e3'"),
        (["tune", "--out", "x", "--grid", "2"], "--grid=2"),
        (["tune", "--out", "x", "--bracket", "1"], "--bracket=1 "),
        (["tune", "--out", "x", "--target", "entropi"], "Did you mean 'entropy'"),
        (["tune", "--out", "x", "--check-lengths", "-5"], "--check-lengths[0]=-5"),
        (["tune", "--out", "x", "--lengths", "512"], "--method gradient"),
        (["tune", "--out", "x", "--method", "gradient", "--objective", "passkey"], "--objective='passkey'"),
        (["demo", "--race-windows", "1"], "--race-windows=1"),
        (["demo", "--block", "0"], "--block=0"),
        (["measure", "--out", "x", "--length", "0"], "--length=0"),
        (["bake", "--spec", "s.json", "--out", "x", "--check-tokens", "0"], "--check-tokens=0"),
        (["export", "--spec", "s.json", "--engine", "vlm"], "Did you mean 'vllm'"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(argv, flag, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and flag in err and err.startswith(f"attntemp {argv[0]}: error:")


def test_every_command_builds_its_parser():
    build_parser().parse_args(["tables"])


def test_every_command_has_a_summary_and_help():
    """One source for a command's summary (attntemp.commands.command_help): the top-level listing, built
    with no command's config imported, shows exactly what each command's own parser gives."""
    from attntemp.cli import COMMANDS

    def listing(parser):
        return {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}

    own = listing(build_parser())
    assert list(own) == list(COMMANDS) and all(own.values())
    assert listing(build_parser(only=[])) == own and listing(build_parser(only=["tables"])) == own
    for name in COMMANDS:
        text = build_parser(only=[name])._subparsers._group_actions[0].choices[name].format_help()  # type: ignore[union-attr]
        assert f"attntemp {name}" in text


def test_top_level_help_and_version_load_no_torch():
    """`attntemp --help` and `--version` answer without importing torch or transformers (the
    reason they take well under a second), and `import attntemp` alone does not load them."""
    import subprocess
    import sys

    code = (
        "import sys, contextlib, io\n"
        "import attntemp\n"
        "from attntemp.cli import main\n"
        "for argv in (['--help'], ['--version']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try: main(argv)\n"
        "        except SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_command_takes_json():
    from attntemp.cli import COMMANDS

    for name in COMMANDS:
        sub = build_parser(only=[name])._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
        assert "--json" in sub._option_string_actions, name


def test_json_gives_one_document_on_stdout(tmp_path, capsys):
    """--json: stdout is exactly one JSON document (the human tables otherwise)."""
    import json

    from attntemp.ops.spec import TemperatureSpec

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "attention_factor": 1.0}
    TemperatureSpec(multiplier=1.1, rope=yarn).save(tmp_path / "s.json")
    assert main(["export", "--spec", str(tmp_path / "s.json"), "--engine", "vllm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "vllm" and abs(doc["logit_multiplier"] - 1.1) < 1e-9
    out = str(tmp_path / "m")
    assert main(["measure", "--length", "300", "--docs", "1", "--out", out, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["out"] == out and doc["mean_entropy"] > 0
    assert main(["export", "--spec", str(tmp_path / "s.json"), "--engine", "vllm"]) == 0
    assert capsys.readouterr().out.startswith("# logit multiplier m = 1.1")


def test_advise_takes_check_length_as_its_old_spelling(capsys):
    from attntemp.cli import build_parser

    # the old spelling of --check-lengths (utils.options.OldSpelling): parsed into it, with a warning
    args = build_parser().parse_args(["advise", "--length", "512", "--check-length", "0"])
    assert args.check_lengths == "0" and capsys.readouterr().err == ""  # said when the config is built
    from attntemp.advise.config import AdviseConfig

    assert from_args(AdviseConfig, args).check_lengths == ()
    assert "use --check-lengths" in capsys.readouterr().err
