"""Headless Chromium in a network namespace of its own (loopback only): a page must
need nothing from the network, and the browser cannot reach anything either."""

from __future__ import annotations

import subprocess

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

