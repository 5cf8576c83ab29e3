"""Text sources, the train/held-out split (evaluate.corpus) and the passkey prompts (evaluate.needles)."""

from __future__ import annotations

import pathlib
import random
import re

import pytest

from attntemp.evaluate import corpus, needles

GUTENBERG = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "gutenberg"


class ByteTokenizer:
    """One token per UTF-8 byte, like the shipped tiny tokenizer."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": list(text.encode("utf-8"))}


class WordTokenizer:
    """One token per whitespace-separated word: tokens span many characters, unevenly."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [len(w) for w in text.split()]}


@pytest.fixture(scope="module")
def stdlib() -> list[corpus.Document]:
    return corpus.load_text()


def test_stdlib_is_sorted_python_source_without_tests(stdlib):
    names = [d.name for d in stdlib]
    assert len(names) > 300 and names == sorted(names)
    assert "json/decoder.py" in names and all(n.endswith(".py") for n in names)
    assert not any(set(n.split("/")[:-1]) & {"site-packages", "test", "tests"} for n in names)
    decoder = next(d for d in stdlib if d.name == "json/decoder.py")
    assert "class JSONDecoder" in decoder.text


def test_file_source_normalises_line_ends_and_replaces_bad_bytes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\r\ntwo\rthree\n\xff end")
    (doc,) = corpus.load_text(str(path))
    assert doc == corpus.Document("a.txt", "one\ntwo\nthree\n\ufffd end", hash_split=False)


def test_folder_source_reads_text_files_sorted(tmp_path):
    for rel in ("b.py", "a.md", "sub/c.txt", "skip.bin", "sub/skip.json"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(f"text of {rel}", encoding="utf-8")
    docs = corpus.load_text(str(tmp_path))
    assert [d.name for d in docs] == ["a.md", "b.py", "sub/c.txt"]
    assert docs[2].text == "text of sub/c.txt"


@pytest.mark.skipif(not GUTENBERG.is_dir(), reason=f"{GUTENBERG} is absent")
def test_gutenberg_crlf_and_latin1(monkeypatch):
    (emma,) = corpus.load_text("gutenberg:austen-emma", gutenberg_dir=GUTENBERG)
    assert emma.name == "gutenberg:austen-emma" and "Emma Woodhouse" in emma.text
    monkeypatch.setenv(corpus.GUTENBERG_ENV, str(GUTENBERG))
    (moby,) = corpus.load_text("gutenberg:melville-moby_dick")  # CRLF on disk
    assert "\r" not in moby.text and "Call me Ishmael." in moby.text
    (caesar,) = corpus.load_text("gutenberg:shakespeare-caesar")  # Latin-1 on disk
    assert "\ufffd" not in caesar.text and "Caesar" in caesar.text
    assert any(ord(c) > 127 for c in caesar.text)
    monkeypatch.delenv(corpus.GUTENBERG_ENV)
    assert corpus.gutenberg_dir() == pathlib.Path.cwd().parent / "shared" / "data" / "gutenberg"


@pytest.mark.parametrize("source", ["no-such-source", "/no/such/folder", ""])
def test_unknown_source_names_it(source):
    with pytest.raises(ValueError, match=f"source={source!r}"):
        corpus.load_text(source)


def test_package_source_reads_an_installed_packages_python_files(tmp_path, monkeypatch):
    import markdown

    root = pathlib.Path(markdown.__file__).parent
    docs = corpus.load_text("package:markdown")
    want = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    assert [d.name for d in docs] == [f"markdown/{r}" for r in want] and len(docs) > 10
    core = next(d for d in docs if d.name == "markdown/core.py")
    assert core.text == (root / "core.py").read_text(encoding="utf-8") and not core.hash_split
    assert corpus.split(docs, "heldout") == docs  # a named text is held out whole
    assert corpus.source_files("package:markdown") == sorted(root.rglob("*.py"))
    # a package of the cwd's own (a folder on sys.path) counts too, found without importing it
    (tmp_path / "mine_pkg").mkdir()
    (tmp_path / "mine_pkg" / "__init__.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (doc,) = corpus.load_text("package:mine_pkg")
    assert doc.name == "mine_pkg/__init__.py"


@pytest.mark.parametrize("package", ["no_such_package_xyz", "", "os.path", "sys", "../etc"])
def test_unknown_package_names_the_field(package):
    with pytest.raises(ValueError, match=rf"heldout_text='package:{re.escape(package)}' is not allowed; no installed"):
        corpus.load_text(f"package:{package}", name="heldout_text")


def test_bad_gutenberg_book_and_folder(tmp_path):
    (tmp_path / "austen-emma.txt").write_text("Emma", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'austen-emmma'.*Did you mean 'austen-emma'"):
        corpus.load_text("gutenberg:austen-emmma", gutenberg_dir=tmp_path)
    with pytest.raises(ValueError, match=r"gutenberg:austen-emma.*does not exist"):
        corpus.load_text("gutenberg:austen-emma", gutenberg_dir=tmp_path / "missing")


def test_empty_folder_raises(tmp_path):
    with pytest.raises(ValueError, match="holds no"):
        corpus.load_text(str(tmp_path))


def test_document_is_validated():
    with pytest.raises(ValueError, match="name=''"):
        corpus.Document("", "x")


def test_split_is_deterministic_disjoint_and_complete(stdlib):
    train, held = corpus.split(stdlib, "train"), corpus.split(stdlib, "heldout")
    assert {d.name for d in train}.isdisjoint({d.name for d in held})
    assert len(train) + len(held) == len(stdlib)
    assert 0.05 < len(held) / len(stdlib) < 0.15
    shuffled = random.Random(0).sample(stdlib, len(stdlib))
    assert sorted(d.name for d in corpus.split(shuffled, "heldout")) == sorted(d.name for d in held)
    with pytest.raises(ValueError, match="part='test'"):
        corpus.split(stdlib, "test")


def test_select_documents(stdlib):
    tok = ByteTokenizer()
    docs = corpus.select_documents(stdlib, tok, min_tokens=1024, n=5)
    assert [d.name for d in docs] == sorted(d.name for d in docs)
    assert all(corpus.is_heldout(d.name) and len(d.text.encode()) >= 1024 for d in docs)
    longer = [d for d in corpus.split(stdlib, "heldout") if len(d.text.encode()) >= 1024]
    assert docs == sorted(longer, key=lambda d: d.name)[:5]
    with pytest.raises(ValueError, match="n=100000"):
        corpus.select_documents(stdlib, tok, min_tokens=1024, n=100000)


@pytest.mark.parametrize("tok", [ByteTokenizer(), WordTokenizer()], ids=["bytes", "words"])
def test_passkey_prompt_format_and_length(tok):
    rng = random.Random(0)
    for _ in range(50):
        key, depth = rng.randint(*needles.KEY_RANGE), rng.random()
        n = rng.randint(200, 2000) if isinstance(tok, ByteTokenizer) else rng.randint(40, 400)
        prompt = needles.passkey_prompt(key, n, depth, tok)
        assert needles.KEY_LINE.format(key=key) in prompt
        assert prompt.startswith(needles.TASK) and prompt.endswith("\n" + needles.QUESTION)
        assert n - 20 <= corpus.count_tokens(tok, prompt) <= n
        if isinstance(tok, ByteTokenizer):
            assert len(prompt.encode()) == n


def test_passkey_depth_places_the_key():
    tok, line = ByteTokenizer(), needles.KEY_LINE.format(key=123)
    first = needles.passkey_prompt(123, 600, 0.0, tok)
    last = needles.passkey_prompt(123, 600, 1.0, tok)
    assert first.startswith(f"{needles.TASK}\n\n{line}\n")
    assert last.endswith(f"\n{line}\n\n{needles.QUESTION}")
    middle = needles.passkey_prompt(123, 600, 0.5, tok)
    assert 0.4 < middle.index(line) / len(middle) < 0.6


def test_passkey_prompt_rejects_bad_arguments():
    tok = ByteTokenizer()
    with pytest.raises(ValueError, match="n_tokens=50"):
        needles.passkey_prompt(7, 50, 0.5, tok)
    with pytest.raises(ValueError, match=r"depth=1\.5"):
        needles.passkey_prompt(7, 500, 1.5, tok)
    least = needles.passkey_min_tokens(tok)
    bare = needles.passkey_prompt(50000, least, 0.3, tok)
    assert bare == "\n".join([needles.TASK, "", needles.KEY_LINE.format(key=50000), "", needles.QUESTION])
    with pytest.raises(ValueError, match=f"n_tokens={least - 1} .* >= {least}"):
        needles.passkey_prompt(50000, least - 1, 0.3, tok)


def test_keys_and_passkey_documents_are_seeded():
    keys = needles.draw_keys(200, seed=3)
    assert keys == needles.draw_keys(200, seed=3) != needles.draw_keys(200, seed=4)
    assert all(needles.KEY_RANGE[0] <= k <= needles.KEY_RANGE[1] for k in keys)
    tok = ByteTokenizer()
    docs = list(needles.passkey_documents(20, tok, 200, 300, seed=5))
    assert docs == list(needles.passkey_documents(20, tok, 200, 300, seed=5))
    for text in docs:
        prompt, answer = text.rsplit(" ", 1)
        key = int(answer.rstrip("."))
        assert prompt.endswith(needles.QUESTION) and needles.KEY_LINE.format(key=key) in prompt
        assert 200 <= len(prompt.encode()) <= 300


def test_a_users_text_is_held_out_whole_and_pools_are_disjoint_halves(tmp_path, stdlib):
    (tmp_path / "a.txt").write_text("x" * 100)
    (tmp_path / "b.md").write_text("y" * 100)
    mine = corpus.load_text(str(tmp_path))
    assert corpus.split(mine, "heldout") == mine and corpus.split(mine, "train") == []
    held = corpus.split(stdlib, "heldout")
    ev, tu = corpus.pool(held, "evaluation"), corpus.pool(held, "tuning")
    assert not {d.name for d in ev} & {d.name for d in tu} and len(ev) + len(tu) == len(held)
    assert 0.3 < len(ev) / len(held) < 0.7
    with pytest.raises(ValueError, match="Did you mean 'tuning'"):
        corpus.pool(held, "tunning")


def test_a_users_file_is_cut_into_consecutive_windows(tmp_path):
    """One file longer than the window gives as many windows as it holds (round-robin across
    documents, each the next stretch of tokens); a folder of enough documents still gives the
    start of each, as before."""
    import torch

    tok = ByteTokenizer()
    text = "".join(f"line {i}: the quick brown fox\n" for i in range(300))  # ~8.7k bytes = tokens
    (tmp_path / "mine.txt").write_text(text)
    docs = corpus.load_text(str(tmp_path / "mine.txt"))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    w = corpus.heldout_windows(tok, 512, n=4, docs=docs)  # [4, 512]
    assert w.shape == (4, 512)
    assert torch.equal(w, torch.tensor([ids[i * 512 : (i + 1) * 512] for i in range(4)]))
    (tmp_path / "b.txt").write_text(text[:1200])  # one window only
    two = corpus.load_text(str(tmp_path))
    w = corpus.heldout_windows(tok, 512, n=3, docs=two)  # b's window, mine's first, mine's second
    b_ids = tok(text[:1200], add_special_tokens=False)["input_ids"]
    assert torch.equal(w, torch.tensor([b_ids[:512], ids[:512], ids[512:1024]]))


def test_a_text_too_short_says_how_long_it_is_and_must_be(tmp_path):
    tok = ByteTokenizer()
    (tmp_path / "short.txt").write_text("x" * 1500)
    docs = corpus.load_text(str(tmp_path / "short.txt"))
    want = r"^n=4 windows of 512 tokens .* 1500 tokens in all, which give 2; it needs 2048"
    with pytest.raises(ValueError, match=want):
        corpus.heldout_windows(tok, 512, n=4, docs=docs)


def test_gutenberg_is_every_book_of_the_folder(tmp_path, monkeypatch):
    """``gutenberg`` (the SmolLM2 demo's default text): every ``.txt`` book of the books' folder,
    each named ``gutenberg:<book>`` and held out whole; $ATTNTEMP_GUTENBERG before the places
    searched (../shared/data/gutenberg from the cwd and above it, then beside the checkout)."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("b-two", "a-one"):
        (books / f"{name}.txt").write_bytes(f"{name}\r\n".encode() * 3)
    (books / "README.nltk").write_text("not a book")
    (books / "SOURCE-LICENSE.md").write_text("not a book")
    monkeypatch.setenv(corpus.GUTENBERG_ENV, str(books))
    docs = corpus.load_text("gutenberg", name="text")
    assert [d.name for d in docs] == ["gutenberg:a-one", "gutenberg:b-two"]
    assert docs[0].text == "a-one\n" * 3 and corpus.split(docs, "heldout") == docs
    assert corpus.source_files("gutenberg") == [books / "a-one.txt", books / "b-two.txt"]
    monkeypatch.delenv(corpus.GUTENBERG_ENV)
    work = tmp_path / "w" / "x"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    places = corpus.gutenberg_places()
    assert places[:2] == [tmp_path / "w" / "shared/data/gutenberg", tmp_path / "shared/data/gutenberg"]
    checkout = corpus._package_checkout()
    # beside the checkout: searched last, or already among the cwd's ancestors (a checkout under /tmp)
    assert checkout is None or checkout.parent / "shared/data/gutenberg" in places
