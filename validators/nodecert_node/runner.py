"""The node-side suite runner: one child process per check, events as JSON lines.

`python3 -m nodecert_node run` reads the plan (one JSON line) on stdin and
writes one JSON event per line on stdout: hello, start, result, done. Each
check runs in its own process group with its own timeout, so a hung tool or a
crashed check becomes an ERROR result and the suite goes on. When stdin closes
(the control side went away or was interrupted), the running check is killed
and the runner exits: nothing keeps loading the GPUs behind the operator's back.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from typing import Any, TextIO

from nodecert_node import __version__, local, tools
from nodecert_node.checks import REGISTRY, Ctx, run_check
from nodecert_node.checks import fabric as _fabric  # noqa: F401
from nodecert_node.checks import framework as _framework  # noqa: F401
from nodecert_node.checks import hardware as _hardware  # noqa: F401 -- registers its checks
from nodecert_node.checks import health as _health  # noqa: F401
from nodecert_node.checks import load as _load  # noqa: F401
from nodecert_node.checks import stack as _stack  # noqa: F401
from nodecert_node.checks import storage as _storage  # noqa: F401
from nodecert_node.result import Evidence, Result, Verdict, error_result

SIMULATED_MARK = "/etc/nodecert-lab/SIMULATED"
_lock = threading.Lock()


def simulated(plan: dict[str, Any]) -> bool:
    return bool(plan.get("simulated")) or os.path.exists(
        os.environ.get("NODECERT_SIMULATED_MARK", SIMULATED_MARK))


def emit(out: TextIO, event: dict[str, Any]) -> None:
    with _lock:
        out.write(json.dumps(event, sort_keys=True) + "\n")
        out.flush()


def run_one(name: str, plan: dict[str, Any], timeout: float,
            current: dict[str, Any]) -> Result:
    """Run a check in a child process group; timeout or crash -> ERROR with evidence."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "nodecert_node", "check", name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    current["proc"] = proc
    try:
        out, err = proc.communicate(json.dumps(plan).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc)
        out, err = proc.communicate()
        return error_result(
            name, f"{name} did not finish within {timeout:g} s and was stopped",
            evidence=(Evidence.of("partial output", f"nodecert_node check {name}", None,
                                  (out + err).decode("utf-8", "replace")),),
            fault_code="NC-CHECK-TIMEOUT", duration_s=time.monotonic() - start,
            remediation="A tool or the GPU hung: look at the partial output and the kernel "
                        "log; a GPU that hangs is not ready.")
    finally:
        current["proc"] = None
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        return Result.from_dict(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError):
        return error_result(
            name, f"{name} crashed (exit status {proc.returncode})",
            evidence=(Evidence.of("stderr", f"nodecert_node check {name}", proc.returncode,
                                  (out + err).decode("utf-8", "replace")),),
            fault_code="NC-CHECK-CRASH", duration_s=time.monotonic() - start)


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    """Stop a check: SIGTERM lets it kill the tools it started (each in its own process
    group), SIGKILL follows if it does not exit."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def run_suite(plan: dict[str, Any], out: TextIO, stdin: TextIO | None) -> int:
    sim = simulated(plan)
    emit(out, {"event": "hello", "version": __version__, "python": platform.python_version(),
               "host": platform.node(), "simulated": sim, "checks": plan.get("checks", [])})
    current: dict[str, Any] = {"proc": None}
    stop = threading.Event()
    if stdin is not None:
        def watch() -> None:
            stdin.read()  # returns at EOF: the control side is gone
            stop.set()
            p = current.get("proc")
            if p is not None:
                _killpg(p)
        threading.Thread(target=watch, daemon=True).start()
    timeouts: dict[str, float] = plan.get("check_timeouts_s") or {}
    default = float(plan.get("check_timeout_s", 300))
    verdicts: list[Verdict] = []
    for name in plan.get("checks", []):
        if stop.is_set():
            break
        emit(out, {"event": "start", "check": name, "t": time.time()})
        res = run_one(name, plan, float(timeouts.get(name, default)), current)
        if stop.is_set():
            break
        res = res.with_(simulated=sim)
        verdicts.append(res.verdict)
        emit(out, {"event": "result", "result": res.as_dict()})
    emit(out, {"event": "done", "interrupted": stop.is_set()})
    return 130 if stop.is_set() else 0


def check_main(name: str) -> int:
    """Child process: run one check in-process, print its Result as the last line."""
    def stop(signum: int, frame: object) -> None:
        tools.kill_all()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    plan = json.loads(sys.stdin.read())
    res = run_check(name, Ctx(plan))
    sys.stdout.write(json.dumps(res.as_dict()) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "check":
        return check_main(argv[1])
    if argv[:2] == ["run", "--plan"] and len(argv) == 3:
        with open(argv[2]) as f:
            return run_suite(json.load(f), sys.stdout, None)  # local run: no stdin watch
    if argv[:1] == ["run"]:
        line = sys.stdin.readline()
        try:
            plan = json.loads(line)
        except ValueError:
            sys.stderr.write("nodecert_node run: the first stdin line must be the JSON plan\n")
            return 2
        local.save_plan(plan)  # scheduled runs judge with the same plan (if installed)
        return run_suite(plan, sys.stdout, sys.stdin)
    if argv[:1] == ["local-run"]:
        return local.main(argv[1:])
    if argv[:1] == ["list"]:
        print("\n".join(sorted(REGISTRY)))
        return 0
    sys.stderr.write("usage: python3 -m nodecert_node {run [--plan FILE]|check NAME|list|"
                     "local-run [--suite S] ...}\n")
    return 2
