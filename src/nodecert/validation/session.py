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
from collections.abc import Sequence

import paramiko

from nodecert.core.textsafe import clean
from nodecert.runs.store import HostLink, HostRun
from nodecert.stack.manifest import Stack
from nodecert.transport.bundle import NODE_BASE, install_script, node_bundle
from nodecert.transport.events import LineReader
from nodecert.transport.loadgate import LoadGate
from nodecert.transport.silence import NodeLimit
from nodecert.transport.ssh import HANDSHAKE_TIMEOUT_S, BecomeError, Endpoint, connect, start
from nodecert.transport.sshfail import (
    Stopped,
    describe_error,
    is_refusal,
    is_unfinished_login,
)
from nodecert.validation.nodecmd import (
    MAX_ANSWER,
    NodeAnswerTooLarge,
    adopt_stack,
    exec_command,
)
from nodecert.validation.nodecmd import recorded_stack as read_recorded_stack
from nodecert.validation.progress import RunProgress
from nodecert.validation.runner import (
    Fetched,
    HostUnreachable,
    Progress,
    Runner,
    register,
)

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


@register
class SshRunner(Runner):
    """The SSH runner: per host, connect (strict host keys), ship the node code, start
    the node's run and read its events."""

    name = "ssh"

    def __init__(self, runs: dict[str, HostRun], links: dict[str, HostLink], say: Progress,
                 stop: threading.Event,
                 bundle: tuple[bytes, str] | None = None, *,
                 progress: RunProgress | None = None, gate: LoadGate | None = None) -> None:
        self.bundle, sha = bundle or node_bundle()
        super().__init__(runs, links, say, stop, progress=progress, gate=gate, code_sha=sha)
        self.connect_slots = threading.BoundedSemaphore(CONNECT_SLOTS)
        self.install_slots = threading.BoundedSemaphore(INSTALL_SLOTS)
        self.stacks: dict[str, Stack] = {}
        self.stacks_lock = threading.Lock()

    def endpoint(self, hr: HostRun) -> Endpoint:
        return self.links[hr.host].endpoint

    def execute(self, hr: HostRun) -> None:
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
            return
        try:
            self._session(hr, client)
        finally:
            self.progress.connect_done(hr.host)
            client.close()

    def fetch(self, hr: HostRun, command: str, *, limit: int, timeout: float,
              recorded_stack: bool = False) -> Fetched:
        ep = self.endpoint(hr)
        try:
            client = connect(ep)
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(describe_error(exc, ep)) from exc
        try:
            # as root (through sudo for a non-root user): the node's history is root's
            chan = start(client, ep, command, timeout=timeout)
            chan.settimeout(timeout)
            raw = b""
            while len(raw) < limit:
                chunk = chan.recv(65536)
                if not chunk:
                    break
                raw += chunk
            return Fetched(raw, read_recorded_stack(client, ep) if recorded_stack else None)
        except paramiko.SSHException as exc:
            raise OSError(str(exc)) from exc
        finally:
            client.close()

    def _connect(self, hr: HostRun) -> paramiko.SSHClient:
        """Connect within the back-pressure: a slot, then the controller keeping up. A
        handshake that failed while the controller itself was late (saturated, or a
        third of the handshake's limit lost to its own lateness) is tried again, up to
        CONNECT_TRIES in all: the time limit was spent waiting here, not on the host. So
        is a login the node took and did not finish (it is up, and busy). A refused or
        unknown key, or a refused login, never is."""
        for attempt in range(1, CONNECT_TRIES + 1):
            with self.connect_slots:
                self.gate.admit(self.stop)
                if self.stop.is_set():
                    raise Stopped(f"stopped before connecting to {hr.host}")
                t0, mark = time.monotonic(), self.gate.mark()
                try:
                    return connect(self.endpoint(hr), stop=self.stop)
                except (paramiko.SSHException, OSError) as exc:
                    late = self.gate.late_since(mark)
                    busy = is_unfinished_login(exc)
                    if attempt == CONNECT_TRIES or is_refusal(exc) or not (
                            busy or self.gate.overloaded_since(t0) or
                            late >= HANDSHAKE_TIMEOUT_S / 3):
                        raise
                    why = ("the node took the connection and did not finish the login"
                           if busy else "connection failed while the controller was late "
                           f"({late:.1f} s of its own)")
                    self.emit(hr, f"{why} ({type(exc).__name__}: {exc}); trying again "
                                  f"({attempt + 1}/{CONNECT_TRIES})")
        raise AssertionError("unreachable")  # the loop returns or raises

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

        def read(limits: Sequence[NodeLimit], stop: threading.Event) -> bytes | None:
            try:
                return reader.line(limits, stop)
            except paramiko.SSHException as exc:  # the session's loss, as the runner's
                raise OSError(str(exc)) from exc
        try:
            # Both limits count on the node's clock: a starved controller reads late, and
            # that lateness is its own, not the node's silence.
            self.follow(hr, read, clock)
        finally:
            chan.close()  # the node runner sees EOF and kills what is still running
        self._close(hr)

    def _adopt_recorded_stack(self, hr: HostRun, client: paramiko.SSHClient) -> None:
        stack = read_recorded_stack(client, self.endpoint(hr), cache=self.stacks,
                               lock=self.stacks_lock, clock=self.gate.clock, stop=self.stop)
        if stack is not None:
            adopt_stack(hr, stack)
            self.emit(hr, f"stack {stack.name}: recorded by provisioning on the node")



__all__ = ["MAX_ANSWER", "NodeAnswerTooLarge", "SshRunner", "exec_command"]
