"""lm-eval's tasks for ``attntemp eval``: found by name, given their metadata, built once before
the model loads (offline where they can be), and limited per length.

RULER (Hsieh et al., arXiv:2404.06654) as lm-eval 0.4.13 ships it makes its documents from a
tokenizer, at the lengths its ``metadata`` names (``max_seq_lengths``, default [4096]): attntemp
passes the model's own tokenizer as ``metadata["tokenizer"]`` (a folder lm-eval's
``AutoTokenizer.from_pretrained`` reads offline) beside the user's ``--metadata``. Six of its
tasks need nothing else (:data:`RULER_OFFLINE`); the others read a dataset from the Hugging Face
Hub (:data:`RULER_NETWORK`, cached by datasets once fetched) or the web at every build
(:data:`DOWNLOADS`), and fail at once, in one line naming the task, without it.

lm-eval's ``prepare_niah`` (imported by every ``niah_*`` task) asks nltk to download its
``punkt_tab`` sentence model at import. Only the essay haystack splits sentences with it, and
those tasks need the Hub's essays anyway; so while tasks load without the network,
``nltk.download`` answers "not downloaded" at once instead of trying
(:func:`cache_only_without_hub`), and a task that then needs punkt says so.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import io
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

RULER_OFFLINE = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe", "ruler_fwe")
ESSAYS = "Paul Graham's essays (baber/paul_graham_essays) from the Hub and nltk's punkt_tab"
RULER_NETWORK = {
    **dict.fromkeys(
        ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery"), ESSAYS
    ),
}
DOWNLOADS = {  # fetched with requests at every build, no cache: refused at once without the network
    "ruler_qa_squad": "the SQuAD v2 dev set from rajpurkar.github.io",
    "ruler_qa_hotpot": "the HotpotQA dev set from huggingface.co",
}
METADATA_EXAMPLE = "'{\"max_seq_lengths\":[4096,8192]}'"
NETWORK_ERRORS = ("huggingface_hub", "datasets", "requests", "urllib3", "httpx", "fsspec", "aiohttp")


# ----------------------------------------------------------------------------- --metadata
def _lengths_error(lengths: Any) -> str | None:
    if not isinstance(lengths, list) or not lengths:
        return f"max_seq_lengths={lengths!r} is not a non-empty list"
    for i, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return f"max_seq_lengths[{i}]={n!r} is not a positive integer"
    return None


def task_metadata(text: str) -> dict[str, Any]:
    """``--metadata``'s JSON object (``{}`` for ""), checked: RULER's ``max_seq_lengths`` a list of
    token counts, ``tokenizer`` a name or folder. Errors start with ``metadata`` (the field)."""
    if not text:
        return {}
    shown = repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"metadata={shown} is not allowed: not JSON ({exc.msg} at character {exc.pos}); expected a JSON "
            f"object, e.g. {METADATA_EXAMPLE}"
        ) from None
    except RecursionError:
        raise ValueError(
            f"metadata={shown} is not allowed: nested too deep to read; expected a JSON object, e.g. {METADATA_EXAMPLE}"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"metadata={text!r} is not allowed; expected a JSON object, e.g. {METADATA_EXAMPLE}, "
            f"not a JSON {type(value).__name__}"
        )
    wrong = _lengths_error(value["max_seq_lengths"]) if "max_seq_lengths" in value else None
    if wrong:
        raise ValueError(f"metadata={text!r} is not allowed: {wrong}; expected token counts, e.g. [4096, 8192]")
    if "tokenizer" in value and (not isinstance(value["tokenizer"], str) or not value["tokenizer"]):
        raise ValueError(f"metadata={shown} is not allowed: tokenizer must be a tokenizer's name or folder")
    if "tokenizer" in value:
        check_tokenizer(value["tokenizer"])
    return value


def check_tokenizer(name: str) -> None:
    """``--metadata``'s tokenizer: a folder holding a tokenizer, or a hub id cached or reachable
    now (lm-eval would otherwise try the network and fail there), named as the field."""
    from ...hf.models import where as source

    field_ = f"metadata[tokenizer]={name!r}"
    if source.looks_like_path(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise ValueError(f"{field_} is not allowed: no such folder; expected a tokenizer's folder or hub id")
        if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            raise ValueError(f"{field_} is not allowed: the folder holds no tokenizer.json or tokenizer_config.json")
        return
    try:
        source.check_hub_id(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace(f"model={name!r}", field_, 1).split("; expected")[0]) from None


def tokenizer_source(tokenizer: Any, folder: Path) -> str:
    """A name or folder lm-eval's RULER can load ``tokenizer`` from: its own folder when it has
    one, else a copy saved into ``folder`` (a tokenizer made in memory, or from a GGUF file)."""
    name = str(getattr(tokenizer, "name_or_path", "") or "")
    if name and (Path(name) / "tokenizer_config.json").is_file():
        return name
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    return str(folder)


# ----------------------------------------------------------------------------- names
def _unknown(requested: Sequence[str], known: Sequence[str]) -> list[str]:
    return [n for n in requested if not fnmatch.filter(known, n)]


def ruler_folder() -> Path:
    """lm-eval's own RULER task folder (indexed before the ~15k other tasks: that takes 12-30 s)."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent / "ruler"


def task_manager(tasks: Sequence[str], paths: Sequence[str], metadata: dict[str, Any] | None = None) -> Any:
    """lm-eval's TaskManager that knows every name in ``tasks``, with ``metadata`` for every task:
    the include paths (and lm-eval's RULER folder) alone when they suffice (fast), else with
    lm-eval's own tasks too. Raises naming an unknown task."""
    from lm_eval.tasks import TaskManager

    for extra in ([], [str(ruler_folder())]):
        manager = TaskManager(include_path=[*paths, *extra], include_defaults=False, metadata=metadata)
        if not _unknown(tasks, manager.all_tasks):
            return manager
    manager = TaskManager(include_path=list(paths), metadata=metadata)
    unknown = _unknown(tasks, manager.all_tasks)
    if unknown:
        close = difflib.get_close_matches(unknown[0], manager.all_tasks, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"--tasks {unknown[0]!r} is not a task, group or tag lm-eval knows{hint}; list them with "
            "`lm_eval ls tasks`, or add the folder of its YAML with --include-path"
        )
    return manager


def expand(tasks: Sequence[str], manager: Any) -> list[str]:
    """Glob patterns made names (lm-eval's CLI does the same), in the order given, each once."""
    out: list[str] = []
    for name in tasks:
        out += [m for m in sorted(fnmatch.filter(manager.all_tasks, name)) if m not in out]
    return out


# ----------------------------------------------------------------------------- offline
@contextlib.contextmanager
def no_nltk_download() -> Iterator[None]:
    """``nltk.download`` returns False at once inside (nothing is fetched); nltk is left alone
    when it is not installed."""
    try:
        import nltk
    except ImportError:
        yield
        return
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: False
    try:
        yield
    finally:
        nltk.download = saved


@contextlib.contextmanager
def cache_only_without_hub() -> Iterator[bool]:
    """While tasks load or run: when the Hub cannot be reached (a 3 s connection test),
    huggingface_hub and datasets are put in offline mode, so a dataset that is cached loads from
    the cache and one that is not fails at once instead of after five retries (30 s and a page of
    retry lines); nltk downloads nothing (:func:`no_nltk_download`). Yields whether the Hub is up."""
    from ...hf.models.where import hub_reachable

    if hub_reachable():
        yield True
        return
    import datasets.config
    import huggingface_hub.constants

    saved = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    huggingface_hub.constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        with no_nltk_download():
            yield False
    finally:
        huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def _is_network(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) comes from fetching: the Hub, datasets, HTTP."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError) or type(seen).__module__.split(".")[0] in NETWORK_ERRORS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def load_error(name: str, exc: BaseException) -> ValueError:
    """One line for a task that could not be built, saying what it needs."""
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    if isinstance(exc, ImportError):
        return ValueError(
            f"--tasks {name!r} needs a package that is not installed ({detail}); pip install 'attntemp[eval]' "
            "installs lm-eval with RULER's (nltk, wonderwords)"
        )
    if isinstance(exc, LookupError) and "punkt" in str(exc):
        return ValueError(
            f"--tasks {name!r} needs nltk's punkt_tab sentence model, a download: run `python -m nltk.downloader "
            f"punkt_tab` once with network access (the RULER tasks {', '.join(RULER_OFFLINE)} need none)"
        )
    if name in RULER_NETWORK or name in DOWNLOADS or _is_network(exc):
        needs = RULER_NETWORK.get(name) or DOWNLOADS.get(name) or "its dataset, from the Hugging Face Hub"
        return ValueError(
            f"--tasks {name!r} could not be loaded without the network: it needs {needs} ({detail}); fetch it "
            "once with network access (lm-eval then reads its cache) or give a local task folder with --include-path"
        )
    hint = "; RULER's lengths and tokenizer are set with --metadata" if "seq_length" in detail else ""
    return ValueError(f"--tasks {name!r} could not be built ({detail}){hint}")


def load_tasks(tasks: Sequence[str], manager: Any) -> dict[str, Any]:
    """Build each task once (lm-eval fetches or makes its documents here) and return the leaf
    tasks by name; a task that cannot be built is one error line naming it (:func:`load_error`).
    What task code prints is lm-eval's noise: on stderr when its logs are shown, else dropped."""
    shown = logging.getLogger("lm_eval").getEffectiveLevel() < logging.ERROR
    leaves: dict[str, Any] = {}
    with cache_only_without_hub() as online:  # one connection test for all the tasks
        for name in tasks:
            if not online and name in DOWNLOADS:
                raise load_error(name, ConnectionError("the network cannot be reached"))
            try:
                with contextlib.redirect_stdout(sys.stderr if shown else io.StringIO()):
                    loaded = manager.load([name])
            except Exception as exc:  # datasets / hub / task code errors have many types
                raise load_error(name, exc) from None
            leaves |= {t: task for t, task in loaded["tasks"].items() if t not in leaves}
    return leaves


# ----------------------------------------------------------------------------- --limit
def doc_samples(tasks: dict[str, Any], limit: int) -> dict[str, list[int]]:
    """lm-eval's ``samples`` for ``--limit``: per task the first ``limit`` documents, or, for a task
    whose documents carry RULER's ``max_length``, the first ``limit`` at each length (lm-eval's own
    ``limit`` would take them all from the first length)."""
    out = {}
    for name, task in tasks.items():
        docs = task.eval_docs
        columns = getattr(docs, "column_names", None) or []
        lengths = list(docs["max_length"]) if "max_length" in columns else [None] * len(docs)
        by_length: dict[Any, list[int]] = {}
        for i, n in enumerate(lengths):
            by_length.setdefault(n, []).append(i)
        out[name] = sorted(i for ids in by_length.values() for i in ids[:limit])
    return out
