"""lm-eval's tasks for `attntemp eval` (attntemp.evaluate.harness.lookup): --metadata checked, the
model's tokenizer handed to RULER, RULER found without indexing lm-eval's 15k tasks, --limit per
length, and a task that cannot be built named in one line with what it needs."""

import os

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from attntemp.evaluate.harness import lookup as harness_tasks
from attntemp.evaluate.harness.config import EvalHarnessConfig
from attntemp.evaluate.harness.task_folder import lm_eval_tasks_path


def test_metadata_is_a_json_object_with_ruler_lengths():
    assert harness_tasks.task_metadata("") == {}
    got = harness_tasks.task_metadata('{"max_seq_lengths": [512, 1024], "note": "x"}')
    assert got == {"max_seq_lengths": [512, 1024], "note": "x"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{max_seq_lengths: [4096]}", "is not allowed: not JSON (Expecting property name"),
        ("[4096, 8192]", "expected a JSON object, e.g. '{\"max_seq_lengths\":[4096,8192]}', not a JSON list"),
        ('{"max_seq_lengths": 4096}', "max_seq_lengths=4096 is not a non-empty list"),
        ('{"max_seq_lengths": []}', "max_seq_lengths=[] is not a non-empty list"),
        ('{"max_seq_lengths": [512, 0]}', "max_seq_lengths[1]=0 is not a positive integer"),
        ('{"max_seq_lengths": [512.5]}', "max_seq_lengths[0]=512.5 is not a positive integer"),
        ('{"max_seq_lengths": [true]}', "max_seq_lengths[0]=True is not a positive integer"),
        ('{"tokenizer": 3}', "tokenizer must be a tokenizer's name or folder"),
    ],
)
def test_bad_metadata_names_the_field(text, expected):
    with pytest.raises(ValueError) as err:
        harness_tasks.task_metadata(text)
    assert str(err.value).startswith(f"metadata={text!r}") and expected in str(err.value)


def test_ruler_lengths_must_fit_lm_evals_prompt_budget():
    with pytest.raises(
        ValueError, match=r"metadata max_seq_lengths\[1\]=8192 is not allowed; expected <= max_length=4096"
    ):
        EvalHarnessConfig(spec="s.json", tasks=("niah_single_1",), metadata='{"max_seq_lengths":[512,8192]}')
    cfg = EvalHarnessConfig(spec="s.json", tasks=("x",), metadata='{"max_seq_lengths":[8192]}', max_length=8192)
    assert cfg.metadata == '{"max_seq_lengths":[8192]}'


def test_the_tokenizer_goes_by_its_folder_or_a_saved_copy(tiny, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    _, tok = tiny
    assert harness_tasks.tokenizer_source(tok, tmp_path / "copy") == tok.name_or_path
    assert not (tmp_path / "copy").exists()
    monkeypatch.setattr(tok, "name_or_path", "made-in-memory")  # no folder to load it from
    saved = harness_tasks.tokenizer_source(tok, tmp_path / "copy")
    again = AutoTokenizer.from_pretrained(saved)
    assert saved == str(tmp_path / "copy") and again("def f():")["input_ids"] == tok("def f():")["input_ids"]


def test_ruler_is_found_without_indexing_every_lm_eval_task(monkeypatch):
    import lm_eval.tasks

    real, built = lm_eval.tasks.TaskManager, []
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", lambda **kw: built.append(kw) or real(**kw))
    manager = harness_tasks.task_manager(["niah_single_1", "ruler_*"], [str(lm_eval_tasks_path())], {"a": 1})
    assert [kw["include_defaults"] for kw in built] == [False, False]  # lm-eval's full index (12-30 s) not built
    assert built[-1]["metadata"] == {"a": 1} and built[-1]["include_path"][-1].endswith("tasks/ruler")
    names = harness_tasks.expand(["ruler_*"], manager)
    assert {"ruler_vt", "ruler_cwe", "ruler_fwe", "ruler_qa_squad"} <= set(names)
    assert set(harness_tasks.RULER_OFFLINE) <= set(manager.all_tasks)


class _Docs(list):
    """A datasets.Dataset stand-in: rows, and columns by name."""

    column_names = ("max_length", "input")

    def __getitem__(self, key):
        return [row[key] for row in self] if isinstance(key, str) else super().__getitem__(key)


class _Task:
    def __init__(self, docs):
        self.eval_docs = docs


def test_limit_takes_the_first_documents_at_each_ruler_length():
    ruler = _Docs([{"max_length": n, "input": ""} for n in (512,) * 5 + (1024,) * 5])
    plain = [{"q": i} for i in range(6)]
    got = harness_tasks.doc_samples({"niah": _Task(ruler), "other": _Task(plain)}, 2)
    assert got == {"niah": [0, 1, 5, 6], "other": [0, 1]}


def test_a_task_that_needs_the_network_is_named_with_what_it_needs():
    err = harness_tasks.load_error("niah_single_2", OSError("offline"))
    assert str(err).startswith("--tasks 'niah_single_2' could not be loaded without the network: it needs Paul")
    err = harness_tasks.load_error("my_task", ConnectionError("no route"))
    assert "it needs its dataset, from the Hugging Face Hub (ConnectionError: no route)" in str(err)
    err = harness_tasks.load_error("niah_single_1", ModuleNotFoundError("No module named 'wonderwords'"))
    assert "needs a package that is not installed" in str(err) and "(nltk, wonderwords)" in str(err)
    err = harness_tasks.load_error("niah_single_3", LookupError("Resource punkt_tab not found."))
    assert "needs nltk's punkt_tab sentence model, a download" in str(err)
    err = harness_tasks.load_error("niah_single_1", ValueError("... at max_seq_length=256. Raise it"))
    assert str(err).endswith("RULER's lengths and tokenizer are set with --metadata") and "Hub" not in str(err)


def test_nltk_downloads_nothing_inside_and_is_restored():
    import nltk

    before = nltk.download
    with harness_tasks.no_nltk_download():
        assert nltk.download("punkt_tab") is False
    assert nltk.download is before
