"""Jobs on the site's engine: Slurm (srun) or OpenMPI (mpirun over SSH with a hostfile),
started on the launch host over SSH, one task per node: the cluster's multi-node jobs,
the scheduled re-validation's per-node jobs and the Slurm runner's node runs.

Every job is named (`nodecert-<run>-<n>`) and carries NODECERT_JOB=<name> in its
environment; it runs under `timeout`, and a job that ran past its limit, failed to end
or was interrupted is cancelled (`scancel --name` for Slurm) and then every process
still carrying its name is killed on each of its nodes, which is then checked: nothing a
job started is left running. Only the nodes a job was given are touched: nodecert never
drains, resumes or reconfigures a node.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import paramiko

from nodecert.core.errors import NodecertError
from nodecert.core.textsafe import clean
from nodecert.transport.events import LineReader
from nodecert.transport.joboutput import demux
from nodecert.transport.silence import NodeLimit
from nodecert.transport.ssh import Endpoint, connect, wait_ready
from nodecert.transport.sshfail import describe_error
from nodecert.transport.tether import sweep_script, tethered

OUTPUT_LIMIT = 2 * 1024 * 1024  # bytes of a job's output kept; the rest is dropped, said so
KILL_GRACE_S = 10
# Channels (jobs, engine commands) at once on one SSH connection to the launch host:
# OpenSSH's sshd refuses more than MaxSessions (10 unless the site raised it; sshd_config(5)),
# so past this a further connection is opened (nodecert policy: 8, two spare).
CHANNELS_PER_CONNECTION = 8


class Site(Protocol):
    """Where the site's engine runs jobs (nodecert_cluster's engine, partition, account,
    reservation; nodecert.inventory.cluster.ClusterConfig is one)."""

    @property
    def engine(self) -> str: ...

    @property
    def partition(self) -> str | None: ...

    @property
    def account(self) -> str | None: ...

    @property
    def reservation(self) -> str | None: ...


@dataclass(frozen=True)
class Job:
    name: str
    nodes: tuple[str, ...]  # engine names, in rank order for mpirun
    script: str  # bash, run once on every node
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 300.0
    # How long a queued job may wait for its nodes (Slurm), on top of timeout_s; past
    # it the job is not run. 0: the nodes must be free within a minute, inside timeout_s.
    start_within_s: float = 0.0
    # Each output line labelled with its task's rank (demux reads them apart); a one-node
    # job streamed line by line (the Slurm runner's) is read as printed.
    label: bool = True
    # The launcher's standard input handed to the first task (the Slurm runner sends the
    # node code and the plan there); otherwise the tasks read none.
    stdin: bool = False


@dataclass
class JobResult:
    job: Job
    command: str
    returncode: int | None
    output: str
    seconds: float
    timed_out: bool = False
    leftovers: dict[str, int] = field(default_factory=dict)  # node -> processes left
    error: str = ""  # the launch itself failed (no SSH to the launch host, ...)

    def by_rank(self) -> dict[int | None, str]:
        return demux(self.output)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.error


def env_prefix(job: Job) -> str:
    env = {"NODECERT_JOB": job.name, **job.env}
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


def timeout_prefix(seconds: float) -> str:
    return f"timeout -k {KILL_GRACE_S} {int(seconds)}"


class _Connection:
    """One SSH connection to the launch host and how many of its channels are open."""

    def __init__(self, client: paramiko.SSHClient) -> None:
        self.client, self.open = client, 0


class Launcher:
    """Runs jobs from the launch host: a channel per job, at most CHANNELS_PER_CONNECTION
    on each SSH connection (as many connections as the jobs at once need)."""

    engine = ""

    def __init__(self, cfg: Site, launch: Endpoint,
                 nodes: dict[str, Endpoint] | None = None,
                 connector: Callable[[Endpoint], paramiko.SSHClient] = connect) -> None:
        self.cfg, self.launch, self.nodes = cfg, launch, nodes or {}
        self.launch_name = launch.host  # the launch host's name for the engine
        self._connector = connector
        self._connections: list[_Connection] = []
        self._owner: dict[int, _Connection] = {}  # id(channel) -> its connection
        self._lock = threading.Lock()
        self._running: dict[str, Job] = {}
        self.cancelled = threading.Event()  # set on interrupt: every wait ends
        # Admission: a job is either registered before an interrupt looks (and is
        # cancelled by it) or sees the interrupt and never starts.
        self._admit = threading.Lock()
        self._interrupted: list[Job] = []  # the jobs running when the run was interrupted

    # --- the connection --------------------------------------------------------------
    def _channel(self) -> paramiko.Channel:
        """A new channel to the launch host, on a connection with room for it; give it
        back with `_closed`."""
        with self._lock:
            conn = next((c for c in self._connections if c.open < CHANNELS_PER_CONNECTION),
                        None)
            if conn is None:
                try:
                    conn = _Connection(self._connector(self.launch))
                except (paramiko.SSHException, OSError) as exc:
                    raise NodecertError(f"launch host {self.launch.host}: "
                                        f"{describe_error(exc, self.launch)}",
                                        hint="the cluster's jobs start there: fix SSH to it "
                                             "or name another with --launch-host") from exc
                self._connections.append(conn)
            transport = conn.client.get_transport()
            assert transport is not None
            chan = transport.open_session()
            conn.open += 1
            self._owner[id(chan)] = conn
            return chan

    def _closed(self, chan: paramiko.Channel) -> None:
        """The channel closed, its room on its connection given back."""
        chan.close()
        with self._lock:
            conn = self._owner.pop(id(chan), None)
            if conn is not None:
                conn.open -= 1

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.client.close()
            self._connections.clear()
            self._owner.clear()

    def remote(self, command: str, timeout: float,
               always: bool = False) -> tuple[int | None, str, bool]:
        """(exit code, output, timed out) of a command on the launch host; `always`: run
        even after an interrupt (the clean-up's own commands)."""
        chan = self._channel()
        try:
            chan.set_combine_stderr(True)
            chan.exec_command(command)
        except BaseException:
            self._closed(chan)
            raise
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or (self.cancelled.is_set() and not always):
                    return None, _text(chunks), True
                if wait_ready(chan, min(left, 1.0)) or chan.recv_ready():
                    data = chan.recv(65536)
                    if not data and chan.exit_status_ready():
                        break
                    if size < OUTPUT_LIMIT:
                        chunks.append(data)
                    size += len(data)
                elif chan.exit_status_ready() and not chan.recv_ready():
                    break
            rc = chan.recv_exit_status()
        finally:
            self._closed(chan)
        text = _text(chunks)
        if size > OUTPUT_LIMIT:
            text += f"\n[nodecert: output past {OUTPUT_LIMIT} bytes dropped]\n"
        return rc, text, False

    # --- jobs ------------------------------------------------------------------------
    def command(self, job: Job) -> str:
        raise NotImplementedError

    def cancel(self, *jobs: Job) -> None:
        """Ask the engine to end the jobs (a no-op where ending the launcher ends it)."""

    def preflight(self, nodes: Sequence[str]) -> list[str]:
        """Problems that stop the run before any job (empty: none)."""
        return []

    def rank_order(self, nodes: Sequence[str]) -> tuple[str, ...]:
        """The nodes in the order their tasks get ranks (rank 0 first)."""
        return tuple(nodes)

    def limit_s(self, job: Job) -> float:
        """The longest the job's launch may take, waiting for its nodes included."""
        return job.timeout_s

    def run(self, job: Job) -> JobResult:
        cmd = self.command(job)
        t0 = time.monotonic()
        with self._admit:
            if self.cancelled.is_set():
                return JobResult(job, cmd, None, "", 0.0,
                                 error="not started: the run was interrupted")
            self._running[job.name] = job
        try:
            rc, out, timed_out = self.remote(tethered(job.name, cmd),
                                             self.limit_s(job) + KILL_GRACE_S + 15)
        except NodecertError as exc:
            return JobResult(job, cmd, None, "", time.monotonic() - t0, error=exc.what)
        except (paramiko.SSHException, OSError) as exc:
            return JobResult(job, cmd, None, "", time.monotonic() - t0,
                             error=f"launch host {self.launch.host}: {exc}")
        finally:
            # Under the admission lock: either the interrupt saw this job running (and
            # cleans it up) or the job left before the interrupt looked (and cleans up
            # after itself below).
            with self._admit:
                self._running.pop(job.name, None)
                taken = self.cancelled.is_set()
        res = JobResult(job, cmd, rc, out, time.monotonic() - t0,
                        timed_out=timed_out or rc in (124, 137))
        if not res.ok and taken:
            # Interrupted: interrupt() cancels and sweeps every running job at once; this
            # thread does not do it again, one job after another. What is left is then
            # not known here (-1: never reported as clean).
            res.error = res.error or "interrupted: cancelled with the run"
            res.leftovers = dict.fromkeys(job.nodes, -1)
        elif not res.ok:
            self.cancel(job)
            res.leftovers = self.sweep(job)
        return res

    def stream(self, job: Job) -> JobStream:
        """Start the job and hand back its output to read as it comes (`JobStream`);
        the caller ends it with `JobStream.close`. NodecertError when it cannot start
        (the run interrupted, the launch host not reached)."""
        with self._admit:
            if self.cancelled.is_set():
                raise NodecertError("not started: the run was interrupted")
            self._running[job.name] = job
        try:
            chan = self._channel()
        except (paramiko.SSHException, OSError, NodecertError) as exc:
            self._release(job)
            raise NodecertError(f"the job could not be started from {self.launch.host}: "
                                f"{getattr(exc, 'what', exc)}") from exc
        try:
            chan.exec_command(tethered(job.name, self.command(job), stdin=job.stdin))
        except (paramiko.SSHException, OSError) as exc:
            self._closed(chan)
            self._release(job)
            raise NodecertError(f"the job could not be started from {self.launch.host}: "
                                f"{getattr(exc, 'what', exc)}") from exc
        return JobStream(self, job, chan)

    def _release(self, job: Job) -> bool:
        """The job no longer running; whether the run was interrupted meanwhile (then
        `interrupt` cleans up after it)."""
        with self._admit:
            self._running.pop(job.name, None)
            return self.cancelled.is_set()

    def interrupt(self) -> None:
        """Cancel every job still running (Ctrl-C): the sweep of its nodes and of the
        launch host first (a job its launcher had not yet handed to the engine never
        reaches it), then the engine's cancel of them all; the waits on them end at
        once."""
        with self._admit:
            self.cancelled.set()
            running = list(self._running.values())
        self._interrupted += running
        if not running:
            return
        # The engine's cancel and every job's sweep at once: how long this takes is the
        # slowest of them, not their sum, however many jobs ran and however loaded the
        # machine is (each is bounded by its own SSH and command timeouts).
        with ThreadPoolExecutor(max_workers=min(32, len(running) + 1),
                                thread_name_prefix="nodecert-sweep") as pool:
            cancelling = pool.submit(self.cancel, *running)
            list(pool.map(self.sweep, running))
            cancelling.result()

    def settle(self) -> None:
        """After an interrupt, once every job's thread has cleaned up after it: the
        engine's cancel of the interrupted jobs once more, so that nothing of them is
        queued or running however late its launcher started."""
        self.cancel(*self._interrupted)

    def sweep(self, job: Job) -> dict[str, int]:
        """End what the job left on each of its nodes (processes carrying its name in
        their environment: SIGTERM, so srun and mpirun withdraw what they asked of the
        engine, then SIGKILL a second later), then count what is still there (0
        everywhere: clean)."""
        script = sweep_script(job.name)
        # The launch host too: srun or mpirun itself carries the job's name there.
        targets = {**{n: self.nodes.get(n) for n in job.nodes},
                   self.launch_name: self.nodes.get(self.launch_name, self.launch)}

        def one(ep: Endpoint) -> int:
            try:
                client = self._connector(ep)
            except (paramiko.SSHException, OSError):
                return -1  # could not look: never reported as clean
            try:
                _, stdout, _ = client.exec_command(ep.as_root(script), timeout=30)
                m = re.search(r"left=(\d+)", stdout.read().decode(errors="replace"))
                return int(m.group(1)) if m else -1
            except (paramiko.SSHException, OSError):
                return -1
            finally:
                client.close()
        todo = {node: ep for node, ep in targets.items() if ep is not None}
        if not todo:
            return {}
        # every node at once: the sweep takes the slowest node's time, not the sum
        with ThreadPoolExecutor(max_workers=len(todo),
                                thread_name_prefix="nodecert-sweep-node") as pool:
            return dict(zip(todo, pool.map(one, todo.values()), strict=True))


class JobStream:
    """A started job's output as it comes: its standard output line by line (the tasks'
    own), the engine's words on standard error kept apart (at most OUTPUT_LIMIT bytes);
    its standard input the first task's where the job asked for it."""

    def __init__(self, launcher: Launcher, job: Job, chan: paramiko.Channel) -> None:
        self.launcher, self.job, self._chan = launcher, job, chan
        self._lines = LineReader(chan)
        self._stderr = bytearray()

    def send(self, data: bytes) -> None:
        """Write to the job's standard input (OSError when the channel is gone)."""
        try:
            self._chan.sendall(data)
        except (paramiko.SSHException, OSError) as exc:
            raise OSError(f"sending to the job: {exc}") from exc

    def line(self, limits: Sequence[NodeLimit], stop: threading.Event) -> bytes | None:
        """The next line the job printed (None at its end): LineReader.line, a lost
        channel as OSError."""
        try:
            return self._lines.line(limits, stop)
        except paramiko.SSHException as exc:  # the channel's loss, as its docstring says
            raise OSError(str(exc)) from exc
        finally:
            self._drain_stderr()

    def said(self) -> str:
        """What the engine and the job wrote to standard error so far (cleaned)."""
        self._drain_stderr()
        return _text([bytes(self._stderr)])

    def _drain_stderr(self) -> None:
        try:
            while self._chan.recv_stderr_ready():
                chunk = self._chan.recv_stderr(65536)
                if not chunk:
                    break
                if len(self._stderr) < OUTPUT_LIMIT:
                    self._stderr += chunk[:OUTPUT_LIMIT - len(self._stderr)]
        except (paramiko.SSHException, OSError):
            return

    def exit_code(self, wait_s: float = 5.0) -> int | None:
        """The launcher's exit code, once it ended (None: not within wait_s)."""
        if not self._chan.status_event.wait(wait_s):
            return None
        return self._chan.recv_exit_status()

    def close(self, *, ok: bool) -> dict[str, int]:
        """End the job: the channel closed (the tether ends the launcher), and, where it
        did not end well and the run was not interrupted (`interrupt` then cleans up),
        the engine's cancel and the sweep of its nodes; what each node had left."""
        self.launcher._closed(self._chan)
        if self.launcher._release(self.job) or ok:
            return {}
        self.launcher.cancel(self.job)
        return self.launcher.sweep(self.job)


def _text(chunks: list[bytes]) -> str:
    return clean(b"".join(chunks).decode("utf-8", errors="replace"))


__all__ = ["KILL_GRACE_S", "Job", "JobResult", "JobStream", "Launcher", "Site", "env_prefix",
           "timeout_prefix"]
