"""lm-eval dataset loader of attntemp's task folder: ``custom_dataset: !function attntemp_data.load``.

lm-eval calls ``load(**metadata, **dataset_kwargs)``; ``file`` (from ``dataset_kwargs``) names a
JSONL file next to this one, read without the network or the datasets cache. Everything else lm-eval
passes (the task's metadata, model arguments) is ignored. Imports nothing from attntemp, so lm-eval's
own CLI can load it: ``lm_eval --include_path <this folder> --tasks attntemp_passkey_256 ...``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load(file: str, **_: Any) -> Any:
    """``DatasetDict({"test": rows of HERE/file})``."""
    import datasets

    path = Path(__file__).with_name(file)
    if path.parent != Path(__file__).parent or not path.is_file():
        raise FileNotFoundError(f"dataset_kwargs.file={file!r}: no such file next to {Path(__file__).name}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
