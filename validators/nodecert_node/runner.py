"""The node-side suite runner: one child process per check, events as JSON lines.

`python3 -m nodecert_node run` reads the plan (one JSON line) on stdin and
writes one JSON event per line on stdout: hello, start, result, done. Each
check runs in its own process group with its own timeout, so a hung tool or a
crashed check becomes an ERROR result and the suite goes on. The runner adopts every
orphan of its checks (a child subreaper): whatever a check started that outlived it (a
tool's setsid'd workers, fio's job processes) is killed before the next check starts,
and the result says so. When stdin closes
(the control side went away or was interrupted), the running check is killed
and the runner exits: nothing keeps loading the GPUs behind the operator's back.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, TextIO

from nodecert_node import __version__, state, tools
from nodecert_node.context import Ctx
from nodecert_node.contract import Evidence, Plan, Result, Verdict, error_result
from nodecert_node.registry import discover, run_check

SIMULATED_MARK = "/etc/nodecert-lab/SIMULATED"
_lock = threading.Lock()
_stop_lock = threading.Lock()  # orders starting a check against stopping the run


def simulated(plan: Plan) -> bool:
    return plan.simulated or os.path.exists(
        os.environ.get("NODECERT_SIMULATED_MARK", SIMULATED_MARK))


def emit(out: TextIO, event: dict[str, Any]) -> None:
    with _lock:
        out.write(json.dumps(event, sort_keys=True) + "\n")
        out.flush()


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def adopt_orphans() -> bool:
    """Make this process the child subreaper of everything it starts (Linux 3.4+): a
    process whose parent died is reparented here, not to init, so it stays findable and
    killable. False where the kernel or libc does not allow it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def sweep(name: str, res: Result, before: set[int] | frozenset[int] = frozenset()) -> Result:
    """Kill whatever the check started that is still running (below this process now:
    its orphans were reparented here; `before`: what ran below it before the check, left
    alone), reap it, and say so in the result."""
    left = [p for p in tools.descendants(os.getpid()) if p not in before]
    if not left:
        return res
    names = []
    for p in left:
        try:
            with open(f"/proc/{p}/comm") as f:
                names.append(f"{f.read().strip()} ({p})")
        except OSError:
            names.append(f"({p})")
    for p in left:
        tools.kill_tree(p)
    deadline = time.monotonic() + 10
    for p in left:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(p, os.WNOHANG)[0] == p:
                    break
            except ChildProcessError:  # not our child (its own parent reaps it) or gone
                if not os.path.exists(f"/proc/{p}"):
                    break
            time.sleep(0.05)
    still = [p for p in left if os.path.exists(f"/proc/{p}")
             and not _zombie(p)]
    note = (f"{len(left)} process(es) {name} started outlived it and were killed before "
            f"the next check: {', '.join(names[:8])}"
            + (f"; still running: {still}" if still else ""))
    return res.with_(findings=(*res.findings, note))


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def run_one(name: str, plan: Plan, timeout: float,
            current: dict[str, Any]) -> Result:
    """Run a check in a child process group; timeout or crash -> ERROR with evidence."""
    start = time.monotonic()
    # Started and registered under the lock stop_current takes: a stop that lands while
    # the check is being started (between checks) still finds it, or keeps it from starting.
    with _stop_lock:
        if current.get("stopped"):
            return error_result(name, f"{name} was not started: the run was stopped",
                                fault_code="NC-CHECK-STOPPED", duration_s=0.0)
        proc = subprocess.Popen([sys.executable, "-m", "nodecert_node", "check", name],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        current["proc"] = proc
        current["pidfd"] = _pidfd(proc.pid)
    try:
        out, err = proc.communicate(json.dumps(plan.as_dict()).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc, current.get("pidfd"))
        out, err = proc.communicate()
        _remove_leftovers(plan, proc.pid)
        return error_result(
            name, f"{name} did not finish within {timeout:g} s and was stopped",
            evidence=(Evidence.of("partial output", f"nodecert_node check {name}", None,
                                  (out + err).decode("utf-8", "replace")),),
            fault_code="NC-CHECK-TIMEOUT", duration_s=time.monotonic() - start,
            remediation="A tool or the GPU hung: look at the partial output and the kernel "
                        "log; a GPU that hangs is not ready.")
    finally:
        with _stop_lock:
            current["proc"] = None
            fd, current["pidfd"] = current.get("pidfd"), None
        if fd is not None:
            os.close(fd)
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        return Result.from_dict(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError):
        return error_result(
            name, f"{name} crashed (exit status {proc.returncode})",
            evidence=(Evidence.of("stderr", f"nodecert_node check {name}", proc.returncode,
                                  (out + err).decode("utf-8", "replace")),),
            fault_code="NC-CHECK-CRASH", duration_s=time.monotonic() - start)


def _remove_leftovers(plan: Plan, pid: int) -> None:
    """A check killed outright cannot clean up: remove the scratch files it made (its
    work directory in each storage target carries its pid)."""
    for target in (plan.options.get("storage") or {}).get("targets") or []:
        if isinstance(target, str) and not target.startswith("/dev/"):
            shutil.rmtree(os.path.join(target, f"nodecert-fio-{pid}"), ignore_errors=True)


def _pidfd(pid: int) -> int | None:
    """A pidfd for the check (Linux 5.3+, Python 3.9+): it names that process and no
    other, whatever pid is later reused. None where there is none."""
    opener = getattr(os, "pidfd_open", None)
    try:
        return int(opener(pid)) if opener is not None else None
    except OSError:
        return None


def _alive(proc: subprocess.Popen[bytes], pidfd: int | None) -> bool:
    """Whether the check's process is still the one we started and not reaped: through
    its pidfd where there is one (a reaped process answers ESRCH, never a newcomer on
    its pid), else through Popen's own record."""
    send = getattr(signal, "pidfd_send_signal", None)
    if pidfd is not None and send is not None:
        try:
            send(pidfd, 0)
            return True
        except (ProcessLookupError, OSError):
            return False
    return proc.returncode is None


def _killpg(proc: subprocess.Popen[bytes], pidfd: int | None = None) -> None:
    """Stop a check: SIGTERM lets it kill the tools it started (each in its own process
    group), SIGKILL follows if it does not exit. Its group is signalled only while the
    check (the group's leader) is still ours: a check already ended and reaped has
    given up its pid, and another process may have it now."""
    if not _alive(proc, pidfd):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        if _alive(proc, pidfd):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def stop_current(current: dict[str, Any]) -> None:
    """Stop the check running now (its process group), if one is, and keep any other
    check of this run from starting."""
    with _stop_lock:
        current["stopped"] = True
        p, fd = current.get("proc"), current.get("pidfd")
        if fd is not None:
            fd = os.dup(fd)  # ours to close: run_one closes its own when the check ends
    try:
        if p is not None:
            _killpg(p, fd)
    finally:
        if fd is not None:
            os.close(fd)


def run_suite(plan: Plan, out: TextIO, stdin: TextIO | None,
              stop: threading.Event | None = None,
              current: dict[str, Any] | None = None) -> int:
    """Run the plan's checks, one event line each. The run stops between checks when
    `stop` is set (by the caller, or at EOF of `stdin`: the control side is gone); the
    caller stops the running check itself through `current` (stop_current)."""
    sim = simulated(plan)
    adopt_orphans()
    emit(out, {"event": "hello", "version": __version__, "python": platform.python_version(),
               "host": platform.node(), "simulated": sim, "checks": list(plan.checks),
               # the drains its scheduled runs made: the control side's repair gate resumes
               # only a drain whose reason is exactly one of these (or its own)
               "slurm_drains": dict(list(state.kept_drains().items())[:64]),
               # the Slurm job this run is part of, where Slurm started it (--runner slurm)
               **({"slurm_job_id": os.environ["SLURM_JOB_ID"]}
                  if os.environ.get("SLURM_JOB_ID") else {})})
    current = current if current is not None else {"proc": None}
    stop = stop or threading.Event()
    if stdin is not None:
        def watch() -> None:
            stdin.read()  # returns at EOF: the control side is gone
            stop.set()
            stop_current(current)
        threading.Thread(target=watch, daemon=True).start()
    verdicts: list[Verdict] = []
    for name in plan.checks:
        if stop.is_set():
            break
        emit(out, {"event": "start", "check": name, "t": time.time()})
        before = set(tools.descendants(os.getpid()))
        res = sweep(name, run_one(name, plan, plan.timeout_for(name), current), before)
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
    plan = Plan.from_dict(json.loads(sys.stdin.read()))
    res = run_check(name, Ctx(plan))
    sys.stdout.write(json.dumps(res.as_dict()) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "check":
        return check_main(argv[1])
    if argv[:2] == ["run", "--plan"] and len(argv) == 3:
        with open(argv[2]) as f:
            return run_suite(Plan.from_dict(json.load(f)), sys.stdout, None)  # no stdin watch
    if argv[:1] == ["run"]:
        line = sys.stdin.readline()
        try:
            raw = json.loads(line)
            plan = Plan.from_dict(raw)
        except ValueError as exc:
            sys.stderr.write(f"nodecert_node run: the first stdin line must be the JSON plan "
                             f"({exc})\n")
            return 2
        state.save_plan(raw)  # scheduled runs judge with the same plan (if installed)
        return run_suite(plan, sys.stdout, sys.stdin)
    if argv[:1] == ["list"]:
        specs = discover()
        if argv[1:] == ["--json"]:
            print(json.dumps([{"name": c.name, "description": c.description,
                               "order": c.order, "suites": list(c.suites),
                               "tools": list(c.tools), "needs": list(c.needs),
                               "module": c.module} for c in
                              sorted(specs.values(), key=lambda c: (c.order, c.name))],
                             indent=1))
        else:
            print("\n".join(sorted(specs)))
        return 0
    sys.stderr.write("usage: python3 -m nodecert_node {run [--plan FILE]|check NAME|list|"
                     "local-run [--suite S] ...|list [--json]}\n")
    return 2
