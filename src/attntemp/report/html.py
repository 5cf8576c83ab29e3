"""Markdown to a standalone HTML page, rendered by Python-Markdown (tables and fenced code): the
report's tables, headings, images, paragraphs and code blocks (an engine's settings), with a small
stylesheet and nothing else."""

from __future__ import annotations

import html

import markdown

STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}img{max-width:100%}"
)


def markdown_to_html(md: str, title: str) -> str:
    """``md`` as a complete HTML document titled ``title``. Raw HTML in ``md`` is shown as text
    (Python-Markdown's raw-HTML readers removed, so the renderer escapes it once, in code blocks
    too): a report's strings are data, never markup."""
    renderer = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    renderer.preprocessors.deregister("html_block")
    renderer.inlinePatterns.deregister("html")
    body = renderer.convert(md)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )
