"""Does a page fit a browser window? :func:`overflow` opens a copy of it in headless Chromium at a
given window width and says what sticks out past the window's right edge, with a screenshot.

Import it as ``from report.browser import overflow, CHROMIUM`` (``tests/`` is on ``sys.path``
through ``tests/conftest.py``), or ``from browser import ...`` from a test in ``tests/report``.
Needs Debian's ``chromium`` (``apt-get install chromium``): skip where :data:`CHROMIUM` is None.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
HEIGHT = 900
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--allow-file-access-from-files",
    "--virtual-time-budget=5000",
)

# Injected into the copy (never the page itself): after load, a hidden <pre> holds a JSON report of
# the document's width against the window's and every element whose right edge, or that of the
# content it lets overflow (a long word in a paragraph), lies past the visible width, leaving out
# what lies inside a box that scrolls or clips (overflow-x not visible): that content is reached by
# scrolling the box, not the page. The boxes themselves are checked.
PROBE = """<script>window.addEventListener('load',()=>{
const view=document.documentElement.clientWidth, off=[], seen=new Set();
const inBox=e=>{for(let a=e.parentElement;a&&a!==document.body&&a!==document.documentElement;a=a.parentElement){
  if(getComputedStyle(a).overflowX!=='visible')return true;}return false;};
for(const e of document.body.querySelectorAll('*')){
  const r=e.getBoundingClientRect();
  if(r.width===0&&r.height===0)continue;
  const right=getComputedStyle(e).overflowX==='visible'?Math.max(r.right,r.left+e.scrollWidth):r.right;
  if(right<=view+0.5||inBox(e))continue;
  seen.add(e);
  if(seen.has(e.parentElement)||off.length>=50)continue;
  off.push({tag:e.tagName.toLowerCase(),right:Math.round(right),
    text:(e.textContent||'').trim().replace(/\\s+/g,' ').slice(0,80)});}
const boxes=[...document.body.querySelectorAll('*')].filter(e=>getComputedStyle(e).overflowX!=='visible'
  &&e.scrollWidth>e.clientWidth+1).map(e=>e.tagName.toLowerCase());
const d=document.createElement('pre');d.id='attntemp-overflow';d.hidden=true;
d.textContent=JSON.stringify({inner_width:window.innerWidth,client_width:view,
  scroll_width:document.documentElement.scrollWidth,offenders:off,scrolling_boxes:boxes});
document.body.appendChild(d);});</script>"""


def _chromium(profile: Path, width: int, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None, "no Chromium binary found (apt-get install chromium)"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def overflow(page_path: str | Path, width: int = 1280, screenshot: str | Path | None = None) -> dict[str, Any]:
    """Open ``page_path`` (an HTML file) in headless Chromium with a ``width`` x 900 window and say
    whether it fits.

    Returns ``{"overflows": bool, "inner_width", "client_width", "scroll_width", "offenders",
    "scrolling_boxes", "screenshot"}``: ``overflows`` is True when the document is wider than the
    window (``scroll_width > client_width``, or ``> inner_width``) or any element outside a
    scrolling box ends past the visible width; ``offenders`` lists the outermost of those
    elements (``tag``, ``right`` edge in px, the start of their ``text``; the first 50: a table
    sticking out is one entry, not one per cell); ``scrolling_boxes`` the tags of the boxes
    whose content scrolls inside them (a wide table in its wrapper, a code block). The page is
    probed through a copy beside it (so relative image paths resolve), removed after;
    ``screenshot`` (default ``<page stem>-<width>px.png`` beside the page) is the window as the
    user sees it, kept."""
    page = Path(page_path).resolve()
    shot = Path(screenshot) if screenshot is not None else page.with_name(f"{page.stem}-{width}px.png")
    text = page.read_text(encoding="utf-8")
    probe = text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE
    copy = page.with_name(f".{page.stem}-overflow-probe.html")
    profile = Path(tempfile.mkdtemp(prefix="attntemp-chromium-"))
    try:
        copy.write_text(probe, encoding="utf-8")
        dom = _chromium(profile, width, "--dump-dom", copy.as_uri()).stdout
        _chromium(profile, width, f"--screenshot={shot.resolve()}", page.as_uri())
    finally:
        copy.unlink(missing_ok=True)
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="attntemp-overflow"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, f"the probe did not report (Chromium's DOM ends: {dom[-300:]!r})"
    report = json.loads(html.unescape(found.group(1)))
    wide = report["scroll_width"] > min(report["client_width"], report["inner_width"])
    report["overflows"] = bool(wide or report["offenders"])
    report["screenshot"] = str(shot) if shot.is_file() else None
    return report
