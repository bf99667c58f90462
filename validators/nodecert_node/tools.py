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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
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
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def read_file(path: str, name: str = "") -> Output:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return Output(text, Evidence.of(name or path, f"cat {shlex.quote(path)}", 0, text))


__all__: list[str] = ["Output", "ToolError", "read_file", "run", "which"]
