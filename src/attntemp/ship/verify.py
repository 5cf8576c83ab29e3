"""``attntemp verify``: run an engine with exactly what ``export`` (or ``bake`` + conversion) ships
and compare it with attntemp's patched model on the same tokens.

Two runs per engine, each against attntemp's patched model on the same held-out windows: the
spec, and its m = 1 twin (the same RoPE, YaRN's attention factor 1, no temperature). A global spec
runs the original model with the export's flags; a per-layer or per-head spec is baked
(``attntemp bake``), converted with the build's ``convert_hf_to_gguf.py`` in float32, and run with
the flags of the RoPE the baked config carries. Reported: each side's perplexity over the scored
tokens, each side's ratio to its own m = 1 run (the temperature's effect, which must agree) and
the mean KL(attntemp || engine) per token (which must be ~0 in float32).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..evaluate.corpus import heldout_windows, load_text
from ..hf import loading, preflight
from ..hf.introspect import text_config
from ..hf.loading import ModelOptions
from ..hf.patch import patch
from ..ops.intervals import Interval, paired_ratio_interval, perplexity_interval
from ..ops.spec import TemperatureSpec
from ..utils import checks, outputs
from ..utils.options import option
from ..utils.tables import markdown_table
from . import llamacpp
from .bake import save_baked
from .export import export, global_multiplier

VERIFIED_ENGINES = ("llama.cpp", "vllm")
KL_MAX = 1e-4  # mean KL per token, float32 weights and KV cache
RATIO_TOLERANCE = 0.005  # |engine ratio / attntemp ratio - 1|


@dataclass(frozen=True, kw_only=True)
class VerifyConfig(ModelOptions):
    """``attntemp verify`` and :func:`attntemp.ship.verify_runner.run_verify`."""

    engine: str = option(help=f"the engine to run: {', '.join(VERIFIED_ENGINES)}")
    spec: str = option(help="a TemperatureSpec JSON file")
    text: str = option("stdlib", "held-out text: stdlib, gutenberg:<book>, a file or a folder")
    length: int | None = option(
        None, "tokens per window (default: the spec's RoPE s * L0, else the trained length)", parse=int
    )
    chunks: int = option(2, "windows (held-out documents), each scored over its second half as llama-perplexity does")
    engine_dir: str | None = option(None, "folder of the engine build (default: PATH, then ~/.cache/attntemp/engines)")
    work_dir: str | None = option(None, "where the GGUF files, baked checkpoints and KL files go (default: a temp dir)")

    def __post_init__(self) -> None:
        checks.choice("engine", self.engine, VERIFIED_ENGINES)
        checks.positive_int("chunks", self.chunks)
        if self.length is not None and checks.positive_int("length", self.length) < 4:
            raise ValueError(f"length={self.length} is not allowed; expected >= 4")
        if self.dtype not in (None, "float32"):
            raise ValueError(f"dtype={self.dtype!r} is not allowed; verify compares float32 models")

    def window_length(self, spec: TemperatureSpec, trained: int) -> int:
        """Tokens per window: ``length``, else the spec's RoPE s x L0, else the trained length."""
        return self.length or default_length(spec, trained)


# ----------------------------------------------------------------------------- before any work
WORK_MARK = ".attntemp-verify"  # in a --work-dir that verify made its own


def check_work_dir(work_dir: str | None) -> None:
    """A ``work_dir`` must be new, empty, or one an earlier verify used: what verify writes there
    (GGUF files, checkpoints, KL files) would replace a user's files of the same names."""
    if work_dir is None:
        return
    path = Path(work_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"work_dir={work_dir!r} is a file; expected a folder (new, empty, or an earlier verify's)")
    if path.is_dir() and not (path / WORK_MARK).exists():
        found = sorted(p.name for p in path.iterdir())
        if found:
            raise ValueError(
                f"work_dir={work_dir!r} holds files verify did not write ({outputs.shown(found)}); expected a "
                f"new or empty folder, or one an earlier verify used (it holds {WORK_MARK})"
            )
    outputs.check_writable("work_dir", path)


@contextmanager
def work_folder(work_dir: str | None) -> Iterator[Path]:
    """``work_dir`` (checked by :func:`check_work_dir`, created and marked as verify's), or a
    temporary folder removed afterwards."""
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="attntemp-verify-") as tmp:
            yield Path(tmp)
        return
    path = Path(work_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / WORK_MARK).touch()
    yield path


def check_size(cfg: VerifyConfig, spec: TemperatureSpec) -> None:
    """Refuse ``chunks x length`` when attntemp's own forward over the windows would not fit."""
    config = preflight.source_config(cfg.model)  # its text part, or None before a first download
    if config is None:
        return
    trained = config.get("max_position_embeddings")
    length = cfg.window_length(spec, trained) if isinstance(trained, int) else cfg.length
    if length is not None:
        preflight.check_forward("length", length, config, cfg.chunks, length)


# ----------------------------------------------------------------------------- specs and tokens
def baseline(spec: TemperatureSpec) -> TemperatureSpec:
    """The m = 1 twin of ``spec``: the same RoPE (YaRN's attention factor 1), no temperature."""
    rope = dict(spec.rope)
    if rope.get("rope_type") == "yarn":
        rope = {k: v for k, v in rope.items() if k not in ("mscale", "mscale_all_dim")} | {"attention_factor": 1.0}
    return TemperatureSpec(rope=rope)


def is_global(spec: TemperatureSpec, engine: str) -> bool:
    """True when ``export`` can ship the spec as flags; False when it must be baked first."""
    try:
        global_multiplier(spec, engine)
    except ValueError:
        if spec.position_dependent:
            raise
        return False
    return True


def fill_l0(spec: TemperatureSpec, trained: int) -> int | None:
    """``export``'s trained_length: the model's, unless the spec's RoPE names its own L0."""
    return None if dict(spec.rope).get("original_max_position_embeddings") else trained


def default_length(spec: TemperatureSpec, trained: int) -> int:
    rope = dict(spec.rope)
    l0 = int(rope.get("original_max_position_embeddings") or trained)
    return round(float(rope["factor"]) * l0) if rope.get("factor") else trained


def windows(tokenizer: Any, text: str, length: int, chunks: int) -> torch.Tensor:
    """``[chunks, length]`` held-out token ids, BOS first (llama.cpp puts it there when its vocab adds one)."""
    docs = load_text(text, name="text")
    ids = heldout_windows(tokenizer, length, n=chunks, docs=docs, n_name="chunks").clone()  # [C, L]
    if tokenizer.bos_token_id is not None:
        ids[:, 0] = tokenizer.bos_token_id
    return ids


# ----------------------------------------------------------------------------- attntemp's side
@dataclass(frozen=True)
class Reference:
    """attntemp's log-probabilities on the scored positions and the summed NLL per window."""

    logp: list[torch.Tensor]  # per window [L-1-L//2, V]
    nll: tuple[float, ...]


@torch.no_grad()
def reference(model: Any, spec: TemperatureSpec, ids: torch.Tensor) -> Reference:
    """The patched model's next-token log-probabilities at llama-perplexity's scored positions."""
    part = llamacpp.scored(ids.shape[1])
    rows, nll = [], []
    with patch(model, spec):
        for row in ids:  # [L]
            logits = model(row[None]).logits[0, part].double()  # [n, V]
            logp = torch.log_softmax(logits, dim=-1)  # [n, V]
            target = row[part.start + 1 : part.stop + 1]  # [n]
            rows.append(logp)
            nll.append(float(-logp.gather(1, target[:, None]).sum()))
    return Reference(rows, tuple(nll))


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


# ----------------------------------------------------------------------------- llama.cpp
def _weights_key(folder: Path) -> str:
    """A cache key of a checkpoint folder: its path and its files' sizes and times."""
    h = hashlib.sha256(str(folder.resolve()).encode())
    for p in sorted(folder.iterdir()):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def original_gguf(llama: llamacpp.LlamaCpp, folder: Path) -> tuple[Path, list[str]]:
    """The float32 GGUF of an unmodified checkpoint, converted once into the engines cache (and the
    command that converted it, empty when it was there already)."""
    if llama.convert is None:
        raise FileNotFoundError(f"no convert_hf_to_gguf.py beside {llama.perplexity}; pass --engine-dir of a build")
    out = llamacpp.engines_cache() / "gguf" / f"{folder.name}-{_weights_key(folder)}-f32.gguf"
    if out.is_file():
        return out, []
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.gguf")
    cmd = llamacpp.convert(llama.convert, folder, tmp)
    tmp.rename(out)
    return out, cmd


def _compare(label, llama, gguf, args, ids, ref: Reference, work: Path, threads) -> Comparison:
    chunks, length = ids.shape
    base = llamacpp.write_base(work / f"{label}.kld", ids, ref.logp)
    cmd = llamacpp.kl_command(llama, gguf, base, length, tuple(args), threads)
    run = llamacpp.run_kl(cmd, length)
    per = [float(length - 1 - length // 2)] * chunks
    ours = perplexity_interval(ref.nll, per)
    return Comparison(label, run.ppl, ours, run.kl, run.same_top, run.chunk_nll, ref.nll, run.command)


def _tempered(
    spec: TemperatureSpec, model: Any, tok: Any, llama: llamacpp.LlamaCpp, gguf: Path, work: Path, export_args: Any
) -> tuple[str, Path, tuple[str, ...], list[str]]:
    """The spec's route: the export's flags on the original GGUF, or bake + convert + the baked RoPE's flags."""
    if is_global(spec, "llama.cpp"):
        return "export", gguf, export_args(spec), []
    save_baked(model, tok, spec, work / "baked", overwrite=True)  # folds the spec into model in place
    out = work / "baked-f32.gguf"
    cmd = llamacpp.convert(llama.convert or Path("convert_hf_to_gguf.py"), work / "baked", out)
    return "bake + convert", with_factors(spec, out, work), export_args(TemperatureSpec(rope=dict(spec.rope))), cmd


def with_factors(spec: TemperatureSpec, gguf: Path, work: Path) -> Path:
    """``gguf``, or for a longrope spec a copy carrying its long_factor as the ``rope_freqs`` tensor."""
    rope = dict(spec.rope)
    if rope.get("rope_type") != "longrope":
        return gguf
    return llamacpp.with_rope_freqs(gguf, rope["long_factor"], work / f"{gguf.stem}-rope_freqs.gguf")


def llamacpp_run(
    cfg: VerifyConfig, spec: TemperatureSpec, llama: llamacpp.LlamaCpp, model: Any, tok: Any, work: Path
) -> VerifyResult:
    folder = Path(loading.resolve(cfg.model))
    trained = int(text_config(model).max_position_embeddings)
    length = cfg.window_length(spec, trained)
    scored = length - 1 - length // 2
    if scored * cfg.chunks < 100:
        raise ValueError(f"length={length} with chunks={cfg.chunks} scores {scored * cfg.chunks} tokens; need >= 100")
    ids = windows(tok, cfg.text, length, cfg.chunks)  # [C, L]
    base_spec = baseline(spec)
    refs = {"m = 1": reference(model, base_spec, ids), "spec": reference(model, spec, ids)}
    original, convert_cmd = original_gguf(llama, folder)
    arch = llamacpp.gguf_architecture(original)
    gguf = with_factors(spec, original, work)  # both runs: the same per-frequency factors

    def export_args(s: TemperatureSpec) -> tuple[str, ...]:
        return export(s, "llama.cpp", trained_length=fill_l0(s, trained), gguf_arch=arch).args

    route, tempered_gguf, args, bake_cmd = _tempered(spec, model, tok, llama, gguf, work, export_args)
    runs = [
        _compare(label, llama, g, a, ids, refs[label], work, cfg.threads)
        for label, g, a in (("m = 1", gguf, export_args(base_spec)), ("spec", tempered_gguf, args))
    ]
    steps = tuple(" ".join(c) for c in (convert_cmd, bake_cmd) if c)
    total = len(ids) * scored
    return VerifyResult("llama.cpp", llamacpp.version(llama), spec.to_dict(), route, total, runs[0], runs[1], steps)


def summary_json(result: VerifyResult) -> str:
    return json.dumps(result.to_dict(), indent=2)
