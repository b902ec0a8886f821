"""The documentation site at a laptop's width (1280 px) in headless Chromium: nothing on
the home page (the README's diagram), the tutorial and the REST page is wider than its
box, and no route's path on the REST page breaks across lines."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["", "tutorial/", "rest/"]


def test_the_site_fits_1280_px(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                        str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[info" not in r.stdout + r.stderr, "the build prints a log line"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = subprocess.run(["node", "site.spec.mjs"], cwd=ROOT / "tests" / "ui",
                           capture_output=True, text=True, timeout=300,
                           env={"PATH": "/usr/bin:/bin:/usr/local/bin",
                                "SITE_URL": f"http://127.0.0.1:{server.server_port}",
                                "PAGES": ",".join(PAGES)})
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    for page, found in seen.items():
        assert found["page_width"] <= found["width"], (page, found)
        assert found["wide"] == [], (page, found["wide"])
        assert found["broken"] == [], (page, found["broken"])
    assert seen["rest/"]["broken"] == [] and "rest/" in seen
