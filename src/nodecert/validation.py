"""`nodecert validate`: run the node-side checks on every host, in parallel, over SSH.

Per host: connect (paramiko, strict host keys), ship the node code (validators/
nodecert_node, content-addressed, once per version), send the plan (checks,
spec, resolved thresholds, options) and read one JSON event per line back. Each
Result is written to runs/<run>/<host>/results.json as it arrives (atomically),
so an interrupted or dropped run keeps what finished and marks the rest as not
run. An unreachable host is an ERROR for that host; the others go on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

import nodecert_node
from nodecert import conformance, thresholds
from nodecert.compat import load_matrix
from nodecert.errors import InventoryError
from nodecert.inventory import HostSpec, hostvars, load_inventory
from nodecert.nodessh import Endpoint, connect, describe_error
from nodecert.stacks import Stack, find_stack
from nodecert_node.result import Evidence, Result, Verdict, error_result, worst

Progress = Callable[[str], None]
SCHEMA = "nodecert.validation/v1"
REMOTE_BASE = "/var/tmp/nodecert/node"
DEFAULT_SCRATCH = "/var/tmp/nodecert/scratch"
HEARTBEAT_S = 15.0


def node_code_dir() -> Path:
    return Path(nodecert_node.__file__).resolve().parent


def node_bundle() -> tuple[bytes, str]:
    """The node code as a reproducible tar.gz and its sha256."""
    src = node_code_dir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in sorted(src.rglob("*")):
            if "__pycache__" in path.parts or path.is_dir():
                continue
            info = tar.gettarinfo(str(path), arcname=str(Path("nodecert_node") /
                                                          path.relative_to(src)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def _atomic_write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


@dataclass
class HostRun:
    host: str
    spec: HostSpec
    endpoint: Endpoint
    plan: dict[str, Any]
    stack: Stack | None
    out_dir: Path
    status: str = "pending"  # pending|running|done|unreachable|lost|interrupted
    error: str = ""
    results: list[Result] = field(default_factory=list)
    current: str | None = None
    current_since: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    simulated: bool = False
    node: dict[str, Any] = field(default_factory=dict)

    @property
    def checks(self) -> list[str]:
        return list(self.plan["checks"])

    @property
    def verdict(self) -> Verdict:
        # Only a finished run with a result for every planned check can be better
        # than ERROR: a verdict must never claim checks that did not run.
        done = {r.check for r in self.results}
        if self.status != "done" or not set(self.checks) <= done:
            return Verdict.ERROR
        return worst(r.verdict for r in self.results)

    def counts(self) -> str:
        c = dict.fromkeys(Verdict, 0)
        for r in self.results:
            c[r.verdict] += 1
        return " ".join(f"{n} {v.name}" for v, n in c.items() if n)

    def finish_missing(self, why: str, code: str) -> None:
        """Every check without a Result becomes ERROR (never silently absent)."""
        done = {r.check for r in self.results}
        for name in self.checks:
            if name not in done:
                self.results.append(error_result(
                    name, f"not run: {why}", fault_code=code,
                    remediation="Fix the cause and re-run `nodecert validate` for this host.")
                    .with_(simulated=self.simulated))

    def as_dict(self) -> dict[str, Any]:
        ident = next((r.facts.get("identity") for r in self.results
                      if r.check == "hardware.inventory" and r.facts.get("identity")), None)
        return {
            "schema": SCHEMA, "host": self.host, "run_id": self.plan["run_id"],
            "suite": self.plan["suite"], "status": self.status, "error": self.error,
            "verdict": self.verdict.name, "simulated": self.simulated,
            "started": self.started, "finished": self.finished, "node": self.node,
            "spec": self.spec.as_dict(), "stack": self.stack.name if self.stack else None,
            "thresholds": self.plan["thresholds"], "options": self.plan["options"],
            "identity": ident, "results": [r.as_dict() for r in self.results],
        }

    def save(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.out_dir / "results.json", self.as_dict())


@dataclass
class ValidationRun:
    run_dir: Path
    suite: str
    hosts: dict[str, HostRun]
    interrupted: bool = False

    @property
    def verdict(self) -> Verdict:
        return worst(h.verdict for h in self.hosts.values())

    def summary(self) -> dict[str, Any]:
        return {"schema": "nodecert.validation-run/v1", "run_dir": str(self.run_dir),
                "suite": self.suite, "interrupted": self.interrupted,
                "verdict": self.verdict.name,
                "hosts": {n: {"verdict": h.verdict.name, "status": h.status, "error": h.error,
                              "simulated": h.simulated, "counts": h.counts(),
                              "results": str(h.out_dir / "results.json")}
                          for n, h in sorted(self.hosts.items())}}


def build_plan(spec: HostSpec, suite: thresholds.Suite, stack: Stack | None, run_id: str, *,
               cli_thresholds: dict[str, Any], scratch: str | None,
               checks: tuple[str, ...] = (), host_timeout_s: float | None = None,
               option_overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    v = spec.validation
    over = option_overrides or {}
    storage = {**suite.storage, **over.get("storage", {})}
    storage["targets"] = [scratch] if scratch else list(v.get("storage_targets")
                                                          or [DEFAULT_SCRATCH])
    storage["allow_raw_devices"] = list(v.get("allow_raw_devices") or [])
    plan_spec: dict[str, Any] = {"gpu_model": spec.gpu_model, "gpu_count": spec.gpu_count,
                 "cpu_cores": spec.cpu_cores, "ram_gb": spec.ram_gb,
                 "nvme_count": spec.nvme_count, "nvme_min_gb": spec.nvme_min_gb,
                 **{k: v[k] for k in ("cpu_model", "nvme_rated_seq_read_mbps",
                                      "nvme_rated_seq_write_mbps", "nvme_rated_rand_read_iops")
                    if k in v}}
    chosen = [c for c in suite.checks if not checks or c in checks]  # suite order
    return {
        "schema": "nodecert.plan/v1", "run_id": run_id, "host": spec.name,
        "suite": suite.name, "checks": chosen,
        "check_timeout_s": suite.check_timeout_s, "tool_timeout_s": 60,
        # The whole host: every check at its limit, plus connection and set-up.
        "host_timeout_s": host_timeout_s or suite.check_timeout_s * len(chosen) + 120,
        "simulated": spec.simulated, "spec": plan_spec,
        "thresholds": thresholds.resolve(spec.gpu_model, inventory=v.get("thresholds"),
                                         cli=cli_thresholds, host=spec.name),
        "options": {"storage": storage, "fabric": {**suite.fabric, **over.get("fabric", {})},
                    "load": {**suite.load, **over.get("load", {})}},
        "conformance": {"stack": stack.name, "script": conformance.script_for(stack)}
        if stack else {},
        "framework": framework_plan(stack) if stack else {},
    }


def framework_plan(stack: Stack) -> dict[str, Any]:
    """What the framework checks need: the environment's python and the pinned versions."""
    fw = stack.framework
    tf_cuda = ""
    if fw.tensorflow:
        build = load_matrix().tensorflow_builds.get(fw.tensorflow)
        tf_cuda = str(build.cuda) if build else ""
    return {"python": f"{conformance.env_dir(stack)}/bin/python",
            "torch": str(fw.pytorch) if fw.pytorch else "",
            "torch_cuda": fw.pytorch.cuda if fw.pytorch else "",
            "tensorflow": fw.tensorflow or "", "tensorflow_cuda": tf_cuda,
            "cudnn": str(stack.cudnn), "nccl": str(stack.nccl)}


def judge_conformance(res: Result, host: str, stack: Stack | None) -> Result:
    """Turn the node's gathered conformance facts into the judged Result."""
    output = res.facts.get("conformance_output")
    if stack is None or output is None:
        return res
    c = conformance.judge(host, stack, str(output))
    base = res.with_(value={"checked": c.checked, "problems": len(c.problems)},
                     facts={"stack": stack.name,
                            "software": conformance.software(str(output))},
                     fault_code="", remediation="")
    if c.ok:
        return base.with_(verdict=Verdict.PASS,
                          summary=f"stack {stack.name}: all {c.checked} pinned items installed, "
                                  "held and running")
    more = f" (+{len(c.problems) - 1} more)" if len(c.problems) > 1 else ""
    return base.with_(verdict=Verdict.FAIL, summary=f"stack {stack.name}: {c.problems[0]}{more}",
                      findings=tuple(c.problems), fault_code="NC-STACK-DRIFT",
                      remediation=f"Re-run `nodecert provision --stack {stack.name}` on this "
                                  "host (or find who changed it), then validate again.")


class _LineReader:
    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan
        self.buf = b""

    def line(self, deadline: float, stop: threading.Event) -> bytes | None:
        """The next line, or None at EOF; TimeoutError past deadline; stops on `stop`."""
        while b"\n" not in self.buf:
            if stop.is_set():
                raise InterruptedError
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.chan.settimeout(min(left, 1.0))
            try:
                chunk = self.chan.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line


class _Runner:
    def __init__(self, runs: dict[str, HostRun], say: Progress, stop: threading.Event,
                 bundle: tuple[bytes, str]) -> None:
        self.runs = runs
        self.say = say
        self.stop = stop
        self.bundle, self.sha = bundle
        self.lock = threading.Lock()

    def emit(self, hr: HostRun, text: str) -> None:
        with self.lock:
            self.say(f"{hr.host:<14} {text}")

    def run_host(self, hr: HostRun) -> None:
        hr.started = time.time()
        hr.status = "running"
        hr.save()
        try:
            client = connect(hr.endpoint)
        except (paramiko.SSHException, OSError) as exc:
            hr.status, hr.error = "unreachable", describe_error(exc, hr.endpoint)
            hr.finish_missing(f"host unreachable: {hr.error}", "NC-HOST-UNREACHABLE")
            self.emit(hr, f"UNREACHABLE: {hr.error}")
            hr.finished = time.time()
            hr.save()
            return
        try:
            self._session(hr, client)
        finally:
            client.close()
            hr.finished = time.time()
            hr.save()

    def _exec(self, client: paramiko.SSHClient, cmd: str, data: bytes | None,
              timeout: float) -> tuple[int, str]:
        chan = client.get_transport().open_session()  # type: ignore[union-attr]
        chan.settimeout(timeout)
        chan.exec_command(cmd)
        if data is not None:
            chan.sendall(data)
        chan.shutdown_write()
        out = b""
        while True:
            chunk = chan.recv(65536)
            if not chunk:
                break
            out += chunk
        rc = chan.recv_exit_status()
        chan.close()
        return rc, out.decode(errors="replace")

    def _install_code(self, client: paramiko.SSHClient) -> str:
        """Ship the node code once per version (content-addressed directory)."""
        remote = f"{REMOTE_BASE}/{self.sha[:16]}"
        _, out = self._exec(client, f"test -f {remote}/.complete && echo present", None, 30)
        if "present" not in out:
            rc, out = self._exec(
                client, f"set -e; rm -rf {remote}.tmp; mkdir -p {remote}.tmp; "
                f"tar -xzf - -C {remote}.tmp; touch {remote}.tmp/.complete; "
                f"rm -rf {remote}; mv {remote}.tmp {remote}", self.bundle, 60)
            if rc != 0:
                raise OSError(f"could not install the node code in {remote}: {out[-300:]}")
        return remote

    def _session(self, hr: HostRun, client: paramiko.SSHClient) -> None:
        try:
            remote = self._install_code(client)
        except (paramiko.SSHException, OSError, TimeoutError) as exc:
            hr.status, hr.error = "lost", f"setting up the node code failed: {exc}"
            hr.finish_missing(hr.error, "NC-HOST-LOST")
            self.emit(hr, f"ERROR: {hr.error}")
            return
        chan = client.get_transport().open_session()  # type: ignore[union-attr]
        chan.exec_command(f"cd {remote} && exec {hr.endpoint.python} -m nodecert_node run")
        chan.sendall((json.dumps(hr.plan) + "\n").encode())
        reader = _LineReader(chan)
        deadline = time.monotonic() + 60
        host_end = time.monotonic() + float(hr.plan["host_timeout_s"])
        try:
            while hr.status == "running":
                raw = reader.line(min(deadline, host_end), self.stop)
                if raw is None:
                    break
                deadline = self._on_event(hr, json.loads(raw)) or deadline
        except TimeoutError:
            hr.status = "lost"
            what = hr.current or "between checks"
            hr.error = (f"host time limit of {hr.plan['host_timeout_s']:g} s reached during "
                        f"{what}" if time.monotonic() >= host_end else
                        f"no answer from the node during {what} within its time limit")
        except InterruptedError:
            hr.status, hr.error = "interrupted", "interrupted by the operator (Ctrl-C)"
        except (OSError, paramiko.SSHException) as exc:
            hr.status = "lost"
            hr.error = (f"connection lost during {hr.current or 'the run'}: "
                        f"{type(exc).__name__}: {exc}")
        except ValueError as exc:
            hr.status, hr.error = "lost", f"node sent something that is not an event: {exc}"
        finally:
            chan.close()  # the node runner sees EOF and kills what is still running
        self._close(hr)

    def _on_event(self, hr: HostRun, ev: dict[str, Any]) -> float | None:
        """Apply one node event; returns the new read deadline when it changes."""
        kind = ev.get("event")
        total = len(hr.checks)
        if kind == "hello":
            hr.simulated = hr.simulated or bool(ev.get("simulated"))
            hr.node = {k: ev.get(k) for k in ("version", "python", "host")}
            hr.node["code_sha256"] = self.sha
            self.emit(hr, f"connected: node python {ev.get('python')}"
                      f"{', SIMULATED hardware' if hr.simulated else ''}; {total} checks")
        elif kind == "start":
            hr.current, hr.current_since = str(ev["check"]), time.monotonic()
            limit = float((hr.plan.get("check_timeouts_s") or {}).get(
                hr.current, hr.plan["check_timeout_s"]))
            self.emit(hr, f"[{len(hr.results) + 1}/{total}] {hr.current} ...")
            return time.monotonic() + limit + 30  # the node enforces limit; +30 for transit
        elif kind == "result":
            res = Result.from_dict(ev["result"])
            if res.check == "stack.conformance":
                res = judge_conformance(res, hr.host, hr.stack)
            hr.results.append(res)
            hr.current = None
            hr.save()
            self.emit(hr, f"[{len(hr.results)}/{total}] {res.check} {res.verdict.name}"
                      f"{' (SIMULATED)' if res.simulated else ''} {res.duration_s:.1f}s"
                      f" - {res.summary[:110]}  | {hr.counts()}, "
                      f"{time.time() - hr.started:.0f}s")
            return time.monotonic() + 60
        elif kind == "done":
            hr.status = "interrupted" if ev.get("interrupted") else "done"
            if ev.get("interrupted"):
                hr.error = "the node stopped the run (its input closed)"
        return None

    def _close(self, hr: HostRun) -> None:
        if hr.status == "running":
            hr.status = "lost"
            hr.error = f"connection closed during {hr.current or 'the run'}"
        if hr.status not in ("lost", "interrupted"):
            hr.finish_missing("the node did not report this check", "NC-NOT-REPORTED")
            self.emit(hr, f"finished: {hr.verdict.name} ({hr.counts()}) in "
                      f"{time.time() - hr.started:.0f}s")
            return
        code = "NC-NOT-RUN-INTERRUPTED" if hr.status == "interrupted" else "NC-HOST-LOST"
        if hr.current and hr.status == "lost":
            hr.results.append(error_result(
                hr.current, hr.error, fault_code="NC-HOST-LOST",
                evidence=(Evidence.of("control side", "nodecert validate", None, hr.error),),
                remediation="Check the node's console/BMC: a node that drops off the network "
                            "or hangs during validation is not ready.")
                .with_(simulated=hr.simulated))
        hr.finish_missing(hr.error, code)
        self.emit(hr, f"{'INTERRUPTED' if hr.status == 'interrupted' else 'ERROR'}: {hr.error}")

    def heartbeat(self, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_S):
            for hr in self.runs.values():
                if hr.current and time.monotonic() - hr.current_since > HEARTBEAT_S:
                    self.emit(hr, f"... {hr.current} still running "
                              f"({time.monotonic() - hr.current_since:.0f}s)")


def _prepare(inventory: Path, suite: thresholds.Suite, limit: tuple[str, ...],
             stack: str | None, run_dir: Path, *, cli_thresholds: dict[str, Any],
             scratch: str | None, checks: tuple[str, ...],
             host_timeout_s: float | None,
             option_overrides: dict[str, dict[str, Any]] | None) -> dict[str, HostRun]:
    """Plans for every host; raises NodecertError on any bad input, before any SSH."""
    unknown = [c for c in checks if c not in suite.checks]
    if unknown:
        raise InventoryError(f"check(s) {', '.join(unknown)} are not in suite {suite.name}",
                             hint=f"suite {suite.name} runs: {', '.join(suite.checks)}")
    specs = load_inventory(inventory)
    if limit:
        missing = [h for h in limit if h not in specs]
        if missing:
            raise InventoryError(f"--limit names unknown host(s): {', '.join(missing)}",
                                 hint=f"hosts in {inventory}: {', '.join(sorted(specs))}")
        specs = {h: specs[h] for h in limit}
    if not specs:
        raise InventoryError(f"no hosts in {inventory}", hint="add hosts with their spec vars")
    hv = hostvars(inventory, sorted(specs))
    stacks: dict[str, Stack] = {}
    runs: dict[str, HostRun] = {}
    for name, spec in sorted(specs.items()):
        sname = stack or spec.stack
        st = stacks.setdefault(sname, find_stack(sname)) if sname else None
        plan = build_plan(spec, suite, st, run_dir.name, cli_thresholds=cli_thresholds,
                          scratch=scratch, checks=checks, host_timeout_s=host_timeout_s,
                          option_overrides=option_overrides)
        runs[name] = HostRun(name, spec, Endpoint.from_hostvars(name, hv[name]), plan, st,
                             run_dir / name, simulated=spec.simulated)
    return runs


def validate(inventory: Path, *, suite: str = "quick", limit: tuple[str, ...] = (),
             stack: str | None = None, forks: int = 16, runs_dir: Path = Path("runs"),
             progress: Progress | None = None, cli_thresholds: dict[str, Any] | None = None,
             scratch: str | None = None, checks: tuple[str, ...] = (),
             host_timeout_s: float | None = None,
             option_overrides: dict[str, dict[str, Any]] | None = None,
             stop: threading.Event | None = None) -> ValidationRun:
    """Validate every (limited) host. Raises NodecertError only on bad input."""
    say: Progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    the_suite = thresholds.suite(suite)
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
    run_dir = (runs_dir / run_id).resolve()
    runs = _prepare(inventory, the_suite, limit, stack, run_dir,
                    cli_thresholds=cli_thresholds or {}, scratch=scratch, checks=checks,
                    host_timeout_s=host_timeout_s, option_overrides=option_overrides)
    run_dir.mkdir(parents=True)
    result = ValidationRun(run_dir, suite, runs)
    for hr in runs.values():
        hr.save()
    stop = stop or threading.Event()
    runner = _Runner(runs, say, stop, node_bundle())
    n_checks = len(checks or the_suite.checks)
    say(f"validating {len(runs)} host(s), suite {suite} ({n_checks} checks); "
        f"results in {run_dir}")
    done = threading.Event()
    threading.Thread(target=runner.heartbeat, args=(done,), daemon=True).start()
    pool = ThreadPoolExecutor(max_workers=max(1, forks), thread_name_prefix="validate")
    futures = [pool.submit(runner.run_host, hr) for hr in runs.values()]
    try:
        for f in futures:
            while not f.done():
                with contextlib.suppress(FutureTimeout):
                    f.result(timeout=1.0)
            f.result()
    except KeyboardInterrupt:
        stop.set()
        say("interrupted: stopping the checks still running, keeping finished results ...")
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        done.set()
        pool.shutdown(wait=True)
    if stop.is_set():
        result.interrupted = True
        for hr in runs.values():
            if hr.status == "pending":
                hr.status, hr.error = "interrupted", "interrupted before the host started"
                hr.finish_missing(hr.error, "NC-NOT-RUN-INTERRUPTED")
                hr.save()
    _atomic_write(run_dir / "validate.json", result.summary())
    return result


__all__ = ["HostRun", "ValidationRun", "build_plan", "node_bundle", "validate"]
