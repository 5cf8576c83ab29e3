"""The GPU check: SmolLM2 at 16k and 32k tokens in bf16 with SDPA on CUDA, one JSON line per figure.

    python scripts/gpu_check.py --cpu-reference runs/gpu_check/cpu_reference.json   # on a GPU machine
    python scripts/gpu_check.py --write-cpu-reference runs/gpu_check/cpu_reference.json  # once, CPU fp32
    python scripts/gpu_check.py --dry-run        # the same code paths: tiny model, CPU, small lengths

Figures (``"figure"`` names the line):

- ``sdpa_kernel``: which SDPA kernel the forward runs (flash / efficient / cudnn / math), without
  and with the patch, read from the profiler's op names (``aten::_scaled_dot_product_*``);
- ``forward_time``: patched over unpatched decoder forward time, interleaved repeats, the mean of
  the per-repeat ratios with its bootstrap interval (goal <= 1.05);
- ``tail_ppl``: tail perplexity (predictions past the trained length) at the first length, against
  the CPU fp32 figure: a number (``--cpu-tail-ppl``) or a file written by ``--write-cpu-reference``
  holding the very token windows and their per-window NLL, for a paired ratio with its interval;
- ``measure``: attention statistics at the last length, seconds and peak memory
  (``torch.cuda.max_memory_allocated``, or the peak resident set on the CPU);
- ``gradient_tune``: per-head gradient tuning at the first length (``--steps``), seconds and the
  tail perplexity before and after on windows it did not train on.

Measured once per run on whatever machine runs it; nothing here is a stored result.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from attntemp.analysis.measure import measure
from attntemp.evaluate import corpus, lm
from attntemp.evaluate.tasks import EvalOptions, tail_start
from attntemp.hf import introspect
from attntemp.hf.loading import ModelOptions, load_model
from attntemp.hf.patch import patch, run_decoder
from attntemp.ops import intervals
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune.gradient import GradientOptions, run_gradient_tuning
from attntemp.tune.train import TrainOptions
from attntemp.utils.options import from_argv, ints, option, reuse

KERNELS = {  # op name fragment -> kernel (the order matters: "flash_attention_for_cpu" is flash too)
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused",
    "_scaled_dot_product_attention_math": "math",
}
DRY_RUN = {"model": "tiny", "device": "cpu", "lengths": (320, 512), "steps": 2, "docs": 2, "repeats": 2}


@dataclass(frozen=True, kw_only=True)
class GpuCheckConfig:
    """The model, where and in what precision; the lengths and sizes of the figures; the CPU reference."""

    model: str = reuse(ModelOptions, "model", "smollm2")
    device: str = reuse(ModelOptions, "device", "cuda")
    dtype: str = reuse(ModelOptions, "dtype", "bfloat16")
    lengths: tuple[int, ...] = option(
        (16384, 32768), "comma list; the first: kernels, timing, ppl, tuning; the last: measure", parse=ints
    )
    docs: int = reuse(EvalOptions, "n_docs", 4)
    repeats: int = option(5, "timed forward pairs per length")
    steps: int = option(50, "gradient tuning steps")
    text: str = reuse(EvalOptions, "text")
    cpu_tail_ppl: float | None = option(None, "the CPU fp32 tail perplexity at the first length", parse=float)
    cpu_reference: str | None = option(None, "a file from --write-cpu-reference: the same windows, paired")
    write_cpu_reference: str | None = option(None, "score the first length here and write FILE, then stop")
    dry_run: bool = option(False, "tiny model on the CPU at small lengths: the same code paths")


def emit(figure: str, **values: Any) -> dict[str, Any]:
    """Print one figure as one JSON line (and return it)."""
    line = {"figure": figure, **values}
    print(json.dumps(line), flush=True)
    return line


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kernels_of(model: Any, ids: torch.Tensor) -> list[str]:
    """The SDPA kernels one decoder forward of ``ids`` [B, L] ran, by the profiler's op names."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        run_decoder(model, ids)
    names = {e.key for e in prof.key_averages()}
    return sorted({kernel for name in names for frag, kernel in KERNELS.items() if frag in name})


def check_spec(model: Any) -> TemperatureSpec:
    """Per-head multipliers around 1 (seeded): the patch's general path, no RoPE change."""
    layers, heads = len(introspect.attention_modules(model)), introspect.text_config(model).num_attention_heads
    g = torch.Generator().manual_seed(0)
    return TemperatureSpec(heads=(0.8 + 0.4 * torch.rand(layers, heads, generator=g)).tolist())


def timed_forward(model: Any, ids: torch.Tensor) -> float:
    device = ids.device
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        run_decoder(model, ids)
    sync(device)
    return time.perf_counter() - t0


def forward_times(model: Any, ids: torch.Tensor, spec: TemperatureSpec, repeats: int) -> dict[str, Any]:
    """Interleaved unpatched / patched forwards (one warm-up each); per-repeat ratios with their interval."""
    plain, patched = [], []
    for r in range(repeats + 1):
        a = timed_forward(model, ids)
        with patch(model, spec):
            b = timed_forward(model, ids)
        if r:  # the first pair warms up kernels and allocators
            plain.append(a)
            patched.append(b)
    ratio = intervals.mean_interval([b / a for a, b in zip(plain, patched, strict=True)])
    return {
        "unpatched_s": sorted(plain)[len(plain) // 2],
        "patched_s": sorted(patched)[len(patched) // 2],
        "ratio": ratio.to_dict(),
        "goal": 1.05,
        "meets_goal": ratio.value <= 1.05,
        "repeats": repeats,
    }


def tail_nll(model: Any, ids: torch.Tensor, start: int) -> list[float]:
    """Summed NLL of the predictions at positions >= ``start``, per window of ``ids`` [n, L]."""
    with torch.no_grad():
        return [float(lm.token_nll(model, row[None].to(model.device), start).double().sum()) for row in ids]


def tail_figures(nll: list[float], tokens: int) -> dict[str, Any]:
    """Tail perplexity with its bootstrap interval over windows (the figure alone from one window)."""
    ppl = math.exp(sum(nll) / (tokens * len(nll)))
    ci = intervals.perplexity_interval(nll, [tokens] * len(nll)) if len(nll) > 1 else None
    return {"tail_ppl": ppl, "interval": ci.to_dict() if ci else "no interval (one window)"}


def reference_windows(args: GpuCheckConfig, tok: Any, length: int) -> tuple[torch.Tensor, dict | None]:
    """The windows to score: those of ``--cpu-reference`` when given (the same tokens), else held-out ones."""
    if args.cpu_reference:
        ref = json.loads(Path(args.cpu_reference).read_text())
        if ref["length"] != length:
            raise SystemExit(f"--cpu-reference {args.cpu_reference}: its length {ref['length']} is not {length}")
        return torch.tensor(ref["ids"], dtype=torch.long), ref
    return corpus.heldout_windows(tok, length, n=args.docs, docs=corpus.load_text(args.text)), None


def write_reference(args: GpuCheckConfig, path: Path) -> dict[str, Any]:
    """On the CPU in float32: score held-out windows at the first length and save them with their
    per-window tail NLL (what ``--cpu-reference`` compares against)."""
    model, tok = load_model(args.model, device="cpu", dtype="float32")
    length = args.lengths[0]
    ids = corpus.heldout_windows(tok, length, n=args.docs, docs=corpus.load_text(args.text))
    start = tail_start(length, introspect.trained_length(model))  # past L0, or the last quarter
    nll = tail_nll(model, ids, start)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    ref = {
        "model": args.model,
        "length": length,
        "start": start,
        "dtype": dtype,
        "device": "cpu",
        "tokens": length - 1 - start,
        "window_tail_nll": nll,
        "ids": ids.tolist(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ref))
    return emit("cpu_reference", path=str(path), length=length, dtype=dtype, **tail_figures(nll, ref["tokens"]))


def bare_ratio(here: float, cpu: float) -> dict[str, Any]:
    return {"value": here / cpu, "interval": "none: one window, or a reference without its windows"}


def tail_ppl(args: GpuCheckConfig, model: Any, tok: Any, length: int) -> dict[str, Any]:
    """Tail perplexity here against the CPU fp32 figure (a paired ratio when the reference has windows)."""
    ids, ref = reference_windows(args, tok, length)
    start = tail_start(length, introspect.trained_length(model))  # past L0, or the last quarter
    nll = tail_nll(model, ids, start)
    out = {"length": length, "windows": len(nll), **tail_figures(nll, length - 1 - start)}
    if ref is not None:
        cpu = math.exp(sum(ref["window_tail_nll"]) / (ref["tokens"] * len(nll)))
        tokens = [ref["tokens"]] * len(nll)
        ratio = intervals.paired_ratio_interval(nll, ref["window_tail_nll"], tokens) if len(nll) > 1 else None
        out.update(cpu_fp32=cpu, ratio=ratio.to_dict() if ratio else bare_ratio(out["tail_ppl"], cpu))
    elif args.cpu_tail_ppl is not None:
        out.update(cpu_fp32=args.cpu_tail_ppl, ratio=bare_ratio(out["tail_ppl"], args.cpu_tail_ppl))
    return emit("tail_ppl", **out)


class PeakMemory:
    """Peak memory over a block: CUDA's max allocated bytes, or the CPU's peak resident set (Linux)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current RSS
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.bytes, self.kind = torch.cuda.max_memory_allocated(self.device), "cuda_max_allocated"
        else:
            line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
            self.bytes, self.kind = int(line.split()[1]) * 1024, "cpu_peak_rss"


def measure_figure(args: GpuCheckConfig, model: Any, tok: Any, length: int) -> dict[str, Any]:
    """``measure`` on one held-out window: seconds, peak memory, mean entropy."""
    ids = corpus.heldout_windows(tok, length, n=1, docs=corpus.load_text(args.text))
    device = next(model.parameters()).device
    with PeakMemory(device) as peak:
        sync(device)
        t0 = time.perf_counter()
        stats = measure(model, ids, progress=False)
        sync(device)
        seconds = time.perf_counter() - t0
    entropy = intervals.mean_interval(stats.by_head("entropy").ravel().tolist())  # spread over heads
    return emit(
        "measure",
        length=length,
        seconds=seconds,
        peak_memory_bytes=peak.bytes,
        memory=peak.kind,
        mean_entropy_over_heads=entropy.to_dict(),
    )


def gradient_figure(args: GpuCheckConfig, model: Any, tok: Any, length: int) -> dict[str, Any]:
    """Per-head gradient tuning, ``args.steps`` steps at ``length``: seconds and tail perplexity on
    windows it did not train on (``--docs`` windows split in two: stdlib has 5 held-out documents
    of 16k SmolLM2 tokens)."""
    docs = corpus.load_text(args.text)
    n_train = max(1, args.docs // 2)
    n_eval = max(1, args.docs - n_train)
    with tempfile.TemporaryDirectory() as out:
        train = TrainOptions(steps=args.steps, progress=False)
        opts = GradientOptions(lengths=(length,), train=train, n_train=n_train, n_eval=n_eval)
        _, ev = run_gradient_tuning(model, tok, opts, out, docs=docs)
    return emit(
        "gradient_tune",
        length=length,
        steps=args.steps,
        seconds_train=ev["seconds_train"],
        seconds_total=ev["seconds"],
        tail_ppl_before=ev["tail_ppl_before"],
        tail_ppl_after=ev["tail_ppl_after"],
        loss_first=ev["loss_first"],
        loss_last=ev["loss_last"],
        note=f"{n_train} training and {n_eval} evaluation windows; figures of one run",
    )


def run_checks(args: GpuCheckConfig) -> None:
    lengths = list(args.lengths)
    model, tok = load_model(args.model, device=args.device, dtype=args.dtype)
    device = next(model.parameters()).device
    emit(
        "setup",
        model=args.model,
        device=str(device),
        dtype=str(next(model.parameters()).dtype),
        torch=torch.__version__,
        gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    )
    spec = check_spec(model)
    for length in lengths:
        ids = corpus.heldout_windows(tok, length, n=1, docs=corpus.load_text(args.text)).to(device)
        emit("sdpa_kernel", length=length, patched=False, kernels=kernels_of(model, ids))
        with patch(model, spec):
            emit("sdpa_kernel", length=length, patched=True, kernels=kernels_of(model, ids))
        emit("forward_time", length=length, **forward_times(model, ids, spec, args.repeats))
    tail_ppl(args, model, tok, lengths[0])
    measure_figure(args, model, tok, lengths[-1])
    gradient_figure(args, model, tok, lengths[0])


def parse(argv: list[str] | None = None) -> GpuCheckConfig:
    """The flags, with ``--dry-run``'s model, device and sizes in place of theirs."""
    args = from_argv(GpuCheckConfig, argv, __doc__.split("\n\n")[0])
    return replace(args, **DRY_RUN) if args.dry_run else args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.write_cpu_reference:
        write_reference(args, Path(args.write_cpu_reference))
        return 0
    if args.dry_run and not args.cpu_reference and args.cpu_tail_ppl is None:  # the reference path too
        reference = Path(tempfile.mkdtemp()) / "cpu_reference.json"
        args = replace(args, cpu_reference=str(reference))
        write_reference(args, reference)
    t0 = time.perf_counter()
    run_checks(args)
    emit("total", seconds=time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
