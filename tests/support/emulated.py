"""The emulated fleet (nodecert.lab.fleet) served for a test: on a loopback range of its
own and a port free now (another emulator, a benchmark or a second worker, may be
serving another range), stopped when the test is done."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def emulated_fleet(work: Path, net: int, nodes: int, *args: str,
                   listening: int | None = None) -> Iterator[Path]:
    """Serve `nodes` emulated nodes on 127.NET.0.0/16 (extra emulator options in args);
    yields the directory with inventory.ini, known_hosts and kinds.json."""
    with socket.socket() as s:
        s.bind((f"127.{net}.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodecert.lab.fleet", "--nodes", str(nodes), "--dir", str(work),
         "--net", str(net), "--port", str(port), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    # The emulator prints one line once every node listens (or dies with its error).
    timer = threading.Timer(120, proc.kill)
    timer.start()
    ready = proc.stdout.readline()
    timer.cancel()
    assert ready.strip() == f"ready {nodes if listening is None else listening}", ready
    yield work
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
