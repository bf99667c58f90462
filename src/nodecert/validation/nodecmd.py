"""The controller's own short commands on a node, outside the validation's event stream:
install the node code, read what provisioning recorded. Each answer is bounded in size
(MAX_ANSWER), in silence and in total time, and ends at once when the run is stopped.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import paramiko

from nodecert.core.errors import NodecertError
from nodecert.runs.layout import RunDir
from nodecert.runs.store import HostRun, record_host_plan
from nodecert.stack import conformance
from nodecert.stack.manifest import Stack, find_stack
from nodecert.transport.silence import Clock, NodeLimit
from nodecert.transport.ssh import STOP_POLL_S, Endpoint, start
from nodecert.transport.sshfail import Stopped
from nodecert.validation.plan import framework_plan

# What provisioning leaves on a node (roles/nodecert_common, record.yml).
RECORDED_STACK = "/etc/nodecert/provisioned.json"

# The most a node may answer to one of the controller's own commands (the install's
# lines, a 64 kB record); more is a broken or hostile node, not an answer to read.
MAX_ANSWER = 2**20


class NodeAnswerTooLarge(OSError):
    """A node answered a command with more than MAX_ANSWER bytes."""


def exec_command(client: paramiko.SSHClient, ep: Endpoint, cmd: str, data: bytes | None,
                 timeout: float, *, root: bool = True, clock: Clock = time.monotonic,
                 stop: threading.Event | None = None, total_s: float | None = None
                 ) -> tuple[int, str]:
    """(exit code, output; stderr too when it failed) of one command on the node.
    TimeoutError when the node stays silent for `timeout` s on `clock` (the node's clock:
    the controller's own lateness is not the node's silence), or has not finished after
    total_s in all (default: four silences) however it trickles; Stopped within
    STOP_POLL_S of `stop` being set."""
    total = total_s if total_s is not None else 4 * timeout
    end = clock() + total  # the node's clock too: the controller's lateness is its own
    name = cmd.split(maxsplit=1)[0] if cmd.strip() else "?"
    chan = start(client, ep, cmd, root=root, timeout=timeout, clock=clock, stop=stop)
    silence = NodeLimit(timeout, clock)

    def next_wait() -> float:
        """How long the next wait may last; raises when the run stopped or time is up."""
        if stop is not None and stop.is_set():
            raise Stopped(f"stopped while the node ran {name!r}")
        if clock() >= end:
            raise TimeoutError(f"the node had not finished {name!r} after {total:g} s")
        if silence.expired(chan):
            raise TimeoutError(f"no answer from the node within {timeout:g} s")
        return min(silence.wait_s(), STOP_POLL_S)

    try:
        # A command may end without reading its input (code already in place): its
        # output and exit status decide, not the channel closing under the send.
        chan.settimeout(timeout)
        with contextlib.suppress(OSError):
            if data is not None:
                chan.sendall(data)
            chan.shutdown_write()
        out = bytearray()
        while True:
            chan.settimeout(next_wait())
            try:
                chunk = chan.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_ANSWER:
                raise NodeAnswerTooLarge(f"the node answered more than {MAX_ANSWER // 2**20} "
                                         f"MiB to {name!r}: refused")
            silence.reset()
        # The exit status follows the output, maybe late: paramiko's event, waited on.
        while not chan.status_event.wait(next_wait()):
            pass
        rc = chan.recv_exit_status()
        err = b""
        while rc != 0 and chan.recv_stderr_ready() and len(err) < 65536:
            err += chan.recv_stderr(65536)  # why it failed (sudo's message, a shell error)
    finally:
        chan.close()
    return rc, (bytes(out) + err).decode(errors="replace")


def recorded_stack(client: paramiko.SSHClient, ep: Endpoint, *,
                   cache: dict[str, Stack] | None = None,
                   lock: threading.Lock | None = None,
                   clock: Clock = time.monotonic,
                   stop: threading.Event | None = None) -> Stack | None:
    """The stack the node's provisioning recorded (/etc/nodecert/provisioned.json), when
    that stack is known here; None otherwise (no record, an unreadable one, a stack this
    control side does not ship). cache/lock: a fleet shares a few stacks, each read once."""
    try:
        rc, out = exec_command(client, ep, f"head -c 65536 {RECORDED_STACK}", None, 15,
                               root=False, clock=clock, stop=stop)
        name = str(json.loads(out).get("stack") or "") if rc == 0 else ""
        if not name:
            return None
        if cache is None or lock is None:
            return find_stack(name)
        with lock:
            if name not in cache:
                cache[name] = find_stack(name)
            return cache[name]
    except NodeAnswerTooLarge:
        raise  # a hostile answer is the host's fault, not "no record"
    except (ValueError, OSError, paramiko.SSHException, NodecertError, AttributeError):
        return None


def adopt_stack(hr: HostRun, stack: Stack) -> None:
    """Judge hr against stack (a host the inventory and the command line gave none):
    its plan carries the stack's conformance script and framework, and is recorded."""
    hr.stack = stack
    hr.plan = hr.plan.with_(conformance={"stack": stack.name,
                                         "script": conformance.script_for(stack)},
                            framework=framework_plan(stack))
    record_host_plan(RunDir(hr.out_dir.parent), hr.host, hr.plan, stack.path)


__all__ = ["MAX_ANSWER", "RECORDED_STACK", "NodeAnswerTooLarge", "adopt_stack", "exec_command",
           "recorded_stack"]
