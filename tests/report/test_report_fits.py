"""Issue 50, item 4: a report page fits a 1280 px window. A table wider than the text column scrolls
inside its own box, a long cell wraps, a code block scrolls inside its box, an image shrinks to the
column; checked in headless Chromium by :func:`browser.overflow`, which must also see the overflow
of the same page without the stylesheet (so the check can fail).

Needs Debian's `chromium` (`apt-get install chromium`); the browser tests are skipped, saying so,
where no Chromium binary is found.
"""

import re
import struct

import matplotlib
import pytest
from browser import CHROMIUM, overflow
from test_report import fake_sweep

from attntemp.report.build import build_report
from attntemp.report.html import markdown_to_html

matplotlib.use("Agg")

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary found (apt-get install chromium)")
COLUMNS = 24


def wide_markdown() -> str:
    """A report at its worst: a 24-column table, a cell of one 400-character word, engine settings
    and a path without spaces in a cell, a long code line, a long word in a paragraph, an image
    3000 px wide."""
    head = "| " + " | ".join(f"column number {i}" for i in range(COLUMNS)) + " |"
    rows = [
        head,
        "|" + "---|" * COLUMNS,
        "| " + " | ".join(f"{i * 1.2345:.4f}" for i in range(COLUMNS)) + " |",
        "| " + "x" * 400 + " | " + " | ".join("a" for _ in range(COLUMNS - 1)) + " |",
    ]
    setting = '`rope_scaling={"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":256}`'
    settings = [
        "| candidate | engine settings | note |",
        "|---|---|---|",
        f"| YaRN s = 2, m = 1.143 | {setting * 3} | {'a long note ' * 40}|",
        f"| a path | /a/very/long/path/{'segment/' * 60} | x |",
    ]
    return "\n".join(
        [
            "# A wide report",
            "",
            "Some text.",
            "",
            *settings,
            "",
            *rows,
            "",
            "```",
            "code " * 300,
            "```",
            "",
            "A paragraph with a long word " + "y" * 400,
            "",
            "![wide](wide.png)",
            "",
        ]
    )


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_every_table_is_in_a_box_of_its_own():
    page = markdown_to_html(wide_markdown(), "wide")
    assert page.count('<div class="table"><table>') == 2 and page.count("</table></div>") == 2
    assert "overflow-x:auto" in page and "img{max-width:100%" in page


@needs_chromium
def test_a_wide_page_fits_1280_px_and_fails_without_the_stylesheet(tmp_path):
    import matplotlib.pyplot as plt

    plt.imsave(tmp_path / "wide.png", [[0.0, 1.0] * 1500] * 40)  # 3000 x 40 px
    page = tmp_path / "wide.html"
    page.write_text(markdown_to_html(wide_markdown(), "wide"))
    fits = overflow(page)
    assert not fits["overflows"], fits
    assert fits["inner_width"] == 1280 and fits["scroll_width"] <= fits["client_width"] and not fits["offenders"]
    # only the 24-column table scrolls in its box: the settings table's long cells wrap instead
    assert sorted(fits["scrolling_boxes"]) == ["div", "pre"], fits["scrolling_boxes"]
    assert _png_size(tmp_path / "wide-1280px.png") == (1280, 900) and fits["screenshot"].endswith("wide-1280px.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wide-1280px.png", "wide.html", "wide.png"]

    bare = tmp_path / "bare.html"  # the same page without its stylesheet: the check must see it overflow
    bare.write_text(re.sub(r"<style>.*?</style>", "", page.read_text(), flags=re.S))
    broken = overflow(bare)
    assert broken["overflows"] and broken["scroll_width"] > 2000, broken
    stuck_out = [(o["tag"], o["text"][:20]) for o in broken["offenders"]]  # the outermost elements, with their text
    for seen in (("div", "column number 0 colu"), ("pre", "code code code code "), ("p", "A paragraph with a l"),
                 ("p", "")):  # fmt: skip
        assert seen in stuck_out, stuck_out  # the 24-column table, the code, the long word, the image


@needs_chromium
def test_the_sweep_report_fits_1280_px(tmp_path):
    fake_sweep(tmp_path)
    fits = overflow(build_report(tmp_path).page)
    assert not fits["overflows"], fits
