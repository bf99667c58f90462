"""Fleet re-validation as Slurm jobs: each node's own scheduled run, started by the
site's scheduler instead of the node's timer, then collected like any scheduled run.

One job per node (`srun --exclusive -w <node>`), so Slurm starts each one when that
node is free -- between users' jobs, never beside them -- and a busy node does not hold
up the others. The job runs the node code's `local-run --reason slurm` (the plan the
control side last sent, kept on the node), which writes its record to the node's
history; `revalidate --via slurm` then collects every node's record of this
submission, judges, compares with the certificate and certifies, as `--collect` does.

A node whose job could not start, ran past its limit or left no record of this
submission is ERROR with the job's output; the jobs go through clusterjobs' launcher,
so a job that ran over its time or was interrupted is cancelled and what it left on its
node is killed and counted.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from nodecert.core.errors import InventoryError, NodecertError
from nodecert.core.textsafe import tail_line
from nodecert.transport.bundle import NODE_BASE
from nodecert.transport.engines import SlurmLauncher, unschedulable
from nodecert.transport.jobs import Job, JobResult, Launcher

REASON = "slurm"
# nodecert policy: how long one node's run may take, by suite (the run itself; the wait
# for the node to be free is separate). Generous against the suites' own budgets: a run
# cut short is a lost verdict, not a faster one.
RUN_LIMIT_S = {"quick": 900.0, "standard": 3600.0, "full": 6 * 3600.0}
# Jobs in flight from the launch host at once (each is one srun process there).
PARALLEL_JOBS = 32
_SUITE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Submission:
    """What the jobs did, per inventory host."""
    jobs: dict[str, JobResult]
    idle: bool = False  # idle checks: a preempted job is expected, its record says so

    def failure(self, host: str) -> str | None:
        """Why the host's run cannot be trusted to have happened (None: its job ran).

        local-run exits 1 for a node that FAILed (a finding, reported by its record) and
        3 when the run itself broke; anything but 0 and 1 is the job's own failure."""
        res = self.jobs.get(host)
        if res is None:
            return "no Slurm job was run for this host"
        if res.error:
            return f"the Slurm job could not be launched: {res.error}"
        if res.timed_out:
            return (f"the Slurm job did not end within its limit ({res.job.timeout_s:.0f} s "
                    f"run, {res.job.start_within_s:.0f} s to start): cancelled; "
                    f"output: {tail_line(res.output)}")
        if self.idle and res.returncode not in (0, 1) and preempted(res.output):
            return None  # the node's record says it gave way (collected as such)
        if res.returncode not in (0, 1):
            return (f"the Slurm job failed (exit {res.returncode}): {tail_line(res.output)}"
                    + (f"; left running: {res.leftovers}" if any(res.leftovers.values())
                       else ""))
        return None


def preempted(output: str) -> bool:
    """srun's word that Slurm preempted or cancelled the job (its step was signalled)."""
    return bool(re.search(r"DUE TO PREEMPTION|CANCELLED AT|Job step aborted|"
                          r"task \d+: Terminated|Force Terminated", output))


def job_script(suite: str, idle: bool = False) -> str:
    """What each job runs on its node: the node's own scheduled run, as the timer does;
    idle: one that gives way within seconds to SIGTERM (preemption) or a GPU job."""
    if not _SUITE.match(suite):
        raise InventoryError(f"suite {suite!r} is not a suite name", hint="--suite quick")
    return (f"cd {NODE_BASE}/current && PYTHONPATH=. exec /usr/bin/python3 -m nodecert_node "
            f"local-run --suite {suite} --reason {REASON}" + (" --idle" if idle else ""))


def jobs_for(hosts: dict[str, str], suite: str, token: str, run_s: float,
             start_within_s: float, *, idle: bool = False) -> dict[str, Job]:
    """One named job per inventory host (hosts: inventory name -> Slurm's name). Pure."""
    script = job_script(suite, idle)
    return {h: Job(f"nodecert-reval-{token}-{i}", (engine,), script, timeout_s=run_s,
                   start_within_s=start_within_s)
            for i, (h, engine) in enumerate(sorted(hosts.items()))}


def submit(launch: Launcher, engine_names: dict[str, str], *, suite: str = "quick",
           run_s: float | None = None, start_within_s: float = 1800.0,
           progress: Callable[[str], None] | None = None, idle: bool = False) -> Submission:
    """Run every host's job (PARALLEL_JOBS at a time) and wait for them all.

    Nodes Slurm does not know, or cannot use, stop nothing: they are reported and not
    submitted. Ctrl-C cancels every job still running (and cleans its node)."""
    say = progress or (lambda line: None)
    limit_s = run_s or RUN_LIMIT_S.get(suite, RUN_LIMIT_S["standard"])
    if not isinstance(launch, SlurmLauncher):
        raise NodecertError(f"re-validation as Slurm jobs needs the Slurm engine, not "
                            f"{launch.engine or 'this one'}", hint="nodecert_cluster.engine")
    states, error = launch.node_states(sorted(set(engine_names.values())))
    if error:
        raise NodecertError(error, hint="check Slurm on the launch host (sinfo)")
    jobs = jobs_for(engine_names, suite, secrets.token_hex(3), limit_s, start_within_s,
                    idle=idle)
    results: dict[str, JobResult] = {}
    for host, engine in sorted(engine_names.items()):
        why = unschedulable(engine, states)
        if why:
            results[host] = JobResult(jobs[host], "", None, "", 0.0, error=why)
            say(f"{host:<14} not submitted: {why}")
    todo = [h for h in sorted(jobs) if h not in results]
    say(f"slurm: {len(todo)} job(s), one per node, each waiting up to {start_within_s:.0f} s "
        f"for its node and running up to {limit_s:.0f} s")

    def one(host: str) -> tuple[str, JobResult]:
        res = launch.run(jobs[host])
        say(f"{host:<14} slurm job {jobs[host].name}: "
            + ("launch failed" if res.error else "timed out" if res.timed_out
               else f"exit {res.returncode}") + f" after {res.seconds:.0f}s")
        return host, res

    pool = ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_JOBS, len(todo))),
                              thread_name_prefix="nodecert-slurm")
    try:
        for host, res in pool.map(one, todo):
            results[host] = res
    except KeyboardInterrupt:
        launch.interrupt()
        pool.shutdown(wait=True, cancel_futures=True)
        launch.settle()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        launch.close()
    return Submission(results, idle)


__all__ = ["PARALLEL_JOBS", "REASON", "RUN_LIMIT_S", "Submission", "job_script", "jobs_for",
           "submit"]
