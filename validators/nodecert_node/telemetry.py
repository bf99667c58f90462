"""nvidia-smi sampling beside a load: `--query-gpu=FIELDS -lms PERIOD` in its own session,
its rows parsed as they come, stopped (and killed if it will not stop) when the load ends."""

from __future__ import annotations

import subprocess
import threading

from nodecert_node.parse import smi
from nodecert_node.tools import which


def sample(stop: threading.Event, rows: list[dict[str, str]], raw: list[str],
           period_ms: int, fields: list[str]) -> subprocess.Popen[str]:
    exe = which("nvidia-smi") or "nvidia-smi"
    proc = subprocess.Popen([exe, f"--query-gpu={','.join(fields)}",
                             "--format=csv,noheader,nounits", "-lms", str(period_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            raw.append(line)
            if stop.is_set():
                break
            if line.strip():
                rows.extend(smi.parse_query_csv(line, fields))
    threading.Thread(target=reader, daemon=True).start()
    return proc


def stop(flag: threading.Event, sampler: subprocess.Popen[str]) -> None:
    flag.set()
    sampler.terminate()
    try:
        sampler.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sampler.kill()


__all__ = ["sample", "stop"]
