"""A flag's old spelling (``option(aliases=...)``): hidden from ``--help``, still parsed into the
new field, and said to be deprecated in one line on stderr (advise's ``--check-length``: tests/commands)."""

import argparse
from dataclasses import dataclass

import pytest

from attntemp.utils.options import REMOVAL, add_options, from_args, ints, option


@dataclass(frozen=True, kw_only=True)
class Lengths:
    check_lengths: tuple[int, ...] = option((), "held-out lengths", parse=ints, aliases=("--check-length",))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    add_options(parser, Lengths)
    return parser


@pytest.mark.parametrize(
    ("argv", "value", "warned"),
    [
        (["--check-lengths", "768,1024"], (768, 1024), False),
        (["--check-length", "768"], (768,), True),
        ([], (), False),
    ],
)
def test_the_old_spelling_parses_into_the_new_field_and_warns(argv, value, warned, capsys):
    cfg = from_args(Lengths, _parser().parse_args(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert cfg.check_lengths == value
    expected = [f"demo: warning: --check-length is deprecated; use --check-lengths (removed in {REMOVAL})"]
    assert err == (expected if warned else [])


def test_the_old_spelling_is_hidden_from_help():
    text = _parser().format_help()
    assert "--check-lengths" in text and "--check-length " not in text and "--check-length\n" not in text


@pytest.mark.parametrize(
    "argv",
    [
        ["--check-lengths", "0", "--check-length", "768"],
        ["--check-length", "768", "--check-lengths", "0"],
        ["--check-length", "512", "--check-length", "768", "--check-lengths", "0"],
    ],
)
def test_both_spellings_together_are_refused_whichever_comes_first(argv, capsys):
    """Which value wins is the user's to say (argparse would take the last one given): one line,
    the error, without the deprecation warning."""
    parser = _parser()
    parser.error = lambda message: parser.exit(2, f"demo: error: {message}\n")  # type: ignore[method-assign]
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err == [
        "demo: error: --check-length=768 is not allowed with --check-lengths=0: --check-length is the old "
        "spelling of --check-lengths; give --check-lengths only"
    ]


def test_the_old_spelling_twice_warns_once_and_the_last_wins(capsys):
    cfg = from_args(Lengths, _parser().parse_args(["--check-length", "512", "--check-length", "768"]))
    assert cfg.check_lengths == (768,) and len(capsys.readouterr().err.strip().splitlines()) == 1
