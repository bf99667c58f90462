"""Running the real tools: every command has a timeout and leaves evidence."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from typing import Sequence

from nodecert_node.contract import Evidence

# Process groups of the tools running now: each tool gets its own group (so a timeout
# kills its whole tree); when the check itself is stopped, kill_all() ends them too.
_ACTIVE: set[int] = set()


# Scratch paths a running check created: removed when the check is stopped (SIGTERM),
# so a timeout or Ctrl-C never leaves gigabytes of test files behind.
_CLEANUP: list[str] = []


def remove_on_stop(path: str) -> None:
    _CLEANUP.append(path)


def kill_all() -> None:
    for pgid in list(_ACTIVE):
        kill_tree(pgid)
    for path in reversed(_CLEANUP):
        shutil.rmtree(path, ignore_errors=True)
    _CLEANUP.clear()


class ToolError(Exception):
    """A tool could not give an answer: missing, timed out, or failed."""

    def __init__(self, message: str, evidence: Evidence | None = None,
                 kind: str = "failed") -> None:
        super().__init__(message)
        self.evidence = evidence
        self.kind = kind  # "missing" | "timeout" | "failed"


class Output:
    def __init__(self, text: str, evidence: Evidence) -> None:
        self.text = text
        self.evidence = evidence
        self.returncode = evidence.returncode


def which(tool: str) -> str | None:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def run(argv: Sequence[str], *, timeout: float, name: str = "", ok_codes: Sequence[int] = (0,),
        input_text: str | None = None, env_extra: dict[str, str] | None = None) -> Output:
    """Run argv with a hard timeout; the whole process group dies on timeout.

    Raises ToolError (with the partial output as evidence) when the tool is missing,
    times out or exits with a code outside ok_codes.
    """
    cmd = " ".join(shlex.quote(a) for a in argv)
    label = name or os.path.basename(argv[0])
    exe = which(argv[0]) if "/" not in argv[0] else argv[0]
    if exe is None or not os.path.exists(exe):
        raise ToolError(f"{argv[0]} is not installed (not found on PATH)",
                        Evidence.of(label, cmd, None, ""), kind="missing")
    env = dict(os.environ, LC_ALL="C", LANG="C")
    if env_extra:
        env.update(env_extra)
    start = time.monotonic()
    proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.PIPE if input_text is not None else
                            subprocess.DEVNULL, env=env, start_new_session=True)
    _ACTIVE.add(proc.pid)
    try:
        raw, _ = proc.communicate(input_text.encode() if input_text is not None else None,
                                  timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raw, _ = proc.communicate()
        text = raw.decode("utf-8", "replace")
        ev = Evidence.of(label, cmd, None, text + f"\n[nodecert: killed after {timeout:g} s]",
                         time.monotonic() - start)
        raise ToolError(f"{label} did not finish within {timeout:g} s (killed)", ev,
                        kind="timeout") from None
    finally:
        _ACTIVE.discard(proc.pid)
    text = raw.decode("utf-8", "replace")
    ev = Evidence.of(label, cmd, proc.returncode, text, time.monotonic() - start)
    if proc.returncode not in ok_codes:
        last = text.strip().splitlines()[-1:] or ["(no output)"]
        raise ToolError(f"{label} exited with status {proc.returncode}: {last[0][:300]}", ev)
    return Output(text, ev)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    kill_tree(proc.pid)


def _parents() -> dict[int, list[int]]:
    """parent pid -> its children's pids, from /proc (a snapshot)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            # the command name is in parentheses and may hold anything: split after it
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    """Every process below pid now, whatever session or group it moved to (fio's job
    processes call setsid: a process-group kill misses them)."""
    kids = _parents()
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> list[int]:
    """SIGKILL pid's process group and every descendant of pid; returns the descendants
    killed. The tree is frozen first (SIGSTOP, top down, until no new process appears),
    so that nothing forks or is reparented out of reach between the look and the kill."""
    seen: list[int] = []
    # The top process first: while it runs it can fork a child that calls setsid between
    # the look below and the group kill, and so escape both.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGSTOP)
    for _ in range(20):
        new = [p for p in descendants(pid) if p not in seen]
        if not new:
            break
        for p in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
        seen += new
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for p in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    return seen


def read_file(path: str, name: str = "") -> Output:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return Output(text, Evidence.of(name or path, f"cat {shlex.quote(path)}", 0, text))


__all__: list[str] = ["Output", "ToolError", "descendants", "kill_tree", "read_file", "run",
                      "which"]
