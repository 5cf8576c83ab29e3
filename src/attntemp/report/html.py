"""Markdown to a standalone HTML page, rendered by Python-Markdown (tables extension): the report's
tables, headings, images and paragraphs, with a small stylesheet and nothing else."""

from __future__ import annotations

import html

import markdown

STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}img{max-width:100%}"
)


def markdown_to_html(md: str, title: str) -> str:
    """``md`` as a complete HTML document titled ``title``. Raw HTML in ``md`` is shown as text
    (escaped before rendering): a report's strings are data, never markup."""
    body = markdown.markdown(html.escape(md, quote=False), extensions=["tables"], output_format="html")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )
