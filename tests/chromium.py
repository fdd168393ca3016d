"""Headless Chromium (Debian's ``chromium``; .ci/run installs it) for the tests of memkiln's
pages, with the network cut: every host name fails to resolve and every proxied request goes
to a closed port on 127.0.0.1, so a page that tried to fetch anything would show a console
error and draw nothing.

A page's layout is measured by a script added to the test's copy of the page only
(``with_layout_probe``): once the charts are drawn it writes what it found into the DOM,
which ``--dump-dom`` returns.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.sample_db import REPO

#: Where the screenshots CI keeps are written (git-ignored; see .ci/run).
ARTIFACTS = REPO / ".ci" / "artifacts"
#: The screen the layout is measured on.
WIDTH = 1280

NO_NETWORK = ("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9")

#: Added before ``</body>`` of a test copy: waits for the page's charts (window.chartsDrawn),
#: then records the viewport, every element that reaches past its right edge, how table
#: cells may wrap, the banner and the marks drawn in each chart.
PROBE = """<script type="module">
await window.chartsDrawn;
const width = document.documentElement.clientWidth;
const wider = [];
for (const el of document.body.querySelectorAll("*")) {
  if (el.closest("script, #layout-probe")) continue;
  const box = el.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;
  if (box.right > width + 0.5 || box.left < -0.5) {
    wider.push({tag: el.tagName, id: el.id, cls: String(el.className.baseVal ?? el.className),
                left: Math.round(box.left), right: Math.round(box.right),
                text: (el.textContent || "").slice(0, 60)});
  }
}
const wraps = new Set();
for (const cell of document.querySelectorAll("td, th")) {
  const style = getComputedStyle(cell);
  wraps.add(style.wordBreak + "/" + style.overflowWrap);
}
const charts = {};
for (const chart of document.querySelectorAll(".chart")) {
  charts[chart.id] = chart.querySelectorAll("svg path, svg rect, svg text").length;
}
const banner = document.querySelector("#banner");
const probe = document.createElement("pre");
probe.id = "layout-probe";
probe.textContent = JSON.stringify({
  innerWidth: window.innerWidth, clientWidth: width,
  scrollWidth: document.documentElement.scrollWidth,
  wider: wider.slice(0, 20), widerCount: wider.length, wraps: [...wraps], charts,
  tables: document.querySelectorAll("table").length,
  banner: banner ? {cls: banner.className, text: banner.innerText,
                    bottom: Math.round(banner.getBoundingClientRect().bottom)} : null,
});
document.body.append(probe);
</script>
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get)")
    return found


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr",
            "--v=0", *NO_NETWORK, "--virtual-time-budget=20000", *args,
        ],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def open_in_chromium(page: Path, profile: Path, *, height: int = 2000) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran at ``WIDTH`` pixels, and the console messages it
    logged."""
    done = _run([f"--window-size={WIDTH},{height}", "--dump-dom", page.as_uri()], profile)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def screenshot(page: Path, png: Path, profile: Path, *, height: int = 3000) -> Path:
    """A ``WIDTH``-pixel-wide screenshot of the page's top ``height`` pixels."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _run([f"--window-size={WIDTH},{height}", f"--screenshot={png}", page.as_uri()], profile)
    assert png.is_file() and png.stat().st_size > 10_000, png
    return png


def with_layout_probe(page: Path) -> Path:
    """A copy of ``page`` beside it with ``PROBE`` added (the page itself is unchanged)."""
    text = page.read_text(encoding="utf-8")
    head, tail = text.rsplit("</body>", 1)  # the last one (the chart library holds the words)
    probed = page.with_name(f"probed-{page.name}")
    probed.write_text(head + PROBE + "</body>" + tail, encoding="utf-8")
    return probed


def layout(dom: str) -> dict[str, Any]:
    """What ``PROBE`` wrote into the DOM."""
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom, re.S)
    assert found, "the layout probe did not run (did the charts draw?)"
    return json.loads(html.unescape(found.group(1)))
