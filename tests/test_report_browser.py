"""The report renders in headless Chromium with every image loaded.

Needs Debian's `chromium` (`apt-get install chromium`; .ci/run installs it where apt works); the
test is skipped, saying so, where no Chromium binary is found.
"""

import re
import shutil
import subprocess

import pytest
from test_report import fake_sweep

from attntemp.report import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary found (apt-get install chromium)")
def test_report_renders_with_every_image(tmp_path):
    fake_sweep(tmp_path)
    _, page = build_report(tmp_path)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--allow-file-access-from-files",
           "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'id="attntemp-images"[^>]*>images (\d+)/(\d+)<', dom)
    assert found, dom[-500:]
    ok, total = map(int, found.groups())
    assert total >= 3 and ok == total
