"""Text sources, a deterministic train/held-out split and the held-out windows scored.

Everything here is offline: the default text is the running CPython's standard library, read at
run time; ``gutenberg:<book>`` reads a plain-text book from a local folder, ``gutenberg`` every book
there (the folder: :func:`gutenberg_dir`); ``package:<name>`` the
``.py`` files of an installed package (e.g. ``package:markdown``, a dependency of attntemp, so on
every machine that has it: Python code the tiny model, trained on the stdlib, never saw); a path
reads files. The passkey prompts drawn from no text are :mod:`attntemp.evaluate.needles`'.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import pathlib
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..utils import checks
from ..utils.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch")


TEXT_SUFFIXES = (".txt", ".py", ".md")
SKIPPED_STDLIB_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})
GUTENBERG_ENV = "ATTNTEMP_GUTENBERG"
HELDOUT_PERCENT = 10
# the second text for a run on stdlib: Python code outside the stdlib, an attntemp dependency on every machine
HELDOUT_FOR_STDLIB = "package:markdown"


@dataclass(frozen=True)
class Document:
    """One named text: ``name`` is stable across machines (a relative path or a book name).

    ``hash_split``: whether the stdlib train/held-out split applies (the shipped tiny model was
    trained on the train part of the stdlib); a text the user names is held out whole."""

    name: str
    text: str
    hash_split: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} is not allowed; expected a non-empty string")
        if not isinstance(self.text, str):
            raise ValueError(f"text of {self.name!r} is {type(self.text).__name__}; expected str")


def _decode(raw: bytes) -> str:
    """UTF-8 (or Latin-1 when that fails), with CRLF / CR line ends made ``\\n``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read(path: pathlib.Path, name: str, hash_split: bool = True) -> Document:
    text = path.read_text(encoding="utf-8", errors="replace")
    return Document(name, text.replace("\r\n", "\n").replace("\r", "\n"), hash_split)


def stdlib_documents(skip_tests: bool = True) -> list[Document]:
    """The ``.py`` files of the running CPython's standard library, sorted by relative path."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    skipped = SKIPPED_STDLIB_DIRS if skip_tests else frozenset({"site-packages", "dist-packages"})
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if skipped.intersection(rel.parts[:-1]) or not path.is_file():
            continue
        docs.append(_read(path, rel.as_posix()))
    return docs


GUTENBERG_SUBDIR = pathlib.PurePosixPath("shared/data/gutenberg")  # beside a checkout: ../shared/data/gutenberg


def _package_checkout() -> pathlib.Path | None:
    """The checkout attntemp runs from (``src/attntemp`` inside a folder with ``pyproject.toml``),
    or None for an installed package."""
    root = pathlib.Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "attntemp").is_dir() else None


def gutenberg_places() -> list[pathlib.Path]:
    """Where the books are looked for, in order, when neither a folder nor ``$ATTNTEMP_GUTENBERG``
    is given: ``../shared/data/gutenberg`` from the current folder and from each folder above it,
    then beside the checkout attntemp runs from (:func:`_package_checkout`)."""
    cwd = pathlib.Path.cwd()
    places = [d.parent / GUTENBERG_SUBDIR for d in (cwd, *cwd.parents) if d != d.parent]
    checkout = _package_checkout()
    if checkout is not None:
        places.append(checkout.parent / GUTENBERG_SUBDIR)
    return list(dict.fromkeys(places))


def gutenberg_dir(folder: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """``folder``, else ``$ATTNTEMP_GUTENBERG``, else the first of :func:`gutenberg_places` that is a
    folder (``../shared/data/gutenberg`` from the cwd when none is)."""
    if folder is not None:
        return pathlib.Path(folder)
    env = os.environ.get(GUTENBERG_ENV)
    if env:
        return pathlib.Path(env)
    places = gutenberg_places()
    return next((p for p in places if p.is_dir()), places[0] if places else pathlib.Path(GUTENBERG_SUBDIR))


def _books_folder(source: str, folder: str | os.PathLike[str] | None, name: str) -> pathlib.Path:
    """The folder of the books ``source`` (``gutenberg`` or ``gutenberg:<book>``) reads; a
    ValueError naming ``name`` and where the books were looked for when it is not a folder."""
    root = gutenberg_dir(folder)
    if root.is_dir():
        return root
    if folder is not None:
        where = f"the folder {str(root)!r}, which does not exist"
    elif os.environ.get(GUTENBERG_ENV):
        where = f"{GUTENBERG_ENV}={str(root)!r}, which is not a folder"
    else:
        looked = [str(p) for p in gutenberg_places()]
        where = f"{GUTENBERG_ENV} (unset) or ../shared/data/gutenberg, found in none of {looked}"
    raise ValueError(
        f"{name}={source!r} needs the Project Gutenberg books (plain-text .txt files): {where}; set "
        f"{GUTENBERG_ENV} to the books' folder, or give another text (stdlib, a file or a folder)"
    )


def _gutenberg_file(book: str, folder: str | os.PathLike[str] | None, name: str) -> pathlib.Path:
    root = _books_folder(f"gutenberg:{book}", folder, name)
    path = root / f"{book}.txt"
    if not book or not path.is_file():
        books = sorted(p.stem for p in root.glob("*.txt"))
        close = difflib.get_close_matches(book, books, n=1)
        raise ValueError(
            f"{name}='gutenberg:{book}' is not allowed: no book {book!r} in {str(root)!r}; expected one of {books}."
            + (f" Did you mean {close[0]!r}?" if close else "")
        )
    return path


def _gutenberg_books(folder: str | os.PathLike[str] | None, name: str) -> list[pathlib.Path]:
    """Every book (``*.txt``) of the books' folder, sorted by name: the source ``gutenberg``."""
    root = _books_folder("gutenberg", folder, name)
    books = sorted(p for p in root.glob("*.txt") if p.is_file())
    if not books:
        raise ValueError(
            f"{name}='gutenberg' needs the Project Gutenberg books, but {str(root)!r} holds no .txt files; set "
            f"{GUTENBERG_ENV} to the books' folder, or give another text (stdlib, a file or a folder)"
        )
    return books


def package_root(package: str, name: str = "source") -> pathlib.Path:
    """The folder of an installed package (its import name, e.g. ``markdown``), found without
    importing it; a ValueError naming ``name`` when there is none."""
    found = None
    if package.isidentifier():
        try:
            found = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            found = None
    if found is None or not found.submodule_search_locations:
        raise ValueError(
            f"{name}='package:{package}' is not allowed; no installed package of that import name "
            "(a folder of .py files), e.g. package:markdown"
        )
    return pathlib.Path(next(iter(found.submodule_search_locations)))


def _package_files(package: str, name: str) -> list[pathlib.Path]:
    root = package_root(package, name)
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def _path_files(source: str, name: str) -> list[pathlib.Path]:
    path = pathlib.Path(source)
    if path.is_file():
        with open(path, "rb") as handle:
            head = handle.read(8192)
            if b"\0" in head:
                raise ValueError(f"{name}={source!r} is not allowed: it is binary (NUL bytes), not text")
            while head and not head.strip():  # whitespace so far: read on until a character or the end
                head = handle.read(1 << 20)
            if not head:
                raise ValueError(
                    f"{name}={source!r} is not allowed: it is too short to score, empty or only whitespace; give a text"
                )
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if not files:
            raise ValueError(f"{name}={source!r} holds no {'/'.join(TEXT_SUFFIXES)} files")
        return files
    raise ValueError(
        f"{name}={source!r} is not allowed; expected 'stdlib', 'gutenberg', 'gutenberg:<book>', 'package:<name>', "
        "or an existing file or folder"
    )


def source_files(
    source: str = "stdlib", gutenberg_dir: str | os.PathLike[str] | None = None, name: str = "source"
) -> list[pathlib.Path]:
    """The files ``source`` names, checked without reading them (``[]`` for ``"stdlib"``): what a
    command checks before its heavy work; errors call the source ``name`` (the field, e.g. ``text``).
    ``"gutenberg"`` is every book of the books' folder (:func:`gutenberg_dir`; a folder of that
    name in the cwd is ``./gutenberg``)."""
    if not isinstance(source, str) or not source:
        raise ValueError(f"{name}={source!r} is not allowed; expected a non-empty string")
    if source == "stdlib":
        return []
    if source == "gutenberg":
        return _gutenberg_books(gutenberg_dir, name)
    if source.startswith("gutenberg:"):
        return [_gutenberg_file(source.split(":", 1)[1], gutenberg_dir, name)]
    if source.startswith("package:"):
        return _package_files(source.split(":", 1)[1], name)
    return _path_files(source, name)


def same_source(a: str | None, b: str | None) -> bool:
    """True when two text sources name the same text: equal, or paths to the same file or folder
    (``DIR/../text.txt`` is ``text.txt``)."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    pa, pb = pathlib.Path(a), pathlib.Path(b)
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def load_text(
    source: str = "stdlib", gutenberg_dir: str | os.PathLike[str] | None = None, name: str = "source"
) -> list[Document]:
    """Documents of ``source``: ``"stdlib"``, ``"gutenberg:<book>"``, ``"gutenberg"`` (every book,
    each named ``gutenberg:<book>``, held out whole), ``"package:<name>"`` (named
    ``<name>/<path in it>``, held out whole) or a file / folder path (a folder's files named by
    their path in it); errors as :func:`source_files`."""
    files = source_files(source, gutenberg_dir, name)
    if source == "stdlib":
        return stdlib_documents()
    if source == "gutenberg":
        return [Document(f"gutenberg:{p.stem}", _decode(p.read_bytes()), hash_split=False) for p in files]
    if source.startswith("gutenberg:"):
        return [Document(source, _decode(files[0].read_bytes()), hash_split=False)]
    if source.startswith("package:"):
        root = package_root(source.split(":", 1)[1], name)
        return [_read(p, f"{root.name}/{p.relative_to(root).as_posix()}", hash_split=False) for p in files]
    folder = pathlib.Path(source)
    if folder.is_file():
        return [_read(folder, folder.name, hash_split=False)]
    return [_read(p, p.relative_to(folder).as_posix(), hash_split=False) for p in files]


def is_heldout(name: str) -> bool:
    """Stable membership: the first 8 bytes of sha256(name) mod 100 fall below HELDOUT_PERCENT."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT


def split(docs: Sequence[Document], part: str = "train") -> list[Document]:
    """The ``part`` ("train" or "heldout") of ``docs``, in their order; the two are disjoint.
    Documents without ``hash_split`` (a user's own text) are all held out."""
    checks.choice("part", part, ("train", "heldout"))
    want = part == "heldout"
    return [d for d in docs if (is_heldout(d.name) if d.hash_split else True) == want]


POOLS = ("evaluation", "tuning")


def halves(docs: Sequence[Document]) -> tuple[list[Document], list[Document]]:
    """Each document cut in two at the line break nearest its middle: ``(first halves, second
    halves)``, named ``NAME#1`` and ``NAME#2``. For a text of too few documents to make two pools
    (a user's one file): a tuner takes the first halves, its evidence is scored on the second."""
    first, second = [], []
    for d in docs:
        cut = d.text.find("\n", len(d.text) // 2) + 1 or len(d.text) // 2
        first.append(Document(f"{d.name}#1", d.text[:cut], hash_split=d.hash_split))
        second.append(Document(f"{d.name}#2", d.text[cut:], hash_split=d.hash_split))
    return first, second


def pool(docs: Sequence[Document], which: str) -> list[Document]:
    """The ``which`` pool ("evaluation" or "tuning") of ``docs``: a stable half by a hash of each
    name, so a tuner never sees a document its evidence is scored on, at any length."""
    checks.choice("pool", which, POOLS)
    want = POOLS.index(which)
    return [d for d in docs if hashlib.sha256(f"pool:{d.name}".encode()).digest()[0] % 2 == want]


def count_tokens(tokenizer: Any, text: str) -> int:
    """Number of tokens of ``text`` without special tokens."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def select_documents(
    docs: Sequence[Document], tokenizer: Any, min_tokens: int, n: int, part: str = "heldout"
) -> list[Document]:
    """The first ``n`` documents of ``part`` (in name order) with at least ``min_tokens`` tokens."""
    min_tokens = checks.positive_int("min_tokens", min_tokens)
    n = checks.positive_int("n", n)
    chosen = []
    for doc in sorted(split(docs, part), key=lambda d: d.name):
        # a token covers at least one byte, so short texts are rejected without tokenizing
        short = len(doc.text.encode("utf-8")) < min_tokens
        if not short and count_tokens(tokenizer, doc.text) >= min_tokens:
            chosen.append(doc)
            if len(chosen) == n:
                return chosen
    raise ValueError(f"n={n} is not allowed; only {len(chosen)} {part} documents have min_tokens={min_tokens}")


def heldout_windows(
    tokenizer: Any,
    length: int,
    n: int = 32,
    min_tokens: int | None = None,
    docs: Sequence[Document] | None = None,
    n_name: str = "n",
) -> torch.Tensor:
    """``[n, length]`` token ids: the start of each held-out document with at least ``min_tokens``
    (default ``length``) tokens, in name order; when there are fewer such documents than ``n`` (a
    user's own file or a few books), the documents are cut further into consecutive windows, taken
    round-robin (every document's second window, then its third, ...). A text too short for ``n``
    windows raises a ValueError saying how long it is and how long it must be (``n`` named ``n_name``)."""
    length = checks.positive_int("length", length)
    n = checks.positive_int(n_name, n)
    docs = load_text("stdlib") if docs is None else docs
    need = min_tokens or length
    ids = _long_documents(docs, tokenizer, need, n)  # token ids of up to n documents
    rows = _cut(ids, length, n)
    if len(rows) < n:
        total = sum(len(d) for d in ids)
        raise ValueError(
            f"{n_name}={n} windows of {length} tokens are more than the text holds: its held-out documents of at "
            f"least {need} tokens are {len(ids)} with {total} tokens in all, which give {len(rows)}; it needs "
            f"{n * length} tokens: give a longer text, or ask for fewer windows or a shorter length"
        )
    return torch.tensor(rows, dtype=torch.long)  # [n, length]


def _cut(ids: list[list[int]], length: int, n: int) -> list[list[int]]:
    """Up to ``n`` windows of ``length`` tokens: each document's start, then its further windows
    round-robin (every document's second window, then its third, ...)."""
    rows = [d[:length] for d in ids]
    k = 1
    while len(rows) < n and any(len(d) >= (k + 1) * length for d in ids):
        rows += [d[k * length : (k + 1) * length] for d in ids if len(d) >= (k + 1) * length][: n - len(rows)]
        k += 1
    return rows


def windows_held(tokenizer: Any, length: int, n: int, docs: Sequence[Document]) -> int:
    """How many of ``n`` windows of ``length`` tokens ``docs`` give by :func:`heldout_windows`' rule
    (``n`` when they hold them all): a run checks its text before the model loads."""
    length, n = checks.positive_int("length", length), checks.positive_int("n", n)
    return len(_cut(_long_documents(docs, tokenizer, length, n), length, n))


_TOKENIZED: dict[tuple[int, int, int, int], tuple[Any, Any, list[list[int]]]] = {}


def _long_documents(docs: Sequence[Document], tokenizer: Any, need: int, n: int) -> list[list[int]]:
    """Token ids of the first ``n`` held-out documents (name order) with at least ``need`` tokens
    (kept for the same documents and tokenizer objects: a race asks for them block after block)."""
    key = (id(docs), id(tokenizer), need, n)
    hit = _TOKENIZED.get(key)
    if hit is not None and hit[0] is docs and hit[1] is tokenizer:
        return hit[2]
    if len(_TOKENIZED) > 32:
        _TOKENIZED.clear()
    found = _tokenize_long(docs, tokenizer, need, n)
    _TOKENIZED[key] = (docs, tokenizer, found)
    return found


def _tokenize_long(docs: Sequence[Document], tokenizer: Any, need: int, n: int) -> list[list[int]]:
    found = []
    for doc in sorted(split(docs, "heldout"), key=lambda d: d.name):
        if len(doc.text.encode("utf-8")) < need:  # a token covers at least one byte
            continue
        ids = tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        if len(ids) >= need:
            found.append(ids)
            if len(found) == n:
                break
    return found


def windows_digest(ids: torch.Tensor) -> str:
    """sha256 of the token ids: tells whether two runs scored the very same windows."""
    return hashlib.sha256(ids.to(torch.int64).numpy().tobytes()).hexdigest()
