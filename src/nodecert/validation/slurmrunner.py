"""The Slurm runner (`nodecert validate --runner slurm`): each host's node run started as
a Slurm job on that node (`srun --exclusive --nodelist=<node>` from the cluster's launch
host), so it runs only when Slurm has the node free of users' jobs and Slurm accounts
for it.

The job reads the node code (the same reproducible bundle the SSH runner ships) and then
the plan from its standard input, installs the code exactly as the SSH runner and the
validators role do (content-addressed, checked before it is trusted), and runs
`nodecert_node run`; its standard output is the node's event stream, read and judged as
it comes, as on SSH. srun's own words (queued, refused, cancelled) come back on its
standard error and are quoted where the host's run did not happen. A node Slurm will
not run a job on (down, drained, unknown) is UNREACHABLE with Slurm's word, before any
job; a job that waits past its start limit, overruns or is interrupted is cancelled
and what it left on its node is killed and counted (transport.jobs).

Slurm runs a job as the user who submits it: the launch host's user must be root, as the
node's checks read what only root may (the BMC's view, the kernel log, the GPUs' state).
The node's recorded stack is not read through Slurm: name the stack (`--stack` or
nodecert_stack) for stack.conformance to judge the node against it.
"""

from __future__ import annotations

import json
import secrets
import shlex
import threading

from nodecert.core.errors import InventoryError, NodecertError
from nodecert.core.textsafe import tail_line
from nodecert.inventory.engine import slurm_launcher
from nodecert.inventory.reader import Inventory
from nodecert.runs.store import HostLink, HostRun
from nodecert.transport.become import BecomeSource
from nodecert.transport.bundle import NODE_BASE, install_script, node_bundle
from nodecert.transport.engines import SlurmLauncher, unschedulable
from nodecert.transport.events import BadEvent
from nodecert.transport.jobs import Job, Launcher
from nodecert.transport.loadgate import LoadGate
from nodecert.transport.silence import NodeLimit
from nodecert.validation.progress import RunProgress
from nodecert.validation.runner import Fetched, HostUnreachable, Progress, Runner, register

# nodecert policy: how long a host's job may wait in Slurm's queue for its node (a node
# busy with a user's job is waited for, not interrupted; past this, the host is ERROR
# and the job is withdrawn).
START_WITHIN_S = 1800.0
# Slack on top of the plan's host limit for the job's own limit: the node code's
# install and the interpreter's start (the node enforces the checks' limits itself).
JOB_SLACK_S = 120.0


def job_script(sha16: str, size: int, python: str, base: str = NODE_BASE) -> str:
    """What the job runs on its node: `size` bytes of node code from standard input into
    a private file, installed as the SSH runner installs it (its words to standard
    error, so that standard output is the node's events alone), then the node's run,
    which reads the plan from what follows on standard input."""
    code = f"{shlex.quote(base)}/{sha16}"
    return (f"set -e; d=$(mktemp -d); trap 'rm -rf \"$d\"' EXIT; "
            f"head -c {size} > \"$d/code.tgz\"; "
            f"if [ \"$(wc -c < \"$d/code.tgz\")\" -ne {size} ]; then "
            "echo 'nodecert: the node code did not arrive whole' >&2; exit 3; fi; "
            f"( {install_script(sha16, '-', base)} ) < \"$d/code.tgz\" >&2; "
            f"rm -rf \"$d\"; trap - EXIT; cd {code} && exec {shlex.quote(python)} "
            "-m nodecert_node run")


@register
class SlurmRunner(Runner):
    """The Slurm runner: per host, a job on its node that installs the node code and
    runs the plan; its output is the node's event stream."""

    name = "slurm"

    def __init__(self, runs: dict[str, HostRun], links: dict[str, HostLink], say: Progress,
                 stop: threading.Event, *, launch: Launcher, engine_names: dict[str, str],
                 states: dict[str, str], bundle: tuple[bytes, str] | None = None,
                 progress: RunProgress | None = None, gate: LoadGate | None = None,
                 start_within_s: float = START_WITHIN_S, node_base: str = NODE_BASE) -> None:
        self.bundle, sha = bundle or node_bundle()
        super().__init__(runs, links, say, stop, progress=progress, gate=gate, code_sha=sha)
        self.launch, self.engine_names, self.states = launch, engine_names, states
        self.start_within_s, self.node_base = start_within_s, node_base
        self.token = secrets.token_hex(3)
        self.jobs: dict[str, Job] = {}

    @classmethod
    def for_run(cls, inventory: Inventory, runs: dict[str, HostRun],
                links: dict[str, HostLink], say: Progress, stop: threading.Event, *,
                become: BecomeSource | None = None, progress: RunProgress | None = None,
                gate: LoadGate | None = None) -> Runner:
        launch, names = slurm_launcher(inventory, tuple(sorted(runs)), become)
        if launch.launch.user != "root":
            raise InventoryError(
                f"{inventory}: the Slurm runner's jobs would run as {launch.launch.user!r} "
                f"(Slurm runs a job as the user who submits it, here the launch host "
                f"{launch.launch.host}'s), and the node's checks need root",
                hint="give the launch host ansible_user=root, or validate over SSH "
                     "(without --runner slurm)")
        assert isinstance(launch, SlurmLauncher)  # slurm_launcher refuses any other engine
        states, error = launch.node_states(sorted(set(names.values())))
        if error:
            launch.close()
            raise NodecertError(error, hint="check Slurm on the launch host (sinfo)")
        return cls(runs, links, say, stop, launch=launch, engine_names=names, states=states,
                   progress=progress, gate=gate)

    def describe(self, hr: HostRun) -> dict[str, str]:
        job = self.jobs.get(hr.host)
        return {"runner": self.name, "slurm_job": job.name} if job else {}

    def execute(self, hr: HostRun) -> None:
        node = self.engine_names[hr.host]
        why = unschedulable(node, self.states)
        if why:
            self._unreached(hr, why)
            return
        python = self.links[hr.host].endpoint.python
        job = Job(f"nodecert-val-{self.token}-{sorted(self.runs).index(hr.host)}", (node,),
                  job_script(self.sha[:16], len(self.bundle), python, self.node_base),
                  timeout_s=hr.plan.host_timeout_s + JOB_SLACK_S,
                  start_within_s=self.start_within_s, label=False, stdin=True)
        self.jobs[hr.host] = job
        self.emit(hr, f"slurm job {job.name} on {node}: waiting up to "
                      f"{self.start_within_s:.0f} s for the node")
        try:
            stream = self.launch.stream(job)
        except NodecertError as exc:
            self._unreached(hr, exc.what)
            return
        ok = False
        try:
            stream.send(self.bundle + (json.dumps(hr.plan.as_dict()) + "\n").encode())
            self.follow(hr, stream.line, self.gate.clock, waiting_s=self.start_within_s)
            ok = hr.status == "done"
            if hr.status == "running" and not hr.node:  # the job ended before the node spoke
                stream.exit_code()  # srun's last words are in once it has exited
                hr.status = "unreachable"
                hr.error = (f"Slurm did not run the node's job {job.name}: "
                            f"{tail_line(stream.said())}")
        except OSError as exc:
            hr.status, hr.error = "lost", f"the job's stream broke: {exc}"
        finally:
            left = stream.close(ok=ok)
        if any(left.values()):
            self.emit(hr, f"slurm job {job.name}: cancelled; left running: {left}", alarm=True)
        if hr.status == "unreachable":
            hr.finish_missing(f"host unreachable: {hr.error}", "NC-HOST-UNREACHABLE")
            self.emit(hr, f"UNREACHABLE: {hr.error}", alarm=True)
            return
        self._close(hr)

    def fetch(self, hr: HostRun, command: str, *, limit: int, timeout: float,
              recorded_stack: bool = False) -> Fetched:
        """`command` as a Slurm job on hr's node (waiting for the node as a run does),
        its output read up to `limit` bytes within `timeout` once started. The node's
        recorded stack is not read through Slurm (None)."""
        node = self.engine_names[hr.host]
        why = unschedulable(node, self.states)
        if why:
            raise HostUnreachable(why)
        job = Job(f"nodecert-fetch-{self.token}-{sorted(self.runs).index(hr.host)}", (node,),
                  command, timeout_s=timeout, start_within_s=self.start_within_s, label=False)
        try:
            stream = self.launch.stream(job)
        except NodecertError as exc:
            raise HostUnreachable(exc.what) from exc
        ok, out, refused = False, bytearray(), ""
        try:
            within = NodeLimit(timeout + self.start_within_s)
            while len(out) < limit:
                line = stream.line((within,), self.stop)
                if line is None:
                    break
                out += line + b"\n"
            if not out and stream.exit_code() not in (0, None):  # srun's refusal
                refused = f"Slurm did not run {job.name}: {tail_line(stream.said())}"
            ok = not refused
        except BadEvent as exc:
            raise OSError(f"reading the job's output: {exc}") from exc
        finally:
            stream.close(ok=ok)
        if refused:
            raise HostUnreachable(refused)
        return Fetched(bytes(out[:limit]))

    def _unreached(self, hr: HostRun, why: str) -> None:
        hr.status, hr.error = "unreachable", why
        hr.finish_missing(f"host unreachable: {why}", "NC-HOST-UNREACHABLE")
        self.emit(hr, f"UNREACHABLE: {why}", alarm=True)

    def close(self) -> None:
        self.launch.close()


__all__ = ["JOB_SLACK_S", "START_WITHIN_S", "SlurmRunner", "job_script"]
