"""The report renders in headless Chromium with every image loaded.

Needs Debian's `chromium` (`apt-get install chromium`; .ci/run installs it where apt works); the
test is skipped, saying so, where no Chromium binary is found.
"""

import re
import shutil
import subprocess

import pytest
from test_report import fake_sweep

from attntemp.report.build import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

# Injected by the test into a copy of the report (never shipped in it): after load, a hidden element
# says how many images decoded.
IMAGE_CHECK = (
    "<script>window.addEventListener('load',()=>{const i=[...document.images];"
    "const ok=i.filter(x=>x.complete&&x.naturalWidth>0).length;const d=document.createElement('div');"
    "d.id='attntemp-images';d.hidden=true;d.textContent='images '+ok+'/'+i.length;"
    "document.body.appendChild(d);});</script>"
)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary found (apt-get install chromium)")
def test_report_renders_with_every_image(tmp_path):
    fake_sweep(tmp_path)
    report = build_report(tmp_path).page
    assert "<script" not in report.read_text()  # the product page carries no test hook
    page = report.with_name("report_check.html")  # beside it, so its relative image paths resolve
    page.write_text(report.read_text().replace("</body>", IMAGE_CHECK + "</body>"))
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--allow-file-access-from-files",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'id="attntemp-images"[^>]*>images (\d+)/(\d+)<', dom)
    assert found, dom[-500:]
    ok, total = map(int, found.groups())
    assert total >= 3 and ok == total
