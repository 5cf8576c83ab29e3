"""Markdown to a standalone HTML page, rendered by Python-Markdown (tables and fenced code): the
report's tables, headings, images, paragraphs and code blocks (an engine's settings), with a small
stylesheet and nothing else."""

from __future__ import annotations

import html

import markdown

# Fits a 1280 px window: the text column is at most 1100 px; a table wider than it scrolls inside
# its own box (each <table> wrapped in a div.table), a long word or setting in a cell wraps, a code
# block scrolls inside its box, images shrink to the column.
STYLE = (
    "html{-webkit-text-size-adjust:100%}"
    "body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px;overflow-wrap:break-word}"
    "div.table{max-width:100%;overflow-x:auto;margin:1em 0}"
    "table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;vertical-align:top;"
    "overflow-wrap:anywhere;min-width:5em}"
    "pre{max-width:100%;overflow-x:auto;background:#f6f6f6;padding:6px}"
    "code{overflow-wrap:anywhere}pre code{overflow-wrap:normal;white-space:pre}"
    "img{max-width:100%;height:auto}"
)


def markdown_to_html(md: str, title: str) -> str:
    """``md`` as a complete HTML document titled ``title``. Raw HTML in ``md`` is shown as text
    (Python-Markdown's raw-HTML readers removed, so the renderer escapes it once, in code blocks
    too): a report's strings are data, never markup."""
    renderer = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    renderer.preprocessors.deregister("html_block")
    renderer.inlinePatterns.deregister("html")
    body = renderer.convert(md)
    # every table in a box of its own that scrolls sideways (raw HTML in md is escaped: these tags are the renderer's)
    body = body.replace("<table>", '<div class="table"><table>').replace("</table>", "</table></div>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )
