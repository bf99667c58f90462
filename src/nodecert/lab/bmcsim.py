"""One lab host's BMC: SIMULATED readings from the lab's hardware model, served over a
real Redfish endpoint and fed to a real IPMI simulator.

    python -m nodecert.lab.bmcsim --dir BMC_DIR --host-dir HOST_DIR --address IP --port 443

* Redfish: sushy-tools' static emulator (its request handler serves a DMTF mockup tree
  from disk, one index.json per resource) behind HTTPS and HTTP Basic authentication,
  which it lacks; its handler prints every request's headers, Authorization included, so
  that printing is switched off here. The tree is rendered from the model every second
  (temperatures, fans and power follow the simulated GPUs' load; faults change them).
* IPMI: OpenIPMI's ipmi_sim (started by nodecert.lab.bmc) polls one file per sensor;
  this process writes the sensors' raw values there, from the same model.

Nothing here reaches the host: the model is read from the host's directory on this
machine (its hardware description, and the load its GPUs carry).

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import os
import ssl
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sushy_tools.static import main as sushy_static  # type: ignore[import-untyped]

from nodecert.lab.bmcmodel import Model, ipmi_raw, redfish_tree
from nodecert.lab.bmcupdate import BIOS_SETTINGS, PUSH_URI, RESET, TASKS, Updates
from nodecert.lab.config import HOST_HARDWARE

TICK_S = 1.0
MAX_PUSH = 64 * 1024 * 1024  # the largest image the lab's BMC takes


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))
    tmp.replace(path)


_RENDER = threading.Lock()  # the tick and an update's render never interleave


def render(model: Model, bmc_dir: Path) -> None:
    """The Redfish tree and the IPMI sensor files, from the model now (read and written
    under one lock: a render that read the model before an update cannot write after
    the update's own render)."""
    with _RENDER:
        hw = model.host_dir / HOST_HARDWARE
        seen = hw.stat().st_mtime_ns if hw.exists() else 0
        _render(model, bmc_dir)
        # which description the tree now on disk shows (tests wait on it, not on a clock)
        _write(bmc_dir / "rendered.json", {"hardware_mtime_ns": seen})


def _render(model: Model, bmc_dir: Path) -> None:
    for rel, doc in redfish_tree(model).items():
        _write(bmc_dir / "mockup" / rel / "index.json", doc)
    for name, raw in ipmi_raw(model).items():
        _write(bmc_dir / "ipmi" / f"{name}.val", f"{raw}\n")


def auth_handler(password: bytes, user: str, updates: Updates | None = None) -> type:
    """sushy-static's handler behind HTTP Basic authentication, printing nothing; the
    UpdateService's push and the TaskService's tasks answered by `updates`."""
    class Handler(sushy_static.RequestHandler):  # type: ignore[misc]
        server_version = "nodecert-lab-bmc"

        def _log_request(self, method: str) -> None:
            return None  # sushy-static prints the headers: the Authorization among them

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _authorized(self) -> bool:
            head = self.headers.get("Authorization", "")
            if not head.startswith("Basic "):
                return False
            try:
                who, _, pw = base64.b64decode(head[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return who == user and hmac.compare_digest(pw.encode(), password)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/redfish/v1" and not self._authorized():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="nodecert-lab-bmc"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if updates is not None and self.path.rstrip("/").startswith(TASKS) and \
                    self.path.rstrip("/") != TASKS:
                self._json(*updates.task(self.path.rstrip("/").rsplit("/", 1)[-1]))
                return
            if updates is not None and self.path.rstrip("/") == TASKS:
                self._json(200, updates.collection())
                return
            super().do_GET()

        def _json(self, status: int, doc: Any, location: str | None = None) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if location:
                self.send_header("Location", location)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if not self._authorized():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="nodecert-lab-bmc"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = int(self.headers.get("Content-Length") or 0)
            if updates is not None and self.path.rstrip("/") == RESET and size < 4096:
                status, doc = updates.reset(self.rfile.read(size))
                if status == 204:
                    self.send_response(204)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._json(status, doc)
                return
            if updates is None or self.path.rstrip("/") != PUSH_URI:
                self.send_error(405)
                return
            if size <= 0 or size > MAX_PUSH:
                self._json(413, {"error": {"code": "Base.1.8.PayloadTooLarge",
                                           "message": f"an image of {size} bytes"}})
                return
            status, doc = updates.push(self.headers.get("Content-Type", ""),
                                       self.rfile.read(size))
            self._json(status, doc, doc.get("@odata.id") if status == 202 else None)

        def do_PATCH(self) -> None:
            if not self._authorized():
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = int(self.headers.get("Content-Length") or 0)
            if updates is None or self.path.rstrip("/") != BIOS_SETTINGS or size > 65536:
                self.send_error(405)
                return
            self._json(*updates.patch_bios(self.rfile.read(size)))

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nodecert.lab.bmcsim")
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--host-dir", type=Path, required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--port", type=int, default=443)
    ap.add_argument("--once", action="store_true", help="render the tree once and exit")
    a = ap.parse_args(argv)
    model = Model(a.host_dir, a.dir)
    render(model, a.dir)
    if a.once:
        return 0
    sushy_static.REDFISH_MOCKUP_FILES = str((a.dir / "mockup").resolve())
    cfg = json.loads((a.dir / "bmc.json").read_text())
    password = (a.dir / "password").read_bytes().strip()
    updates = Updates(a.dir, model.hw, model.firmware, lambda: render(model, a.dir))
    httpd = ThreadingHTTPServer((a.address, a.port),
                                auth_handler(password, cfg["username"], updates))
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.dir / "bmc.pem", a.dir / "bmc.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)

    def tick() -> None:
        while True:
            time.sleep(TICK_S)
            try:
                render(model, a.dir)
            except (OSError, ValueError) as exc:  # the host is being reset: next tick
                print(f"bmcsim: {exc}", file=sys.stderr, flush=True)

    threading.Thread(target=tick, daemon=True).start()
    (a.dir / "redfish.ready").write_text(str(os.getpid()))
    print(f"ready {httpd.server_address[1]}", flush=True)  # port 0: the one chosen
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
