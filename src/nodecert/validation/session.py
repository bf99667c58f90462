"""The SSH protocol with a node: ship the node code, send the plan, read its events.

Per host: connect (paramiko, strict host keys), install the node code
(content-addressed, once per version), start `python3 -m nodecert_node run`, send
the plan as one JSON line and read one JSON event per line back (hello, start,
result, done). Each result is saved as it arrives; a host that drops, hangs past
its limit or is interrupted keeps what finished and the rest becomes ERROR.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

import paramiko

from nodecert.bmc.judge import BMC_CHECKS
from nodecert.bmc.monitor import BmcMonitor
from nodecert.core import checks
from nodecert.core.textsafe import clean
from nodecert.runs.store import HostLink, HostRun
from nodecert.stack.manifest import Stack
from nodecert.transport.bundle import NODE_BASE, install_script
from nodecert.transport.events import BadEvent, LineReader, decode_event
from nodecert.transport.loadgate import LoadGate
from nodecert.transport.silence import NodeLimit
from nodecert.transport.ssh import (
    HANDSHAKE_TIMEOUT_S,
    BecomeError,
    Endpoint,
    Stopped,
    connect,
    describe_error,
    start,
)
from nodecert.validation.echoes import held_to_plan
from nodecert.validation.nodecmd import (
    MAX_ANSWER,
    NodeAnswerTooLarge,
    adopt_stack,
    exec_command,
    recorded_stack,
)
from nodecert.validation.progress import RunProgress
from nodecert_node.contract import Evidence, Verdict, error_result

Progress = Callable[[str], None]
HEARTBEAT_S = 15.0
# How long a node may stay silent between checks (after its hello or a result, before
# the next start); during a check, the check's own limit and 30 s of transit.
EVENT_SILENCE_S = 60.0


# Back-pressure: at most this many SSH handshakes, and node-code installs, at a time
# (nodecert policy: a handshake costs the controller a few ms of CPU and the bundle
# about 100 kB to encrypt; beyond these, more at once only queue for the same cores
# while connections wait for their first byte and risk the login timeout).
CONNECT_SLOTS = 64
INSTALL_SLOTS = 32
CONNECT_TRIES = 3  # a handshake failed by the controller's own lateness: tried again
# The node code's install in all (nodecert policy: about 100 kB unpacked and checked
# takes seconds; a node still busy with it after five minutes is lost, not waited on).
INSTALL_TOTAL_S = 300.0


class NodeSessions:
    def __init__(self, runs: dict[str, HostRun], links: dict[str, HostLink], say: Progress,
                 stop: threading.Event,
                 bundle: tuple[bytes, str], *, progress: RunProgress | None = None,
                 gate: LoadGate | None = None) -> None:
        self.runs = runs
        self.links = links  # how each host is reached: session state, never saved
        self.stop = stop
        self.bundle, self.sha = bundle
        self.progress = progress or RunProgress(runs, say, detail=True)
        self.connect_slots = threading.BoundedSemaphore(CONNECT_SLOTS)
        self.install_slots = threading.BoundedSemaphore(INSTALL_SLOTS)
        self.stacks: dict[str, Stack] = {}
        self.stacks_lock = threading.Lock()
        self.gate = gate or LoadGate()  # started by the caller for a real run

    def endpoint(self, hr: HostRun) -> Endpoint:
        return self.links[hr.host].endpoint

    def emit(self, hr: HostRun, text: str, *, alarm: bool = False) -> None:
        self.progress.emit(hr, text, alarm=alarm)

    def run_host(self, hr: HostRun) -> None:
        hr.started = time.time()
        hr.status = "running"
        hr.save(interim=True)
        monitor = self._bmc_monitor(hr)
        self.progress.connect_started(hr.host)
        try:
            client = self._connect(hr)
        except (paramiko.SSHException, OSError, Stopped) as exc:
            self.progress.connect_done(hr.host)
            if isinstance(exc, Stopped):  # Ctrl-C: ended at once, not at the time limit
                hr.status, hr.error = "interrupted", describe_error(exc, self.endpoint(hr))
                hr.finish_missing(hr.error, "NC-NOT-RUN-INTERRUPTED")
                self.emit(hr, f"INTERRUPTED: {hr.error}")
            else:
                hr.status, hr.error = "unreachable", describe_error(exc, self.endpoint(hr))
                hr.finish_missing(f"host unreachable: {hr.error}", "NC-HOST-UNREACHABLE")
                self.emit(hr, f"UNREACHABLE: {hr.error}", alarm=True)
            self._bmc_results(hr, monitor)
            hr.finished = time.time()
            hr.save()
            return
        try:
            self._session(hr, client)
        except Exception as exc:
            hr.status = "lost"
            hr.error = f"internal error while handling this host: {type(exc).__name__}: {exc}"
            self._close(hr)
        finally:
            self.progress.connect_done(hr.host)
            client.close()
            self._bmc_results(hr, monitor)
            hr.finished = time.time()
            hr.save()

    def _connect(self, hr: HostRun) -> paramiko.SSHClient:
        """Connect within the back-pressure: a slot, then the controller keeping up. A
        handshake that failed while the controller itself was late (saturated, or a
        third of the handshake's limit lost to its own lateness) is tried again, up to
        CONNECT_TRIES in all: the time limit was spent waiting here, not on the host. A
        refused key or login never is."""
        for attempt in range(1, CONNECT_TRIES + 1):
            with self.connect_slots:
                self.gate.admit(self.stop)
                if self.stop.is_set():
                    raise Stopped(f"stopped before connecting to {hr.host}")
                t0, mark = time.monotonic(), self.gate.mark()
                try:
                    return connect(self.endpoint(hr), stop=self.stop)
                except (paramiko.BadHostKeyException, paramiko.AuthenticationException):
                    raise
                except (paramiko.SSHException, OSError) as exc:
                    late = self.gate.late_since(mark)
                    if attempt == CONNECT_TRIES or "known_hosts" in str(exc) or not (
                            self.gate.overloaded_since(t0) or late >= HANDSHAKE_TIMEOUT_S / 3):
                        raise
                    self.emit(hr, f"connection failed while the controller was late "
                                  f"({late:.1f} s of its own; {type(exc).__name__}: {exc}); "
                                  f"trying again ({attempt + 1}/{CONNECT_TRIES})")
        raise AssertionError("unreachable")  # the loop returns or raises

    def _bmc_monitor(self, hr: HostRun) -> BmcMonitor | None:
        """The host's BMC, sampled while its checks run (none without nodecert_bmc)."""
        bmc = self.links[hr.host].bmc
        if bmc is None:
            return None
        monitor = BmcMonitor(bmc, host_dir=hr.out_dir, limits=hr.plan.limits(),
                             simulated=hr.simulated, current=lambda: hr.current)
        monitor.start()
        self.emit(hr, f"BMC {bmc.describe()}: sampling every {bmc.sample_s} s")
        return monitor

    def _bmc_results(self, hr: HostRun, monitor: BmcMonitor | None) -> None:
        if monitor is None:
            self._firmware_result(hr, None)
            return
        monitor.simulated = hr.simulated  # known once the node said hello
        try:
            results = monitor.finish()
        except Exception as exc:  # the BMC's fault never sinks the node's results
            results = [error_result(c, f"internal error while reading the BMC: "
                                       f"{type(exc).__name__}: {exc}") for c in BMC_CHECKS]
        hr.results.extend(results)
        for r in results:
            self.emit(hr, f"{r.check} {r.verdict.name}"
                      f"{' (SIMULATED)' if r.simulated else ''} - {r.summary[:110]}",
                      alarm=r.verdict >= Verdict.FAIL)
        self._firmware_result(hr, monitor)

    def _firmware_result(self, hr: HostRun, monitor: BmcMonitor | None) -> None:
        """The checks judged once the run and the BMC's readings are in (the firmware
        recipe, the BIOS profile, where the host names one): what the BMC and the node's
        own checks report, against them."""
        readings = checks.HostReadings(hr.recipe, hr.bios, monitor, list(hr.results))
        for decl in checks.after_bmc():
            try:
                got = decl.after_bmc(readings) if decl.after_bmc else None
            except Exception as exc:  # never sinks the node's results
                got = error_result(decl.id, f"internal error while judging it: "
                                            f"{type(exc).__name__}: {exc}")
            if got is None:
                continue
            res = got.with_(simulated=hr.simulated)
            hr.results.append(res)
            self.emit(hr, f"{res.check} {res.verdict.name}"
                      f"{' (SIMULATED)' if res.simulated else ''} - {res.summary[:110]}",
                      alarm=res.verdict >= Verdict.FAIL)

    def _exec(self, client: paramiko.SSHClient, ep: Endpoint, cmd: str, data: bytes | None,
              timeout: float, *, root: bool = True,
              total_s: float | None = None) -> tuple[int, str]:
        return exec_command(client, ep, cmd, data, timeout, root=root, clock=self.gate.clock,
                            stop=self.stop, total_s=total_s)

    def _install_code(self, client: paramiko.SSHClient, hr: HostRun) -> str:
        """Ship the node code once per version (content-addressed directory), the same
        way the validators role installs it (install_script); as root (sudo for a
        non-root user with become)."""
        with self.install_slots:
            rc, out = self._exec(client, self.endpoint(hr), install_script(self.sha[:16], "-"),
                                 self.bundle, 60, total_s=INSTALL_TOTAL_S)
        if rc != 0:
            hint = (" (sudo wants a password: give --become-password-file, or a vaulted "
                    "ansible_become_password with --vault-password-file)"
                    if "password is required" in out else "")
            raise OSError(f"could not install the node code in {NODE_BASE}: "
                          f"{clean(out[-300:])}{hint}")
        return f"{NODE_BASE}/{self.sha[:16]}"

    def _prepare(self, hr: HostRun, client: paramiko.SSHClient) -> str | None:
        """Install the node code and read the recorded stack; the code's directory, or
        None when the host ended here (lost, with its reason)."""
        try:
            remote = self._install_code(client, hr)
            if hr.stack is None:
                try:
                    self._adopt_recorded_stack(hr, client)
                except NodeAnswerTooLarge as exc:
                    raise NodeAnswerTooLarge(f"reading the node's recorded stack: {exc}") \
                        from exc
            return remote
        except (BecomeError, NodeAnswerTooLarge) as exc:
            hr.status, hr.error = "lost", str(exc)
        except (paramiko.SSHException, OSError, TimeoutError) as exc:
            hr.status, hr.error = "lost", f"setting up the node code failed: {exc}"
        except Stopped:
            hr.status = "interrupted"
            hr.error = "interrupted by the operator (Ctrl-C) while the node code was installed"
        finally:
            self.progress.connect_done(hr.host)
        lost = hr.status == "lost"
        hr.finish_missing(hr.error, "NC-HOST-LOST" if lost else "NC-NOT-RUN-INTERRUPTED")
        self.emit(hr, f"{'ERROR' if lost else 'INTERRUPTED'}: {hr.error}", alarm=lost)
        return None

    def _session(self, hr: HostRun, client: paramiko.SSHClient) -> None:
        remote = self._prepare(hr, client)
        if remote is None:
            return
        clock = self.gate.clock
        chan = start(client, self.endpoint(hr),
                     f"cd {shlex.quote(remote)} && exec {shlex.quote(self.endpoint(hr).python)} "
                     "-m nodecert_node run", clock=clock, stop=self.stop)
        chan.sendall((json.dumps(hr.plan.as_dict()) + "\n").encode())
        reader = LineReader(chan)
        # Both limits count on the node's clock: a starved controller reads late, and
        # that lateness is its own, not the node's silence.
        silence = NodeLimit(EVENT_SILENCE_S, clock)
        host_limit = NodeLimit(float(hr.plan.host_timeout_s), clock)
        try:
            while hr.status == "running":
                raw = reader.line((silence, host_limit), self.stop)
                if raw is None:
                    break
                quiet = self._on_event(hr, decode_event(raw, hr.checks))
                if quiet is not None:
                    silence.reset(quiet)
        except TimeoutError:
            hr.status = "lost"
            what = f"during {hr.current}" if hr.current else "between checks"
            hr.error = (f"host time limit of {hr.plan.host_timeout_s:g} s reached {what}"
                        if host_limit.left() <= 0 else
                        f"no answer from the node {what} within its time limit")
        except InterruptedError:
            hr.status, hr.error = "interrupted", "interrupted by the operator (Ctrl-C)"
        except (OSError, paramiko.SSHException) as exc:
            hr.status = "lost"
            hr.error = (f"connection lost during {hr.current or 'the run'}: "
                        f"{type(exc).__name__}: {exc}")
        except BadEvent as exc:
            hr.status = "lost"
            hr.error = f"the node sent a bad event during {hr.current or 'the run'}: {exc}"
            hr.bad_output = exc.text
        finally:
            chan.close()  # the node runner sees EOF and kills what is still running
        self._close(hr)

    def _adopt_recorded_stack(self, hr: HostRun, client: paramiko.SSHClient) -> None:
        stack = recorded_stack(client, self.endpoint(hr), cache=self.stacks,
                               lock=self.stacks_lock, clock=self.gate.clock, stop=self.stop)
        if stack is not None:
            adopt_stack(hr, stack)
            self.emit(hr, f"stack {stack.name}: recorded by provisioning on the node")

    def _on_event(self, hr: HostRun, ev: dict[str, Any]) -> float | None:
        """Apply one node event; returns how long the node may now stay silent, when
        that changes."""
        kind = ev.get("event")
        total = len(hr.checks)
        if kind == "hello":
            hr.simulated = hr.simulated or bool(ev.get("simulated"))
            hr.node = {k: ev.get(k) for k in ("version", "python", "host")}
            drains = ev.get("slurm_drains")
            if isinstance(drains, dict):  # node text: plain strings, capped
                hr.node["slurm_drains"] = {str(k)[:128]: str(v)[:200]
                                           for k, v in list(drains.items())[:64]}
            hr.node["code_sha256"] = self.sha
            self.emit(hr, f"connected: node python {ev.get('python')}"
                      f"{', SIMULATED hardware' if hr.simulated else ''}; {total} checks")
        elif kind == "start":
            hr.current, hr.current_since = str(ev["check"]), time.monotonic()
            limit = hr.plan.timeout_for(hr.current)
            self.emit(hr, f"[{len(hr.results) + 1}/{total}] {hr.current} ...")
            return limit + 30  # the node enforces limit; +30 for transit
        elif kind == "result":
            res = held_to_plan(ev["result"], hr.plan)
            res = checks.judge(res, checks.JudgeContext(hr.host, hr.stack, hr.plan.spec))
            hr.results.append(res)
            hr.current = None
            hr.save(interim=True)
            self.emit(hr, f"[{len(hr.results)}/{total}] {res.check} {res.verdict.name}"
                      f"{' (SIMULATED)' if res.simulated else ''} {res.duration_s:.1f}s"
                      f" - {res.summary[:110]}  | {hr.counts()}, "
                      f"{time.time() - hr.started:.0f}s", alarm=res.verdict >= Verdict.FAIL)
            return EVENT_SILENCE_S
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
        done = {r.check for r in hr.results}
        blamed = hr.current or (next((c for c in hr.checks if c not in done), None)
                                if hr.bad_output else None)
        if blamed and hr.status == "lost":
            shown = f"{hr.error}\n--- what the node sent ---\n{hr.bad_output}" \
                if hr.bad_output else hr.error
            hr.results.append(error_result(
                blamed, hr.error, fault_code="NC-HOST-LOST",
                evidence=(Evidence.of("control side", "nodecert validate", None, shown),),
                remediation="Check the node's console/BMC: a node that drops off the network "
                            "or hangs during validation is not ready.")
                .with_(simulated=hr.simulated))
        hr.finish_missing(hr.error, code)
        self.emit(hr, f"{'INTERRUPTED' if hr.status == 'interrupted' else 'ERROR'}: {hr.error}",
                  alarm=True)

    def heartbeat(self, done: threading.Event) -> None:
        """Once a second the run's summary (or live view); every HEARTBEAT_S a line for
        each check still running, into its host's log (and on screen in detail mode)."""
        last = time.monotonic()
        while not done.wait(1.0):
            self.progress.tick()
            if time.monotonic() - last < HEARTBEAT_S:
                continue
            last = time.monotonic()
            for hr in list(self.runs.values()):
                if hr.current and time.monotonic() - hr.current_since > HEARTBEAT_S:
                    self.emit(hr, f"... {hr.current} still running "
                              f"({time.monotonic() - hr.current_since:.0f}s)")


__all__ = ["HEARTBEAT_S", "MAX_ANSWER", "NodeAnswerTooLarge", "NodeSessions", "exec_command"]
