"""Benchmark the fleet page of a large fleet in a real browser: certify a slice of an
emulated fleet's run, make a fleet of N certificates of their statements (each node
its own name, one in 97 NOT READY), write the pages as certify does, and load them
in headless Chromium (its own network namespace: the page needs nothing from the
network), three times each.

Run on demand (root):   .venv/bin/python benchmarks/fleet_page.py [--nodes 10000]
                        [--json OUT]

Reports per page: its size, and the time from navigation to the end of the load event
and to the page laid out (a forced layout after load), as the page itself measures them.
Target: index.html of 10,000 nodes loaded and laid out in under 3 s.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import report

from nodecert.certs import html as report_html
from nodecert.certs.signing import init_key, load_private_key
from nodecert.certs.sliced import certify_slice
from nodecert.lab.fleet import FleetSpec
from nodecert.lab.fleetruns import write_run
from nodecert.validation.slices import Slice

PROBE = """<script>
addEventListener('load', () => { setTimeout(() => {
  document.body.getBoundingClientRect();
  const nav = performance.getEntriesByType('navigation')[0];
  document.body.setAttribute('data-load-ms', Math.round(nav.loadEventEnd));
  document.body.setAttribute('data-laid-ms', Math.round(performance.now()));
}, 0); });
</script>"""


def statements(work: Path, nodes: int) -> list[dict[str, Any]]:
    """N statements from 100 real certificates of an emulated fleet's run."""
    run = write_run(work, FleetSpec(100, seed=3), 1, started=time.time())
    key = load_private_key(init_key(work / "keys").private)
    certify_slice(run, key, Slice(1, 1, run.name), revocations=None)
    base = [json.loads(base64.b64decode(json.loads(p.read_text())["payload"]))
            for p in sorted((run / "reports").glob("*.intoto.dsse.json"))]
    out = []
    for i in range(nodes):
        st = copy.deepcopy(base[i % len(base)])
        st["predicate"]["host"] = f"n{i:05d}"
        if i % 97 == 5:
            st["predicate"]["verdict"] = "NOT READY"
        out.append(st)
    return out


def load(page: Path) -> dict[str, Any]:
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    runs = []
    for _ in range(3):
        r = subprocess.run(["unshare", "--net", "chromium", "--headless", "--no-sandbox",
                            "--disable-gpu", "--disable-background-networking",
                            "--disable-component-update", "--no-first-run",
                            "--window-size=1280,900", "--virtual-time-budget=10000",
                            "--dump-dom", probe.as_uri()],
                           capture_output=True, text=True, timeout=300, check=False)
        m = re.search(r'data-load-ms="(\d+)" data-laid-ms="(\d+)"', r.stdout)
        if not m:
            raise RuntimeError(f"the page did not measure itself: {r.stderr[-500:]}")
        runs.append((int(m.group(1)), int(m.group(2))))
    return {"bytes": page.stat().st_size, "load_ms": [a for a, _ in runs],
            "laid_out_ms": [b for _, b in runs]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out: dict[str, Any] = {"nodes": a.nodes, "page_rows": report_html.PAGE_ROWS}
    with tempfile.TemporaryDirectory(prefix="nodecert-bench-") as d:
        work = Path(d)
        sts = statements(work, a.nodes)
        t0 = time.perf_counter()
        pages = report_html.fleet_pages(sts, keyid="0" * 64)
        out["render_s"] = round(time.perf_counter() - t0, 2)
        site = work / "site"
        (site / report_html.FLEET_PAGES).mkdir(parents=True)
        for name, text in pages.items():
            (site / name).write_text(text)
        out["pages"] = len(pages)
        out["index"] = load(site / "index.html")
        out["a_page_of_nodes"] = load(site / f"{report_html.FLEET_PAGES}/001.html")
        # the page as it was before: every node on one page
        one = site / "all.html"
        keep = report_html.PAGE_ROWS
        report_html.PAGE_ROWS = a.nodes
        one.write_text(report_html.fleet_pages(sts, keyid="0" * 64)["index.html"])
        report_html.PAGE_ROWS = keep
        out["one_page_of_every_node"] = load(one)
    return report(out, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
