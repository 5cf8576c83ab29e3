"""Issue 54, item 8: the README's ``attntemp demo --model smollm2`` (its default ``--text`` is
``gutenberg``, every book) finds the books where they are, or refuses in one line naming ``--text``
and what is missing, before any model download.

Each case runs the real command line with the model's resolution (the first step that downloads)
replaced by a stand-in that stops the run: reaching it means the texts were found.
"""

import pytest

from attntemp.cli import main
from attntemp.evaluate import corpus

CHECKOUT = corpus._package_checkout()  # where attntemp runs from (None: an installed package)
REPO_BOOKS = CHECKOUT.parent / "shared" / "data" / "gutenberg" if CHECKOUT else None
HAS_REPO_BOOKS = REPO_BOOKS is not None and REPO_BOOKS.is_dir()


class WouldDownload(Exception):
    """Raised where the demo would resolve (download) the model: the texts were found."""


@pytest.fixture
def demo(monkeypatch, capsys):
    """``demo(*flags)``: ``attntemp demo --model smollm2 FLAGS``, stopped where the model would be
    resolved; returns ``"resolved"`` or the stderr lines of a refusal (exit code 2)."""

    def stop(name):
        raise WouldDownload(name)

    monkeypatch.setattr("attntemp.advise.demo.resolve", stop)

    def run(*flags: str):
        capsys.readouterr()
        try:
            code = main(["demo", "--model", "smollm2", *flags])
        except WouldDownload:
            return "resolved"
        assert code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        return captured.err.splitlines()

    return run


def _books(folder, *names):
    folder.mkdir(parents=True)
    for name in names:
        (folder / f"{name}.txt").write_text(f"The text of {name}.\n" * 100)
    return folder


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A cwd with no ../shared/data/gutenberg above it, ATTNTEMP_GUTENBERG unset, attntemp not run
    from a checkout: the books are nowhere."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(corpus.GUTENBERG_ENV, raising=False)
    monkeypatch.setattr(corpus, "_package_checkout", lambda: None)
    if any(p.is_dir() for p in corpus.gutenberg_places()):
        pytest.skip("a folder above the test's own holds shared/data/gutenberg")
    return tmp_path


@pytest.mark.skipif(not HAS_REPO_BOOKS, reason=f"the checkout's books ({REPO_BOOKS}) are absent")
@pytest.mark.parametrize("where", ["the repository", "another folder"])
def test_the_readme_command_finds_the_checkouts_books(where, demo, monkeypatch, tmp_path):
    monkeypatch.delenv(corpus.GUTENBERG_ENV, raising=False)
    monkeypatch.chdir(CHECKOUT if where == "the repository" else tmp_path)
    assert demo() == "resolved"
    assert corpus.gutenberg_dir() == REPO_BOOKS
    assert not (tmp_path / "attntemp-demo-smollm2").exists()


def test_books_above_the_cwd_are_found(nowhere, demo, monkeypatch):
    books = _books(nowhere / "shared" / "data" / "gutenberg", "austen-emma")
    deep = nowhere / "work" / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)  # ../shared/data/gutenberg from a folder above the cwd
    assert demo() == "resolved" and corpus.gutenberg_dir() == books
    docs = corpus.load_text("gutenberg")
    assert [d.name for d in docs] == ["gutenberg:austen-emma"] and not docs[0].hash_split


ONE_LINE = "attntemp demo: error: "


@pytest.mark.parametrize(
    ("env", "flags", "want"),
    [
        # the books nowhere: each text that needs them is refused, naming its flag and what is missing
        (None, (), "--text='gutenberg' needs the Project Gutenberg books (plain-text .txt files): ATTNTEMP_GUTENBERG "
                   "(unset) or ../shared/data/gutenberg, found in none of ["),
        (None, ("--text", "gutenberg:austen-emma"), "--text='gutenberg:austen-emma' needs the Project Gutenberg books"),
        (None, ("--text", "stdlib", "--heldout-text", "gutenberg"), "--heldout-text='gutenberg' needs the Project"),
        ("missing", (), "--text='gutenberg' needs the Project Gutenberg books (plain-text .txt files): "
                        "ATTNTEMP_GUTENBERG='{tmp}/missing', which is not a folder; set ATTNTEMP_GUTENBERG"),
        ("empty", (), "--text='gutenberg' needs the Project Gutenberg books, but '{tmp}/empty' holds no .txt files"),
        ("books", ("--text", "gutenberg:austen-emmma"),
         "--text='gutenberg:austen-emmma' is not allowed: no book 'austen-emmma' in '{tmp}/books'; expected one of "
         "['austen-emma', 'melville-moby_dick']. Did you mean 'austen-emma'?"),
        # texts that are there
        ("books", (), "resolved"),
        ("books", ("--text", "gutenberg:melville-moby_dick"), "resolved"),
        (None, ("--text", "stdlib"), "resolved"),
        (None, ("--text", "stdlib", "--heldout-text", "package:markdown"), "resolved"),
    ],
)  # fmt: skip
def test_the_demos_texts_resolve_or_refuse_in_one_line(env, flags, want, nowhere, demo, monkeypatch):
    (nowhere / "empty").mkdir()
    _books(nowhere / "books", "austen-emma", "melville-moby_dick")
    if env is not None:
        monkeypatch.setenv(corpus.GUTENBERG_ENV, str(nowhere / env))
    got = demo(*flags)
    if want == "resolved":
        assert got == "resolved"
    else:
        assert got != "resolved" and len(got) == 1, got
        assert got[0].startswith(ONE_LINE + want.format(tmp=nowhere)), got[0]
    assert sorted(p.name for p in nowhere.iterdir()) == ["books", "empty", "work"]  # nothing written
    assert list((nowhere / "work").iterdir()) == []
