"""The report: tables and plots from a sweep database and tuning evidence."""

import json
import math

import pytest

from attntemp.evaluate.sweep import Store
from attntemp.report.build import build_report
from attntemp.report.html import markdown_to_html


def fake_sweep(folder):
    store = Store(folder / "sweep.db")
    for rope in ("none", "yarn"):
        for length in (512, 1024):
            for m in (0.8, 1.0, 1.2, 1.4):
                best = 1.3 if rope == "yarn" else 1.0
                ppl = 4 + (m - best) ** 2 * length / 256
                store.add(
                    "tiny",
                    length,
                    rope,
                    m,
                    "perplexity",
                    {"ppl": ppl, "tail_ppl": ppl + 1, "tail_start": 256},
                    0.1,
                    True,
                )
                store.add(
                    "tiny", length, rope, m, "passkey", {"acc": 1 - abs(m - best), "logp": -abs(m - best)}, 0.1, True
                )
                store.add(
                    "tiny",
                    length,
                    rope,
                    m,
                    "needle",
                    {"acc": 0.5, "logp": -1.0, "depths": [0, 0.5, 1], "acc_by_depth": [0, 0.5, 1]},
                    0.1,
                    True,
                )
    store.close()


def test_report_from_sweep_and_evidence(tmp_path):
    fake_sweep(tmp_path)
    tune = tmp_path / "tune"
    tune.mkdir()
    (tune / "evidence.md").write_text("# tuning evidence: x\n\n| spec | a |\n|---|---|\n| tuned | 1 |\n")
    (tune / "entropy.json").write_text(json.dumps({"reference": [[1, 2]], "before": [[2, 3]], "after": [[1, 2]]}))
    report = build_report(tmp_path)
    md, page = report.md_path, report.page
    text = md.read_text()
    assert report.markdown() == text
    # an older database keeps no per-window values: the figures stand alone, said so
    no_ci = "no interval (fewer than 2 windows or trials)"
    row = f"| perplexity | tail_ppl | 1024 | yarn | 5.36 (no interval) | 1.2 | 5.04 (no interval) | {no_ci} | 1.296 |"
    assert row in text
    assert "| perplexity | tail_ppl | 512 | none | 5 (no interval) | 1 | 5 (no interval) | - | - |" in text  # no YaRN m
    for png in ("ppl_vs_multiplier.png", "passkey_heatmap.png", "needle_heatmap.png", "tune/entropy_shift.png"):
        assert (tmp_path / png).stat().st_size > 2000
        assert f'src="{png}"' in page.read_text()
    assert "## tuning evidence: x" in text
    # the rule of every writing command: an earlier report is replaced only with overwrite, nothing else
    (tmp_path / "notes.md").write_text("the user's")
    (tmp_path / "report.md").write_text("an earlier attntemp report")
    with pytest.raises(ValueError, match=r"already holds results \(needle_heatmap.png, passkey_heatmap.png"):
        build_report(tmp_path)
    assert (tmp_path / "report.md").read_text() == "an earlier attntemp report"
    build_report(tmp_path, overwrite=True)
    assert (tmp_path / "report.md").read_text() == text and (tmp_path / "notes.md").read_text() == "the user's"


def test_best_table_shows_intervals_and_the_paired_verdict(tmp_path):
    from attntemp.evaluate.sweep.table import best_table
    from attntemp.ops.intervals import paired_ratio_interval, perplexity_interval

    windows = {1.0: [500.0, 620.0, 410.0, 700.0], 1.2: [470.0, 600.0, 380.0, 660.0]}  # summed tail NLL
    rows = []
    for m, nll in windows.items():
        ppl = math.exp(sum(nll) / (4 * 256))
        metrics = {
            "tail_ppl": ppl,
            "ppl": ppl,
            "tail_start": 256,
            "window_tail_nll": nll,
            "window_nll": nll,
            "tail_tokens": 256,
            "tokens": 256,
            "windows_digest": "d",
        }
        rows.append({"task": "perplexity", "length": 512, "rope": "yarn", "multiplier": m, "metrics": metrics})
    table = best_table(rows, 256)
    at1 = perplexity_interval(windows[1.0], [256] * 4).format()
    ratio = paired_ratio_interval(windows[1.2], windows[1.0], [256] * 4)
    assert ratio.high < 1  # every window is better at m = 1.2
    assert f"| {at1} | 1.2 |" in table and f"{ratio.fixed(4)} better" in table


def test_best_table_names_no_best_m_when_every_m_scores_the_same():
    """Passkey accuracy 0 at every m: no best m (not the first grid point); YaRN's m on YaRN rows only."""
    from attntemp.evaluate.sweep.table import best_table

    rows = [
        {
            "task": "passkey",
            "length": 1024,
            "rope": rope,
            "multiplier": m,
            "metrics": {"acc": 0.0, "logp": -5.0 - m, "hits": [0] * 10, "logps": [-5.0 - m] * 10},
        }
        for rope in ("none", "yarn")
        for m in (0.8, 1.0, 1.2)
    ]
    table = best_table(rows, 256)
    none_row = next(line for line in table.splitlines() if "| passkey | acc | 1024 | none |" in line)
    yarn_row = next(line for line in table.splitlines() if "| passkey | acc | 1024 | yarn |" in line)
    assert "none (equal at every m)" in none_row and none_row.endswith("| - |")
    assert "none (equal at every m)" in yarn_row and yarn_row.endswith("| 1.296 |")


def test_report_refuses_an_empty_or_missing_folder(tmp_path):
    with pytest.raises(ValueError, match=r"no sweep\.db and no evidence\.md"):
        build_report(tmp_path)
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path / "missing")


def test_markdown_to_html_escapes():
    page = markdown_to_html("# a <b>\n\n| x | y |\n|---|---|\n| <1> | 2 |\n", "t")
    assert "<h1>a &lt;b&gt;</h1>" in page and "<td>&lt;1&gt;</td>" in page


@pytest.mark.parametrize(
    ("md", "shown"),
    [
        ("<script>x</script>", "<p>&lt;script&gt;x&lt;/script&gt;</p>"),  # a raw block: text
        ("a <span>b</span> < c", "<p>a &lt;span&gt;b&lt;/span&gt; &lt; c</p>"),  # inline: text
        ("```\n# m = 1 <x> & y\n{}\n```", "<pre><code># m = 1 &lt;x&gt; &amp; y\n{}\n</code></pre>"),  # code
    ],
)
def test_markdown_to_html_shows_raw_html_and_code_as_text_once(md, shown):
    page = markdown_to_html(md, "t")
    assert shown in page and "<h1>" not in page
