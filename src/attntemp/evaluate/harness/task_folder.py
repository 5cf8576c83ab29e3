"""attntemp's passkey and needle prompts as an lm-evaluation-harness task folder (YAML + JSONL).

Per length L: ``attntemp_passkey_L`` and ``attntemp_needle_L`` are ``generate_until`` tasks (10
greedy tokens; exact match of the first integer with the key, the YaRN paper's passkey protocol,
jquesnelle/yarn ``eval/passkey.py``), and ``attntemp_passkey_ll_L`` / ``attntemp_needle_ll_L``
are ``loglikelihood`` tasks on the same prompts (``acc``: the key is the greedy continuation;
``perplexity``: exp of minus the mean log-likelihood of the key " {key}"). Each prompt has at most
``L - 10`` tokens of the tokenizer it was made with, so prompt plus answer fit in ``L``.

The needle's haystack is made of seeded synthetic sentences (not a book, not the running Python's
standard library), so the folder is the same on every machine and a fresh generation can be
compared byte for byte with the shipped one (``src/attntemp/assets/lm_eval_tasks/``, made by
``scripts/make_lm_eval_tasks.py`` with the tiny model's byte tokenizer).

lm-eval reads each JSONL through ``attntemp_data.load`` (``custom_dataset: !function``), a
loader next to the YAML files, so the folder works from any working directory and offline.
"""

from __future__ import annotations

import importlib.resources
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...utils import checks
from .. import needles
from ..tasks import needle_prompt

LENGTHS = (256, 512, 1024)
DOCS = 20
SEED = 0
GEN_TOKENS = 10  # new tokens per answer (YaRN passkey protocol); prompts keep this much room
FAMILIES = ("passkey", "needle")
LOADER = "attntemp_data.py"
HEADER = "# Made by scripts/make_lm_eval_tasks.py (attntemp.evaluate.harness.task_folder); do not edit.\n"

SUBJECTS = ("The river", "A lamp", "The old map", "Our garden", "The north road", "A small boat", "The clock")
VERBS = ("is near", "was beside", "leans on", "faces", "waits by", "points to", "hides behind")
OBJECTS = ("the mill.", "a stone wall.", "the quiet field.", "the harbour.", "a wooden gate.", "the hill.")


def lm_eval_tasks_path() -> Path:
    """The shipped task folder, ``attntemp/assets/lm_eval_tasks`` (give it to lm-eval's ``--include_path``)."""
    return Path(str(importlib.resources.files("attntemp") / "assets" / "lm_eval_tasks"))


def haystack(rng: random.Random, chars: int) -> str:
    """Seeded synthetic sentences, one to four per line, of at least ``chars`` characters."""
    lines: list[str] = []
    size = 0
    while size < chars:
        n = rng.randint(1, 4)
        line = " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}" for _ in range(n))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _depths(n: int) -> list[float]:
    """``n`` depths spread evenly over [0, 1] (0 alone when n = 1)."""
    return [i / (n - 1) if n > 1 else 0.0 for i in range(n)]


def prompt_rows(family: str, tokenizer: Any, length: int, n: int = DOCS, seed: int = SEED) -> list[dict[str, Any]]:
    """``n`` rows ``{"prompt", "answer", "depth", "length"}`` of one family at ``length`` tokens."""
    checks.choice("family", family, FAMILIES)
    length = checks.positive_int("length", length)
    rng = random.Random(f"{family}:{length}:{seed}")  # a str seed is hashed by sha512: stable
    rows = []
    for depth in _depths(checks.positive_int("n", n)):
        key = rng.randint(*needles.KEY_RANGE)
        if family == "passkey":
            text = needles.passkey_prompt(key, length - GEN_TOKENS, depth, tokenizer)
        else:
            text = needle_prompt(tokenizer, haystack(rng, 8 * length), key, length - GEN_TOKENS, depth)
        rows.append({"prompt": text, "answer": str(key), "depth": round(depth, 4), "length": length})
    return rows


def task_name(family: str, length: int, loglikelihood: bool = False) -> str:
    """``attntemp_passkey_256``, ``attntemp_needle_ll_1024``, ..."""
    return f"attntemp_{family}{'_ll' if loglikelihood else ''}_{length}"


def _yaml_generate(family: str, length: int) -> str:
    return f"""{HEADER}task: {task_name(family, length)}
tag: [attntemp_{family}, attntemp_retrieval]
custom_dataset: !function attntemp_data.load
dataset_kwargs:
  file: {family}_{length}.jsonl
test_split: test
output_type: generate_until
doc_to_text: prompt
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: {GEN_TOKENS}
  do_sample: false
filter_list:
  - name: first_integer
    filter:
      - function: regex
        regex_pattern: "(\\\\d+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
  length: {length}
"""


def _yaml_loglikelihood(family: str, length: int) -> str:
    return f"""{HEADER}task: {task_name(family, length, loglikelihood=True)}
tag: [attntemp_{family}_ll, attntemp_retrieval_ll]
custom_dataset: !function attntemp_data.load
dataset_kwargs:
  file: {family}_{length}.jsonl
test_split: test
output_type: loglikelihood
doc_to_text: prompt
doc_to_target: " {{{{answer}}}}"
metric_list:
  - metric: acc
  - metric: perplexity
metadata:
  version: 1.0
  length: {length}
"""


def folder_files(tokenizer: Any, lengths: Sequence[int] = LENGTHS, n: int = DOCS, seed: int = SEED) -> dict[str, str]:
    """Every file of the task folder (name -> text) but the loader, which is copied as shipped."""
    files = {}
    for length in sorted({checks.positive_int("lengths", x) for x in lengths}):
        for family in FAMILIES:
            rows = prompt_rows(family, tokenizer, length, n, seed)
            files[f"{family}_{length}.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            files[f"{family}_{length}.yaml"] = _yaml_generate(family, length)
            files[f"{family}_ll_{length}.yaml"] = _yaml_loglikelihood(family, length)
    return files


def write_folder(
    out: str | Path, tokenizer: Any, lengths: Sequence[int] = LENGTHS, n: int = DOCS, seed: int = SEED
) -> Path:
    """Write the task folder to ``out`` (made if missing; files of the same names replaced)."""
    if not lengths:
        raise ValueError("lengths=() is not allowed; expected at least one length")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in folder_files(tokenizer, lengths, n, seed).items():
        (out / name).write_text(text, encoding="utf-8")
    loader = lm_eval_tasks_path() / LOADER
    if loader.resolve() != (out / LOADER).resolve():
        shutil.copyfile(loader, out / LOADER)
    return out


def shipped_task_names() -> list[str]:
    """The task names of the shipped folder (from its YAML file names)."""
    names = []
    for path in sorted(lm_eval_tasks_path().glob("*.yaml")):
        stem, _, length = path.stem.rpartition("_")
        names.append(f"attntemp_{stem}_{length}")
    return names
