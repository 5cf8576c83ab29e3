"""A flag's old spelling (``option(aliases=...)``): hidden from ``--help``, still parsed into the
new field, and said to be deprecated in one line on stderr (advise's ``--check-length``: tests/commands)."""

import argparse
from dataclasses import dataclass

import pytest

from attntemp.utils.deprecation import REMOVAL
from attntemp.utils.options import add_options, from_args, ints, option


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
