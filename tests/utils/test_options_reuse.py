"""A script's config: a package option field reused (its help and parser, another default) and the
config read from a command line by ``from_argv``, a refused value exiting as argparse's errors do."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from attntemp.utils.options import from_argv, ints, option, reuse


@dataclass(frozen=True, kw_only=True)
class Package:
    """Stands in for a package config."""

    threads: int | None = option(None, "CPU threads (default: torch's own)", parse=int)
    lengths: tuple[int, ...] = option((512,), "tokens per window, comma list", parse=ints)
    docs: int = option(16, "documents", flag="--docs")
    steps: int = option(60, "steps")


@dataclass(frozen=True, kw_only=True)
class Script:
    """Stands in for a script's config."""

    threads: int = reuse(Package, "threads", 2)
    lengths: tuple[int, ...] = reuse(Package, "lengths")
    n: int = reuse(Package, "docs", 4)
    budget: int | None = reuse(Package, "steps", None)  # an int field's parser, under another annotation
    name: str = option("x", "a name")

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n={self.n} is not allowed; expected an integer >= 1")


def test_a_reused_field_keeps_its_help_and_parser_with_its_new_default(capsys):
    assert from_argv(Script, []) == Script(threads=2, lengths=(512,), n=4, budget=None)
    got = from_argv(Script, ["--threads", "3", "--lengths", "1,2", "--docs", "5", "--budget", "7"])
    assert (got.threads, got.lengths, got.n, got.budget) == (3, (1, 2), 5, 7)
    with pytest.raises(SystemExit) as exc:
        from_argv(Script, ["--help"], "A script.")
    text = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0 and text.startswith("usage:") and "A script." in text
    assert "CPU threads (default: 2)" in text and "torch's own" not in text  # the old default's note dropped
    assert "tokens per window, comma list (default: 512)" in text and "--docs DOCS" in text


def test_a_refused_value_exits_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        from_argv(Script, ["--budget", "x"])
    assert exc.value.code == 2 and "--budget 'x': expected an integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        from_argv(Script, ["--docs", "0"])
    assert "--docs=0 is not allowed" in capsys.readouterr().err


def test_only_an_option_field_is_reused():
    with pytest.raises(TypeError, match="no option 'nothing'"):
        reuse(Package, "nothing")
