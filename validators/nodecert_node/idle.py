"""Whether user work holds the GPUs, and giving way to it: the scheduled run's idle guard.

Only a "pid, name" row of `nvidia-smi --query-compute-apps` is a GPU job; anything else
the tool prints, or its failure, is its own words (neither busy nor idle). While an idle
run is on, a compute process that is not its own, or SIGTERM from the scheduler, stops
the running check and the suite within seconds.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from nodecert_node import gpu, tools
from nodecert_node.runner import stop_current


class GpuUsersUnknown(Exception):
    """nvidia-smi could not say which processes use the GPUs (it failed, hung, or printed
    something that is no process row): neither busy nor idle."""


def parse_compute_apps(text: str) -> list[str]:
    """`nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader`: one
    "pid, name" row per compute process (none: no output, or "No running processes
    found"). Any other line is the tool's own words, never a job: GpuUsersUnknown."""
    rows = []
    for line in text.splitlines():
        ln = line.strip()
        if not ln or ln.startswith("No running"):
            continue
        pid, sep, name = ln.partition(",")
        if not sep or not pid.strip().isdigit() or not name.strip():
            raise GpuUsersUnknown(f"nvidia-smi printed {ln[:200]!r}, which is no process row")
        rows.append(ln)
    return rows


def gpu_users(timeout: float = 30) -> list[str]:
    """Compute processes on the GPUs (user work), as nvidia-smi lists them. Raises
    GpuUsersUnknown when the tool cannot say (an error is not a job, nor an idle GPU)."""
    try:
        text = gpu.default().compute_apps(timeout)
    except tools.ToolError as exc:
        raise GpuUsersUnknown(str(exc)) from None
    return parse_compute_apps(text)


def _pid_of(app: str) -> int | None:
    head = app.split(",", 1)[0].strip()
    return int(head) if head.isdigit() else None


def foreign_gpu_users(timeout: float = 10) -> list[str]:
    """GPU compute processes that are not this run's own (its checks' workers)."""
    ours = set(tools.descendants(os.getpid())) | {os.getpid()}
    try:
        users = gpu_users(timeout)
    except GpuUsersUnknown:
        return []  # the tool's error is no job: the run goes on (its checks read the GPUs)
    return [u for u in users if _pid_of(u) not in ours]


class IdleGuard:
    """While the run is on: give way to a GPU job (a compute process that is not ours
    appears) and to the scheduler (SIGTERM: Slurm preempting or cancelling the job), by
    stopping the running check and the suite within seconds."""

    def __init__(self, poll_s: float) -> None:
        self.stop = threading.Event()
        self.current: dict[str, Any] = {"proc": None}
        self.why = ""
        self.poll_s = poll_s
        self._done = threading.Event()

    def give_way(self, why: str) -> None:
        if not self.stop.is_set():
            self.why = why
            self.stop.set()
            # Not in the signal handler's thread: stopping a check waits for it.
            threading.Thread(target=stop_current, args=(self.current,), daemon=True).start()

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            users = foreign_gpu_users()
            if users:
                self.give_way(f"gave way to a GPU job that started: {users[0]}")
                return

    def __enter__(self) -> IdleGuard:
        signal.signal(signal.SIGTERM, lambda signum, frame: self.give_way(
            "gave way to the scheduler: the job was preempted or cancelled (SIGTERM)"))
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


__all__ = ["GpuUsersUnknown", "IdleGuard", "foreign_gpu_users", "gpu_users",
           "parse_compute_apps"]
