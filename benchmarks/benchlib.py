"""What the benchmarks share: a nodecert command run with --json and timed, and the
results printed and, where asked, written to a file."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodecert.lab.config import LabConfig
from nodecert.lab.hosts import Lab
from nodecert.lab.machine import INOTIFY_LIMIT


def nodecert(*args: str, timeout: float = 900) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, exit code, its --json document) of `nodecert <args> --json`; a
    document that is not JSON is its output's tails, so a failed run still reports."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nodecert", *args, "--json"],
                       capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {"stdout": p.stdout[-2000:], "stderr": p.stderr[-2000:]}
    return round(wall, 1), p.returncode, doc


def bench_lab(octet: int, name: str) -> LabConfig:
    """A benchmark's own lab: subnet 10.78.<octet>.0/24, bridge <name>0, namespaces and
    state named after it, beside (never touching) the user's lab and the tests' labs."""
    return LabConfig(subnet=ipaddress.IPv4Network(f"10.78.{octet}.0/24"), bridge=f"{name}0",
                     prefix=name, state_name=f"state-{name.removeprefix('nc')}")


@contextlib.contextmanager
def many_hosts(octet: int, name: str) -> Iterator[Lab]:
    """The benchmark's own lab (`bench_lab`) for more hosts than the machine's inotify
    instance limit allows (each host's systemd takes its share): the limit raised for the
    benchmark and put back after it, and the lab taken down, whatever happened."""
    lab = Lab(bench_lab(octet, name), log=lambda m: None)
    before = INOTIFY_LIMIT.read_text()
    INOTIFY_LIMIT.write_text(f"{max(1024, int(before))}\n")
    try:
        yield lab
    finally:
        lab.down()
        INOTIFY_LIMIT.write_text(before)


def verifies(certificate: str, pubkey: Path) -> bool:
    """Whether `nodecert verify` accepts the certificate (simulated hardware allowed)."""
    return subprocess.run([sys.executable, "-m", "nodecert", "verify", certificate,
                           "--pubkey", str(pubkey), "--allow-simulated"],
                          capture_output=True, text=True, timeout=120,
                          check=False).returncode == 0


def report(out: Any, path: Path | None, *, indent: int = 2) -> int:
    """The results on standard output, and in `path` where one was given; exit code 0."""
    print(json.dumps(out, indent=indent))
    if path:
        path.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def write_rows(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """The rows of a benchmark that timed child processes, in `path` where one was given,
    with the largest of their peak memories."""
    if path:
        path.write_text(json.dumps({"machine_max_rss_mb": resource.getrusage(
            resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "rows": rows}, indent=1))


__all__ = ["bench_lab", "many_hosts", "nodecert", "report", "verifies", "write_rows"]
