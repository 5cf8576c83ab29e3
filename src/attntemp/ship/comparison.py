"""attntemp's side of ``attntemp verify`` and its comparison with an engine's: the held-out
windows, the patched model's log-probabilities at llama-perplexity's scored positions, each run's
figures and the verdict; the work folder. Every engine's ``verify`` (:mod:`attntemp.ship.engines`)
builds on these.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..evaluate.corpus import heldout_windows, load_text
from ..hf.patch import patch
from ..ops.intervals import Interval, paired_ratio_interval
from ..ops.spec import TemperatureSpec
from ..utils import outputs
from ..utils.tables import markdown_table
from .engine_common import scored

KL_MAX = 1e-4  # mean KL per token, float32 weights and KV cache
RATIO_TOLERANCE = 0.005  # |engine ratio / attntemp ratio - 1|


class VerifyOptions(Protocol):
    """What an engine's verify reads of :class:`attntemp.ship.verify.VerifyConfig`."""

    @property
    def spec(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def text(self) -> str: ...
    @property
    def chunks(self) -> int: ...
    @property
    def engine_dir(self) -> str | None: ...
    @property
    def work_dir(self) -> str | None: ...

    def load_args(self, **override: Any) -> dict[str, Any]: ...

    def window_length(self, spec: TemperatureSpec, trained: int) -> int: ...


# ----------------------------------------------------------------------------- the work folder
WORK_MARK = ".attntemp-verify"  # in a --work-dir that verify made its own: the JSON list of what it wrote there


def marked(path: Path) -> set[str]:
    """The names verify listed in ``path``'s mark as its own (none for a mark that is not such a
    JSON list: one of an older attntemp, or made by hand)."""
    try:
        names = json.loads((path / WORK_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _mark(path: Path, names: set[str]) -> None:
    (path / WORK_MARK).write_text(json.dumps(sorted(names - {WORK_MARK, outputs.LOCK_NAME})) + "\n", encoding="utf-8")


def check_work_dir(work_dir: str | None) -> None:
    """A ``work_dir`` must be new, empty, or one an earlier verify used, holding only what its mark
    lists: what verify writes there (GGUF files, checkpoints, KL files) would replace a user's
    files of the same names."""
    if work_dir is None:
        return
    path = Path(work_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"work_dir={work_dir!r} is a file; expected a folder (new, empty, or an earlier verify's)")
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir() if p.name not in (WORK_MARK, outputs.LOCK_NAME))
        if not (path / WORK_MARK).exists() and found:
            raise ValueError(
                f"work_dir={work_dir!r} holds files verify did not write ({outputs.shown(found)}); expected a "
                f"new or empty folder, or one an earlier verify used (it holds {WORK_MARK})"
            )
        theirs = [name for name in found if name not in marked(path)]
        if (path / WORK_MARK).exists() and theirs:
            raise ValueError(
                f"work_dir={work_dir!r} holds files verify did not write ({outputs.shown(theirs)}): its {WORK_MARK} "
                "does not list them; expected a new or empty folder, or one holding only an earlier verify's files"
            )
    outputs.check_writable("work_dir", path)


@contextmanager
def work_folder(work_dir: str | None) -> Iterator[Path]:
    """``work_dir`` (checked by :func:`check_work_dir`, created and marked as verify's: the mark
    lists what is in it when verify leaves, also on an error), or a temporary folder removed afterwards."""
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="attntemp-verify-") as tmp:
            yield Path(tmp)
        return
    path = Path(work_dir)
    path.mkdir(parents=True, exist_ok=True)
    before = marked(path)
    _mark(path, before)
    try:
        yield path
    finally:
        _mark(path, before | {p.name for p in path.iterdir()})


# ----------------------------------------------------------------------------- specs and tokens
def baseline(spec: TemperatureSpec) -> TemperatureSpec:
    """The m = 1 twin of ``spec``: the same RoPE (YaRN's attention factor 1), no temperature."""
    rope = spec.rope.to_dict()
    if spec.rope.kind == "yarn":
        rope = {k: v for k, v in rope.items() if k not in ("mscale", "mscale_all_dim")} | {"attention_factor": 1.0}
    return TemperatureSpec(rope=rope)


def fill_l0(spec: TemperatureSpec, trained: int) -> int | None:
    """``export``'s trained_length: the model's, unless the spec's RoPE names its own L0."""
    return None if spec.rope.l0 else trained


def default_length(spec: TemperatureSpec, trained: int) -> int:
    """Tokens per window by default: the spec's RoPE s x L0, else the trained length."""
    return round(spec.rope.factor * (spec.rope.l0 or trained)) if spec.rope else trained


def windows(tokenizer: Any, text: str, length: int, chunks: int) -> torch.Tensor:
    """``[chunks, length]`` held-out token ids, BOS first (llama.cpp puts it there when its vocab adds one)."""
    docs = load_text(text, name="text")
    ids = heldout_windows(tokenizer, length, n=chunks, docs=docs, n_name="chunks").clone()  # [C, L]
    if tokenizer.bos_token_id is not None:
        ids[:, 0] = tokenizer.bos_token_id
    return ids


# ----------------------------------------------------------------------------- attntemp's side
@dataclass(frozen=True)
class EngineReference:
    """attntemp's log-probabilities on the scored positions and the summed NLL per window."""

    logp: list[torch.Tensor]  # per window [L-1-L//2, V]
    nll: tuple[float, ...]


@torch.no_grad()
def engine_reference(model: Any, spec: TemperatureSpec, ids: torch.Tensor) -> EngineReference:
    """The patched model's next-token log-probabilities at llama-perplexity's scored positions."""
    part = scored(ids.shape[1])
    rows, nll = [], []
    with patch(model, spec):
        for row in ids:  # [L]
            logits = model(row[None]).logits[0, part].double()  # [n, V]
            logp = torch.log_softmax(logits, dim=-1)  # [n, V]
            target = row[part.start + 1 : part.stop + 1]  # [n]
            rows.append(logp)
            nll.append(float(-logp.gather(1, target[:, None]).sum()))
    return EngineReference(rows, tuple(nll))


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Comparison:
    """One run (``m = 1`` or the spec) on the engine and in attntemp, on the same tokens."""

    label: str
    engine_ppl: Interval
    attntemp_ppl: Interval
    kl: Interval
    same_top: float
    engine_chunk_nll: tuple[float, ...]
    attntemp_chunk_nll: tuple[float, ...]
    command: tuple[str, ...]


@dataclass(frozen=True)
class VerifyResult:
    """Both runs, the ratios to m = 1 on each side, and the verdict against KL_MAX / RATIO_TOLERANCE."""

    engine: str
    engine_version: str
    spec: dict[str, Any]
    route: str  # "export" (flags) or "bake + convert"
    tokens: int  # scored tokens per run
    base: Comparison
    tempered: Comparison
    steps: tuple[str, ...] = field(default=())  # conversion and other commands, as run

    def ratios(self) -> tuple[Interval, Interval]:
        """Engine and attntemp perplexity ratios spec / m = 1, paired over windows."""
        per = self.tokens / len(self.base.engine_chunk_nll)
        t = [per] * len(self.base.engine_chunk_nll)
        eng = paired_ratio_interval(self.tempered.engine_chunk_nll, self.base.engine_chunk_nll, t)
        ours = paired_ratio_interval(self.tempered.attntemp_chunk_nll, self.base.attntemp_chunk_nll, t)
        return eng, ours

    def agreement(self) -> float:
        """``(engine ratio) / (attntemp ratio) - 1`` from the runs' summary perplexities."""
        eng = self.tempered.engine_ppl.value / self.base.engine_ppl.value
        ours = self.tempered.attntemp_ppl.value / self.base.attntemp_ppl.value
        return eng / ours - 1

    @property
    def passed(self) -> bool:
        kl_ok = max(self.base.kl.value, self.tempered.kl.value) <= KL_MAX
        return kl_ok and abs(self.agreement()) <= RATIO_TOLERANCE

    def table(self) -> str:
        eng, ours = self.ratios()
        table = []
        for c, r_eng, r_ours in ((self.base, None, None), (self.tempered, eng, ours)):
            ratio = (r_eng.fixed(5), r_ours.fixed(5)) if r_eng and r_ours else ("1", "1")
            kl = f"{c.kl.value + 0.0:.2e} [{max(c.kl.low, 0.0):.2e}, {c.kl.high + 0.0:.2e}]"
            table.append((c.label, c.engine_ppl.format(6), c.attntemp_ppl.format(6), *ratio, kl, f"{c.same_top:.4f}"))
        head = (
            "run",
            "engine ppl",
            "attntemp ppl",
            "engine / m=1",
            "attntemp / m=1",
            "KL(attntemp || engine)",
            "same top",
        )
        verdict = "PASS" if self.passed else "FAIL"
        return "\n".join(
            [
                f"{self.engine} ({self.engine_version}) vs attntemp, {self.tokens} scored tokens per run, {self.route}",
                markdown_table(head, table),
                f"ratio agreement (engine / attntemp - 1): {self.agreement():+.2e} (tolerance {RATIO_TOLERANCE}); "
                f"KL limit {KL_MAX:g}: {verdict}",
            ]
        )

    def markdown(self) -> str:
        """What ``attntemp verify`` prints: the table, then the result as indented JSON."""
        return f"{self.table()}\n{summary_json(self)}"

    def to_dict(self) -> dict[str, Any]:
        eng, ours = self.ratios()

        def run(c: Comparison) -> dict[str, Any]:
            return {
                "label": c.label,
                "engine_ppl": c.engine_ppl.to_dict(),
                "attntemp_ppl": c.attntemp_ppl.to_dict(),
                "kl": c.kl.to_dict(),
                "same_top": c.same_top,
                "command": list(c.command),
            }

        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "spec": self.spec,
            "route": self.route,
            "tokens": self.tokens,
            "runs": [run(self.base), run(self.tempered)],
            "engine_ratio": eng.to_dict(),
            "attntemp_ratio": ours.to_dict(),
            "agreement": self.agreement(),
            "limits": {"kl": KL_MAX, "ratio": RATIO_TOLERANCE},
            "passed": self.passed,
            "steps": list(self.steps),
        }


def summary_json(result: VerifyResult) -> str:
    """The result as ``attntemp verify`` prints it after its table: indented JSON."""
    return json.dumps(result.to_dict(), indent=2)
