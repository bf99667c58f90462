"""One management endpoint of a lab rack -- an NVLink switch tray, a power shelf or a
CDU -- served over real Redfish (sushy-tools' static handler behind HTTPS and Basic
authentication, as the lab's node BMCs are) with the SIMULATED tree of
nodecert.lab.rackmodel, made again from the component's directory (`component.json`:
kind, name, faults) when a request comes and the tree served is a tick (a second) old
or older: what a client reads is never older than a tick (a fault written there shows
at the next tick), and an endpoint nobody asks costs nothing -- a rack's thirteen
endpoints sit idle through most of a rack run. A tree is written out only when it
changed: a switch tray's hundreds of port documents stay as they are until a fault
moves them.

    python -m nodecert.lab.racksim --dir DIR --address IP --port 443

DIR holds component.json, the password, the TLS certificate and key (bmc.pem, bmc.key)
and the rendered tree (mockup/). SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sushy_tools.static import main as sushy_static  # type: ignore[import-untyped]

from nodecert.lab import rackmodel
from nodecert.lab.bmcsim import auth_handler

TICK_S = 1.0


def render(d: Path, served: dict[str, Any] | None = None) -> dict[str, Any]:
    """The component's tree now, swapped in whole (the served path is a symbolic link
    replaced in one rename): a reader never sees half of a tick, nor none. A tree equal
    to `served` (the one on the disk) is not written again; returns the tree served."""
    component = json.loads((d / "component.json").read_text())
    now = rackmodel.tree(component, time.time())
    if now == served:
        return now
    tag = f"{time.monotonic_ns()}"
    fresh = d / f"tree.{tag}"
    for rel, doc in now.items():
        path = fresh / rel / "index.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
    link = d / f"mockup.{tag}"
    link.symlink_to(fresh.name)
    link.replace(d / "mockup")
    # The tree before stays a tick longer: a reader that resolved the link just before
    # the swap still finds its file.
    for old in sorted(d.glob("tree.*"), key=lambda p: int(p.name[5:]))[:-2]:
        shutil.rmtree(old, ignore_errors=True)
    return now


class Fresh:
    """The served tree, made again when asked for once it is a tick old (one render at a
    time: the server answers requests in threads)."""

    def __init__(self, d: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.d, self.clock = d, clock
        self.lock = threading.Lock()
        self.served = render(d)
        self.at = clock()

    def __call__(self) -> None:
        with self.lock:
            if self.clock() - self.at < TICK_S:
                return
            try:
                self.served = render(self.d, self.served)
            except (OSError, ValueError) as exc:  # served as it was; tried again next time
                print(f"racksim: {exc}", file=sys.stderr, flush=True)
            self.at = self.clock()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nodecert.lab.racksim")
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--port", type=int, default=443)
    a = ap.parse_args(argv)
    d = a.dir.resolve()
    fresh = Fresh(d)
    sushy_static.REDFISH_MOCKUP_FILES = str(d / "mockup")
    user = json.loads((d / "component.json").read_text()).get("username", "nodecert")
    password = (d / "password").read_bytes().strip()

    class Handler(auth_handler(password, user)):  # type: ignore[misc]
        def do_GET(self) -> None:
            fresh()
            super().do_GET()

    httpd = ThreadingHTTPServer((a.address, a.port), Handler)
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "bmc.pem", d / "bmc.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)

    (d / "redfish.ready").write_text(str(os.getpid()))
    print(f"ready {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
