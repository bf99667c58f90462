"""What the benchmarks share: a nodecert command run with --json and timed, and the
results printed and, where asked, written to a file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


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


def report(out: Any, path: Path | None, *, indent: int = 2) -> int:
    """The results on standard output, and in `path` where one was given; exit code 0."""
    print(json.dumps(out, indent=indent))
    if path:
        path.write_text(json.dumps(out, indent=2) + "\n")
    return 0


__all__ = ["nodecert", "report"]
