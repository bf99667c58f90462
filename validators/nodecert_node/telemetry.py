"""GPU telemetry sampled beside a load by the GPU backend (NVIDIA: `nvidia-smi
--query-gpu=FIELDS -lms PERIOD` in its own session), its rows parsed as they come,
stopped (and killed if it will not stop) when the load ends."""

from __future__ import annotations

import os
import shlex
import subprocess
import threading

from nodecert_node.gpu import Backend


def sample(backend: Backend, stop: threading.Event, rows: list[dict[str, str]],
           raw: list[str], *, period_ms: int, fields: list[str]) -> subprocess.Popen[str]:
    """The backend's sampler, started; its rows parsed into `rows` as they come."""
    return backend.sample(stop, rows, raw, period_ms, fields)


def command(sampler: subprocess.Popen[str]) -> str:
    """The sampler's command line as evidence names it (the tool by its name)."""
    argv = [str(a) for a in sampler.args] if isinstance(sampler.args, (list, tuple)) \
        else [str(sampler.args)]
    return shlex.join([os.path.basename(argv[0]), *argv[1:]])


def stop(flag: threading.Event, sampler: subprocess.Popen[str]) -> None:
    flag.set()
    sampler.terminate()
    try:
        sampler.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sampler.kill()


__all__ = ["command", "sample", "stop"]
