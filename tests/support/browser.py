"""Headless Chromium in a network namespace of its own (loopback only): a page must
need nothing from the network, and the browser cannot reach anything either."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.env import require_tool


def chromium() -> str:
    return require_tool("chromium", "chromium-browser")


def headless(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # Its own network namespace (loopback only): the page must need nothing from the
    # network, and the browser cannot reach anything either.
    return subprocess.run(
        ["unshare", "--net", chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         "--hide-scrollbars", *extra, url],
        capture_output=True, text=True, timeout=120, check=False)



_MEASURE = """<script>
addEventListener('load', () => {
  const w = document.documentElement.clientWidth, wide = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width && r.right > w + 1) wide.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : ''));
  }
  document.body.setAttribute('data-too-wide', wide.slice(0, 12).join(' '));
  document.body.setAttribute('data-scroll-width', document.documentElement.scrollWidth);
});
</script>"""


def too_wide(page: Path, work: Path, width: int = 1280) -> tuple[int, str]:
    """(the page's scroll width, the elements that reach past `width`) as Chromium lays
    the page out at that width. The page has no script of its own: a copy of it, with one
    that measures, is loaded."""
    probe = work / f"measure-{page.name}"
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    r = headless(probe.as_uri(), f"--window-size={width},900", "--virtual-time-budget=3000",
                 "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'data-too-wide="([^"]*)" data-scroll-width="(\d+)"', r.stdout)
    assert m, "the measuring script did not run"
    return int(m.group(2)), m.group(1)
