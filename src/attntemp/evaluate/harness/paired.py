"""A model with and without a TemperatureSpec on lm-evaluation-harness tasks, paired.

``harness(model, tokenizer, spec, tasks)`` runs lm-eval's ``simple_evaluate`` twice on one loaded
model, wrapped in lm-eval's ``HFLM`` (which takes a model instance and its tokenizer): without the
spec, then under ``attntemp.patch(model, spec)``. Both runs see the same documents (lm-eval's own
seeds), so every per-document outcome pairs up; :mod:`attntemp.evaluate.harness.table` turns the
two results into one table, with lm-eval's own stderr beside attntemp's intervals.

lm-eval is an optional extra (``pip install 'attntemp[eval]'``) and is imported only inside the
functions here, never at ``import attntemp``. attntemp's own passkey and needle tasks
(:mod:`attntemp.evaluate.harness.task_folder`) are always on the include path; lm-eval's RULER tasks get
the model's tokenizer and ``--metadata`` (:mod:`attntemp.evaluate.harness.lookup`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...hf.patch import patch
from ...ops.spec import TemperatureSpec
from ...utils import install, outputs
from . import table as harness_table
from . import task_folder as lm_eval_tasks
from .config import MAX_LENGTH, check_metadata
from .config import EvalHarnessConfig as EvalHarnessConfig  # read here before its config module
from .lookup import (
    cache_only_without_hub,
    doc_samples,
    expand,
    load_tasks,
    task_manager,
    task_metadata,
    tokenizer_source,
)

LM_EVAL_REQUIREMENT = "lm-eval>=0.4,<0.5"
INSTALL_HINT = f"pip install 'attntemp[eval]' (or '{LM_EVAL_REQUIREMENT}')"
RUNS = ("without_spec", "with_spec")


@dataclass(frozen=True)
class HarnessResult:
    """Both runs' lm-eval results (``samples`` included), the paired rows and their markdown table."""

    without_spec: dict[str, Any] = field(repr=False)
    with_spec: dict[str, Any] = field(repr=False)
    rows: list[dict[str, Any]]
    table: str
    out: Path | None = None

    def to_dict(self) -> dict[str, Any]:  # the --json document
        return {"out": str(self.out), "rows": self.rows}

    def markdown(self) -> str:
        return f"{self.table}\n\n{len(self.rows)} rows; wrote {self.out}"


# ----------------------------------------------------------------------------- lm-eval, checked
def require_lm_eval() -> None:
    """Raise one ValueError line naming the install when lm-eval cannot be imported."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise ValueError(f"lm-eval is not installed; {INSTALL_HINT}") from None


@contextlib.contextmanager
def lm_eval_logging(show: bool) -> Iterator[None]:
    """lm-eval's loggers at ERROR inside (its per-task notes are noise here) unless ``show``; its
    ``git describe`` (results' ``git_hash``) always without git's stderr: outside a repository git
    prints ``fatal: not a git repository`` on a run that went well."""
    import lm_eval.evaluator as evaluator

    logger = logging.getLogger("lm_eval")
    level, git_hash = logger.level, evaluator.get_git_commit_hash
    if not show:
        logger.setLevel(logging.ERROR)
    evaluator.get_git_commit_hash = quiet_git_hash
    try:
        yield
    finally:
        logger.setLevel(level)
        evaluator.get_git_commit_hash = git_hash


def quiet_git_hash() -> str | None:
    """``git describe --always`` of the working folder (lm-eval's ``get_git_commit_hash``), None
    outside a repository or without git, git's own stderr discarded."""
    try:
        found = subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    return found.strip().decode()


def include_paths(extra: Sequence[str | os.PathLike[str]], tasks_dir: Path | None = None) -> list[str]:
    """attntemp's task folder (``tasks_dir`` or the shipped one) and ``extra``, each once, checked."""
    paths = [str(tasks_dir or lm_eval_tasks.lm_eval_tasks_path())]
    for p in extra:
        if not Path(p).is_dir():
            raise ValueError(f"--include-path {str(p)!r} is not a folder; expected folders of lm-eval task YAML files")
        if str(p) not in paths and Path(p).resolve() != Path(paths[0]).resolve():
            paths.append(str(p))
    return paths


# ----------------------------------------------------------------------------- the two runs
@dataclass(frozen=True)
class Settings:
    """How lm-eval runs: documents per task, batch size, prompt budget, its stderr resamples."""

    limit: int | None = None
    batch_size: int = 1
    max_length: int = MAX_LENGTH
    bootstrap_iters: int = 100000
    samples: dict[str, list[int]] | None = None  # with ``limit``: the documents per task (per length for RULER)


@dataclass(frozen=True, kw_only=True)
class HarnessOptions(Settings):
    """:func:`harness`'s options: how lm-eval runs (:class:`Settings`), more task folders, the seed of
    the paired intervals, ``out``, lm-eval's log lines and every task's ``metadata``."""

    include_path: Sequence[str | os.PathLike[str]] = ()
    seed: int = 0
    out: str | os.PathLike[str] | None = None
    overwrite: bool = False
    lm_eval_logs: bool = False
    metadata: dict[str, Any] | None = None


def prepare(
    tasks: Sequence[str],
    include_path: Sequence[Any],
    tasks_dir: Path | None = None,
    metadata: dict[str, Any] | None = None,
    settings: Settings = Settings(),
) -> tuple[Any, list[str], Settings]:
    """lm-eval's TaskManager (``metadata`` for every task), the task names (globs expanded) and the
    settings with the documents ``limit`` picks, every task built once: what can fail without the
    model fails here, before it loads."""
    manager = task_manager(tasks, include_paths(include_path, tasks_dir), metadata)
    names_ = expand(tasks, manager)
    leaves = load_tasks(names_, manager)
    samples = doc_samples(leaves, settings.limit) if settings.limit is not None else None
    return manager, names_, replace(settings, samples=samples)


def _evaluate(lm: Any, tasks: Sequence[str], manager: Any, settings: Settings) -> dict[str, Any]:
    from lm_eval import simple_evaluate

    limit = None if settings.samples is not None else settings.limit
    # lm-eval prints notes (stdout stays the table); the tasks are built again offline as in prepare
    with contextlib.redirect_stdout(sys.stderr), cache_only_without_hub():
        results = simple_evaluate(
            lm,
            tasks=list(tasks),
            limit=limit,
            samples=settings.samples,
            task_manager=manager,
            log_samples=True,
            bootstrap_iters=settings.bootstrap_iters,
        )
    if results is None:
        raise ValueError("lm-eval returned no results (not rank 0 of a distributed run?)")
    return dict(results)


def both_runs(
    model: Any, tokenizer: Any, spec: TemperatureSpec, tasks: Sequence[str], manager: Any, settings: Settings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """lm-eval's results (samples included) of ``model`` without ``spec``, then patched with it."""
    from lm_eval.models.huggingface import HFLM

    with patch(model, spec):  # a spec that does not fit the model fails here, before the first run
        pass
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size, max_length=settings.max_length)
    without = _evaluate(lm, tasks, manager, settings)
    with patch(model, spec):
        with_ = _evaluate(lm, tasks, manager, settings)
    return without, with_


def finish(
    runs: tuple[dict, dict], seed: int, out: Path | None, meta: dict, staged: Path | None = None
) -> HarnessResult:
    """The paired rows and table of both runs; written to ``out`` when given."""
    rows = harness_table.compare(runs[0], runs[1], seed=seed)
    result = HarnessResult(runs[0], runs[1], rows, harness_table.paired_table(rows))
    if out is None:
        return result
    return HarnessResult(runs[0], runs[1], rows, result.table, write_eval(out, result, meta, staged))


def harness(
    model: Any,
    tokenizer: Any,
    spec: TemperatureSpec | str | os.PathLike[str],
    tasks: Sequence[str],
    opts: HarnessOptions | None = None,
) -> HarnessResult:
    """lm-eval ``tasks`` on ``model`` without ``spec`` and with it (``attntemp.patch``), paired, as
    ``opts`` says (:class:`HarnessOptions`).

    ``max_length`` is lm-eval's prompt budget (longer prompts lose their start); HFLM would
    otherwise take the model's ``max_position_embeddings``, which attntemp runs past. With
    ``out``, writes each run's results (``RUN/results.json``, ``RUN/samples_TASK.jsonl``),
    ``comparison.json`` and ``comparison.md`` (a non-empty ``out`` needs ``overwrite``).
    ``metadata`` goes to every task (RULER: ``max_seq_lengths``); ``tokenizer`` is passed in it.
    """
    o = opts or HarnessOptions()
    spec = spec if isinstance(spec, TemperatureSpec) else TemperatureSpec.load(Path(spec))
    user = task_metadata(json.dumps(o.metadata)) if o.metadata else {}
    check_metadata(user, o.max_length)
    require_lm_eval()
    if o.out is not None:
        check_eval_out(Path(o.out), o.overwrite)
    with lm_eval_logging(o.lm_eval_logs), tempfile.TemporaryDirectory() as tmp:
        meta_ = {"tokenizer": tokenizer_source(tokenizer, Path(tmp) / "tokenizer")} | user
        settings = Settings(o.limit, o.batch_size, o.max_length, o.bootstrap_iters)
        manager, names_, settings = prepare(tasks, o.include_path, metadata=meta_, settings=settings)
        runs = both_runs(model, tokenizer, spec, names_, manager, settings)
    meta = {"spec": spec.to_dict(), "tasks": names_, "limit": o.limit, "max_length": o.max_length, "metadata": user}
    return finish(runs, o.seed, None if o.out is None else Path(o.out), meta)


# ----------------------------------------------------------------------------- outputs
RUN_FILES = ("results.json", "samples_*.jsonl")
EVAL_OUTPUTS = outputs.Outputs(
    ("comparison.json", "comparison.md"),
    {**dict.fromkeys(RUNS, RUN_FILES), "lm_eval_tasks": ("*.yaml", "*.jsonl", "*.py", "*.pyc")},
)  # eval's own: --overwrite replaces these and nothing else in --out


def check_eval_out(out: Path, overwrite: bool) -> None:
    """``out`` by the rule of :mod:`attntemp.utils.outputs`: eval's earlier results (:data:`EVAL_OUTPUTS`)
    are replaced only with ``overwrite``; other files there are kept."""
    outputs.check_out(out, EVAL_OUTPUTS, overwrite)


def _dump(obj: Any) -> str:
    from lm_eval.utils import handle_non_serializable

    return json.dumps(obj, indent=2, default=handle_non_serializable, ensure_ascii=False)


def _write_run(folder: Path, results: dict[str, Any]) -> None:
    from lm_eval.utils import handle_non_serializable

    folder.mkdir(parents=True)
    (folder / "results.json").write_text(_dump({k: v for k, v in results.items() if k != "samples"}) + "\n")
    for task, samples in results.get("samples", {}).items():
        lines = [json.dumps(s, default=handle_non_serializable, ensure_ascii=False) for s in samples]
        (folder / f"samples_{task}.jsonl").write_text("".join(line + "\n" for line in lines))


def write_eval(out: Path, result: HarnessResult, meta: dict[str, Any], staged: Path | None = None) -> Path:
    """Write everything to a folder beside ``out`` (or into ``staged``), then move it into ``out``
    (eval's earlier outputs there removed first, other files kept): an interrupted run leaves
    ``out`` as it was."""
    tmp = staged or install.staging(out)
    try:
        for name, results in zip(RUNS, (result.without_spec, result.with_spec), strict=True):
            _write_run(tmp / name, results)
        import lm_eval

        body = {**meta, "lm_eval_version": lm_eval.__version__, "runs": list(RUNS), "rows": result.rows}
        (tmp / "comparison.json").write_text(_dump(body) + "\n")
        (tmp / "comparison.md").write_text(harness_table.page(result.table, meta) + "\n")
        outputs.honour_umask(tmp)
        outputs.clear(out, EVAL_OUTPUTS)  # checked before the run: only eval's own, also those not written again
        outputs.move_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
