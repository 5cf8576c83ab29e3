"""Every figure on small synthetic data: integer ticks for layers and heads, plain numbers on the m
and log axes, one fixed colour per RoPE method, legends, colour-bar ranges, intervals drawn, files
written."""

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib import colors
from matplotlib.collections import PolyCollection

from attntemp.analysis import plots, style
from attntemp.analysis.measure import AttentionStats
from attntemp.ops.attention_stats import STATS
from attntemp.report import figures
from attntemp.tune.evidence import M_ONE, TUNED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, drawn (tick labels filled in) before they are closed."""
    found = []
    real = style.save

    def keep(fig, path):
        fig.canvas.draw()
        found.append(fig)
        out = real(fig, path)
        assert out.stat().st_size > 2000  # the file is written
        return out

    monkeypatch.setattr(style, "save", keep)
    return found


def labels(ax, axis="x"):
    """The tick labels inside the axes' view."""
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    pos = ax.get_xticks() if axis == "x" else ax.get_yticks()
    return [t.get_text() for t, p in zip(ticks, pos, strict=True) if lo <= p <= hi]


def plain_numbers(texts):
    """Every label a plain decimal number (no 10^x, no scientific notation, no mathtext)."""
    return bool(texts) and all(t and "$" not in t and "^" not in t and "e" not in t and float(t) >= 0 for t in texts)


def integers(texts):
    return bool(texts) and all(t.lstrip("-−").isdigit() for t in texts)


def stats(layers=3, heads=5, length=512, trained=128, seed=0):
    rng = np.random.default_rng(seed)
    edges = [round(i * length / 8) for i in range(9)]
    st = {s: rng.uniform(0.05, 0.9, (layers, heads, 8)) for s in STATS}
    st["entropy"] = rng.uniform(1, 4, (layers, heads, 8)) + np.linspace(0, 1, 8)
    return AttentionStats(st, edges, length, 4, 64, {"trained_length": trained, "batch": 1})


def test_palette_is_fixed_and_complete():
    for rope in ("none", "linear", "yarn", "dynamic", "ntk", "longrope", "llama3"):
        assert style.rope_color(rope) == style.ROPE_COLORS[rope]
    assert len(set(style.ROPE_COLORS.values())) == len(style.ROPE_COLORS)
    assert style.rope_color("made-up") == style.rope_color("made-up") in style.OTHER_COLORS
    assert style.rope_order(["yarn", "zz", "none", "linear"]) == ["none", "linear", "yarn", "zz"]


def test_log_ticks_are_plain_and_cover_the_range():
    assert style.log_ticks(4, 70) == [5, 10, 20, 50]
    assert style.log_ticks(90, 150) == [100, 120, 140]  # finer than 1-2-5 within one decade
    assert style.log_ticks(5.2, 7.9) == [6, 7]
    assert [style.plain(t) for t in (20, 0.5, 1.3, 100)] == ["20", "0.5", "1.3", "100"]
    with pytest.raises(ValueError, match="log axis range"):
        style.log_ticks(0, 1)


def test_multiplier_ticks_show_the_data_range():
    ticks = style.multiplier_ticks(0.18, 3.2, [0.18, 3.2])
    assert ticks[0] == 0.18 and ticks[-1] == 3.2 and 1.0 in ticks
    assert all(b / a > 1.12 for a, b in itertools.pairwise(ticks))
    norm = style.multiplier_norm(np.array([0.18, 1.0, 3.2]))
    assert math.isclose(norm(1.0), 0.5) and math.isclose(norm.vmin * norm.vmax, 1.0)


def test_measure_plots_tick_layers_and_heads_as_integers(tmp_path, drawn):
    s = stats()
    plots.save_all(s, tmp_path)
    heat, pos, sink = (f.axes[0] for f in drawn)
    assert integers(labels(heat, "x")) and integers(labels(heat, "y"))
    assert integers(labels(sink, "x"))
    assert len(heat.texts) == 15  # every cell labelled with its value
    legend = [t.get_text() for t in pos.get_legend().get_texts()]
    assert "trained length L0 = 128" in legend and "layer 0" in legend
    line = next(ln for ln in pos.get_lines() if ln.get_label() == "trained length L0 = 128")
    assert line.get_color() == "black" and line.get_linestyle() == "--"


def test_learned_multiplier_colour_bar_shows_its_range(tmp_path, drawn):
    table = np.array([[0.18, 1.0, 1.5], [2.0, 3.2, 0.9]])
    plots.multiplier_heatmap(table, tmp_path / "m.png", "learned")
    fig = drawn[0]
    ax, bar = fig.axes
    assert isinstance(ax.images[0].norm, colors.LogNorm)
    ticks = [t.get_text() for t in bar.get_yticklabels()]
    assert {"0.18", "1", "3.2"} <= set(ticks)
    assert bar.get_ylim() == pytest.approx((0.18, 3.2))
    assert {t.get_text() for t in ax.texts} >= {"0.18", "3.20"}
    assert integers(labels(ax, "x")) and integers(labels(ax, "y"))


def test_many_layers_below_l0_draw_no_empty_legend(tmp_path, drawn):
    """30 layers (SmolLM2) get a colour bar, not a legend; measured below L0 nothing else is
    labelled, and an empty legend was matplotlib's "No artists with labels" warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.by_position(stats(layers=30, length=512, trained=8192), tmp_path / "p.png", "entropy", 8192)
    ax = drawn[0].axes[0]
    assert ax.get_legend() is None and drawn[0].axes[1].get_ylabel() == "layer"
    plots.by_position(stats(layers=30, length=512, trained=128), tmp_path / "q.png", "entropy", 128)
    legend = [t.get_text() for t in drawn[1].axes[0].get_legend().get_texts()]
    assert legend == ["trained length L0 = 128"]


def test_learned_slopes_are_drawn_with_their_own_colour_bar(tmp_path, drawn):
    m = np.ones((2, 3))  # log_length_slope: m = 1 up to L0, the slopes are what was learned
    b = np.array([[0.5, -0.45, 0.1], [0.0, 0.3, -0.2]])
    plots.slope_heatmap(m, b, tmp_path / "s.png", "learned log_length_slope")
    fig = drawn[0]
    left, right = fig.axes[0], fig.axes[1]
    assert {t.get_text() for t in right.texts} >= {"0.50", "-0.45", "0.10", "-0.20"}
    assert {t.get_text() for t in left.texts} == {"1.00"}
    bars = [ax for ax in fig.axes[2:] if ax.get_ylabel()]
    assert [ax.get_ylabel() for ax in bars][-1] == "slope b of ln m per ln(n / L0)"
    assert right.images[0].norm.vmin == pytest.approx(-0.5) and right.images[0].norm.vmax == pytest.approx(0.5)


def ppl_rows(ropes=("none", "yarn"), lengths=(512, 1024), best=None):
    """Sweep rows whose tail perplexity is lowest at ``best[rope]``, with per-window values."""
    best = best or {"none": 0.8, "yarn": 1.3}
    rng = np.random.default_rng(0)
    base = rng.uniform(500, 700, 6)  # summed tail NLL per window
    rows = []
    for rope in ropes:
        for length in lengths:
            for m in (0.7, 0.8, 1.0, 1.2, 1.3, 1.5):
                nll = (base * (1 + (m - best[rope]) ** 2) * (2.0 if rope == "none" else 1.0)).tolist()
                ppl = math.exp(sum(nll) / (6 * 256))
                metrics = {"tail_ppl": ppl, "window_tail_nll": nll, "tail_tokens": 256, "windows_digest": "d"}
                rows.append({"task": "perplexity", "length": length, "rope": rope, "multiplier": m, "metrics": metrics})
    return rows


def test_metric_vs_multiplier_marks_best_m_and_yarn(tmp_path, drawn):
    figures.plot_metric_vs_multiplier(ppl_rows(), "perplexity", "tail_ppl", 256, tmp_path / "p.png")
    fig = drawn[0]
    top, bottom = fig.axes[0], fig.axes[2]  # the first column: L = 512
    assert top.get_yscale() == "log" and plain_numbers(labels(top, "y"))
    assert plain_numbers(labels(bottom, "x")) and plain_numbers(labels(bottom, "y"))
    for rope in ("none", "yarn"):
        curve = next(ln for ln in top.get_lines() if ln.get_label() == rope)
        assert colors.to_hex(curve.get_color()) == colors.to_hex(style.ROPE_COLORS[rope])
    texts = [t.get_text() for t in bottom.get_legend().get_texts()]
    assert any(t.startswith("yarn best:") and "at m = 1.3" in t and "vs m = 1: 0." in t for t in texts)
    assert any(t.startswith("YaRN's m = (0.1 ln s + 1)^2 = 1.143") for t in texts)
    assert sum(isinstance(c, PolyCollection) for c in top.collections) == 2  # a 95% band per curve
    assert sum(isinstance(c, PolyCollection) for c in bottom.collections) == 2  # paired bands
    lo, hi = bottom.get_ylim()
    ratio = [ln for ln in bottom.get_lines() if ln.get_marker() == "*"]
    assert all(lo <= float(r.get_ydata()[0]) <= hi for r in ratio)  # every best point shows
    assert "95% intervals, bootstrap over windows" in fig.texts[0].get_text()


def test_passkey_heatmap_annotates_cells_and_shows_no_data(tmp_path, drawn):
    rows = []
    for rope in ("none", "yarn"):
        for length, m, hits in ((256, 1.0, [1, 1, 0, 1]), (512, 1.0, [0, 0, 0, 0]), (512, 1.2, [1, 0, 1, 1])):
            metrics = {"acc": sum(hits) / 4, "logp": -1.0, "hits": hits}
            rows.append({"task": "passkey", "length": length, "rope": rope, "multiplier": m, "metrics": metrics})
    figures.plot_heatmap_grid(rows, "passkey", "acc", tmp_path / "k.png")
    fig = drawn[0]
    none, yarn = fig.axes[:2]
    assert none.title.get_color() == style.ROPE_COLORS["none"] and yarn.title.get_color() == style.ROPE_COLORS["yarn"]
    # cells: accuracy in % over its Wilson interval; (256, m = 1.2) was never run
    assert sorted(t.get_text() for t in yarn.texts) == ["0\n0-49", "75\n30-95", "75\n30-95", "no data"]
    bar = fig.axes[-1]
    assert bar.get_ylabel() == "passkey accuracy (%)" and bar.get_ylim() == (0, 100)
    assert labels(yarn, "x") == ["1", "1.2"] and labels(yarn, "y") == ["256", "512"]


def test_entropy_shift_shows_multipliers_and_the_change(tmp_path, drawn):
    ref = np.array([[2.0, 3.0, 1.0], [2.5, 2.0, 3.5]])
    info = {"target": "entropy", "reference": ref, "before": ref + 0.8, "after": ref + 1e-4}
    m = np.array([[1.4, 1.6, 1.2], [1.5, 2.1, 1.3]])
    figures.plot_entropy_shift(info, tmp_path / "s.png", "t", m)
    fig = drawn[0]
    before, mults, change = (ax for ax in fig.axes if ax.get_label() != "<colorbar>")
    assert "multipliers" in mults.get_title() and isinstance(mults.images[0].norm, colors.LogNorm)
    assert {t.get_text() for t in change.texts} == {"-0.80"}  # the change is drawn, not a grey panel
    assert {t.get_text() for t in before.texts} == {"+0.80"}
    assert "within 1.0e-04 nats of its target" in fig.texts[0].get_text()
    assert integers(labels(before, "x")) and integers(labels(mults, "y"))


def test_entropy_by_position_colours_ropes_and_draws_bands(tmp_path, drawn):
    runs = {(n, rope): [stats(length=n, seed=i) for i in range(3)] for n in (256, 512) for rope in ("none", "yarn")}
    figures.plot_entropy_by_position(runs, 128, tmp_path / "e.png")
    ax = drawn[0].axes[0]
    colours = {colors.to_hex(ln.get_color()) for ln in ax.get_lines() if ln.get_marker() in ("o", "s")}
    assert colours == {style.ROPE_COLORS["none"], style.ROPE_COLORS["yarn"]}
    assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 4  # one band per run
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["rope none", "rope yarn", "L = 256", "L = 512", "trained length L0 = 128"]
    assert plain_numbers(labels(ax, "x"))
    assert "95% interval over 3 documents" in ax.get_title()


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_trust_plot_legend_and_rope_colours(tmp_path, drawn):
    trust = load_script("trust_table")

    def scored(gain):
        base = [600.0, 650.0, 700.0]
        res = {
            name: {
                "perplexity": {
                    "tail_ppl": 1.0,
                    "window_tail_nll": [v * g for v in base],
                    "tail_tokens": 256,
                    "windows_digest": "d",
                }
            }
            for name, g in ((M_ONE, 1.0), (TUNED, gain))
        }
        return {"results": res}

    rows = [
        {
            "rope": rope,
            "method": f"method {i}",
            "evidence": {
                **scored(0.9),
                "checks": {256: scored(1.0), 2048: scored(0.95)},
                "heldout": {**scored(0.97), "checks": {256: scored(1.0), 2048: scored(1.02)}},
            },
        }
        for rope in ("none", "yarn")
        for i in range(2)
    ]
    args = type("Args", (), {"length": 1024, "checks": [256, 2048], "docs": 3, "heldout_text": "package:markdown"})()
    trust.plot(rows, args, tmp_path / "t.png")
    fig = drawn[0]
    colours = [style.ROPE_COLORS["none"], style.ROPE_COLORS["yarn"]]
    assert [ax.title.get_color() for ax in fig.axes] == colours * 2  # a row of panels per text
    assert [ax.get_title().split(", on ")[1].split(" ")[0] for ax in fig.axes[::2]] == ["stdlib,", "package:markdown,"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        "m = 1 (no change)",
        "256 tokens (trained length)",
        "1024 tokens (4x, tuned here)",
        "2048 tokens (8x)",
    ]
    assert plain_numbers(labels(fig.axes[0], "x"))


def test_reliability_diagram_draws_wilson_intervals(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from attntemp.logits import calibration

    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(2000, 5, generator=g), -1)  # [N, 5]
    y = torch.randint(0, 5, (2000,), generator=g)
    fig, ax = plt.subplots()
    calibration._draw_panel(ax, calibration.reliability_bins(p, y, 10), "t")
    bars = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    low = bars.lines[2][0].get_segments()  # one vertical segment per non-empty bin
    acc, _, count = calibration.reliability_bins(p, y, 10)
    assert len(low) == int((count > 0).sum())
    assert all(seg[0][1] <= a <= seg[1][1] for seg, a in zip(low, acc[count > 0].tolist(), strict=True))
    assert "95% Wilson interval" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    assert calibration.reliability_diagram(p, y, tmp_path / "r.png").stat().st_size > 2000
