"""The site's engines: Slurm (srun from the launch host, one exclusive task per node,
cancelled by name) and OpenMPI (mpirun over SSH with a hostfile); `launcher` picks the
one the site names."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

import paramiko

from nodecert.core.errors import NodecertError
from nodecert.transport.jobs import Job, Launcher, Site, env_prefix, timeout_prefix
from nodecert.transport.ssh import Endpoint, connect


def slurm_base_state(state: str) -> str:
    """sinfo's short state without its flags ('idle*' not responding, 'mix~' powered
    down, 'drain$' maintenance, ...): 'idle*' -> 'idle'."""
    return state.rstrip("*~#$@^-!%")


def unschedulable(node: str, states: dict[str, str]) -> str | None:
    """Why Slurm will not run a job on the node (None: it will, now or when it is free).
    Pure. A busy node (alloc, mix) is waited for; a drained or down one never runs it."""
    if node not in states:
        return (f"Slurm does not know {node} in this partition (it knows "
                f"{', '.join(sorted(states)[:10]) or 'no nodes'})")
    state = states[node]
    if slurm_base_state(state) in ("idle", "mix", "alloc", "comp"):
        return None
    return (f"{node} is {state} in Slurm: a job would never start there; reach it over "
            "SSH instead (without --via slurm or --runner slurm), or resume it in Slurm "
            "first")


class SlurmLauncher(Launcher):
    engine = "slurm"

    def _site(self) -> list[str]:
        c = self.cfg
        return ([f"--partition={c.partition}"] if c.partition else []) + (
            [f"--account={c.account}"] if c.account else []) + (
            [f"--reservation={c.reservation}"] if c.reservation else [])

    def command(self, job: Job) -> str:
        minutes = max(1, int(job.timeout_s // 60) + 1)
        argv = ["srun", f"--job-name={job.name}", f"--nodes={len(job.nodes)}",
                f"--nodelist={','.join(job.nodes)}", f"--ntasks={len(job.nodes)}",
                "--ntasks-per-node=1", "--exclusive",
                f"--immediate={int(job.start_within_s) or 60}", f"--time={minutes}",
                "--kill-on-bad-exit=1", *(["--label"] if job.label else []),
                *(["--input=0"] if job.stdin else []), *self._site(),
                "bash", "-c", job.script]
        return f"{env_prefix(job)} {timeout_prefix(self.limit_s(job))} {shlex.join(argv)}"

    def limit_s(self, job: Job) -> float:
        return job.timeout_s + job.start_within_s

    def node_states(self, nodes: Sequence[str]) -> tuple[dict[str, str], str | None]:
        """Slurm's state of each node it knows in the partition (sinfo's short form:
        idle, mix, alloc, drain, down, ...), or the reason Slurm could not be asked."""
        part = ["-p", self.cfg.partition] if self.cfg.partition else []
        rc, out, timed_out = self.remote(shlex.join(["sinfo", "-h", "-N", *part, "-o",
                                                     "%N %t"]), 60)
        if timed_out or rc != 0:
            return {}, (f"sinfo on {self.launch.host} failed (rc {rc}): "
                        f"{out.strip()[-400:] or 'no output'} -- is slurmctld up and munge "
                        "running on the launch host?")
        state = {}
        for line in out.splitlines():
            f = line.split()
            if len(f) == 2:
                state[f[0]] = f[1]
        return state, None

    def cancel(self, *jobs: Job) -> None:
        """scancel by name, and again whenever Slurm lists one of the jobs pending or
        running, until none has been listed for 2 s (at most 15 s): an srun stopped right
        after it asked for its allocation leaves a job that slurmctld registers a moment
        later."""
        if not jobs:
            return
        names = [shlex.quote(j.name) for j in jobs]
        again = "; ".join(f"scancel --name={n}" for n in names)
        listed = f"squeue -h --name={','.join(names)} -t PD,CF,R,S | grep -q ."
        with _suppress():
            self.remote(f"{again}; quiet=0; for i in $(seq 1 30); do if {listed}; then "
                        f"quiet=0; {again}; else quiet=$((quiet+1)); "
                        "[ $quiet -ge 4 ] && exit 0; fi; sleep 0.5; done", 40, always=True)

    def preflight(self, nodes: Sequence[str]) -> list[str]:
        """Problems that stop the run before any job: Slurm unreachable (munge, slurmctld),
        nodes absent from the partition, nodes not usable."""
        state, error = self.node_states(nodes)
        if error:
            return [error]
        where = f"partition {self.cfg.partition}" if self.cfg.partition else "Slurm"
        problems = []
        absent = [n for n in nodes if n not in state]
        if absent:
            problems.append(f"not in {where}: {', '.join(absent)} (Slurm knows "
                            f"{', '.join(sorted(state)) or 'no nodes'})")
        unusable = [f"{n} ({state[n]})" for n in nodes if n in state
                    and slurm_base_state(state[n]) not in ("idle", "mix", "alloc")]
        if unusable:
            problems.append(f"not usable in {where}: {', '.join(unusable)}")
        return problems


class MpirunLauncher(Launcher):
    engine = "mpirun"

    def rank_order(self, nodes: Sequence[str]) -> tuple[str, ...]:
        # mpirun maps its own node first when the job includes it, then the hostfile's
        # order (OpenMPI 4: the launching node heads the node pool).
        me = self.launch_name
        return tuple([me] if me in nodes else []) + tuple(n for n in nodes if n != me)

    def command(self, job: Job) -> str:
        hosts = "".join(f"{n} slots=1\\n" for n in job.nodes)
        exports = " ".join(f"-x {k}" for k in ("NODECERT_JOB", *job.env))
        root = " --allow-run-as-root" if self.launch.user == "root" else ""
        limit = timeout_prefix(self.limit_s(job))
        # The hostfile lives in a private directory of the launch host, removed after.
        return (f"d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && printf '{hosts}' > "
                f"\"$d/hosts\" && {env_prefix(job)} {limit} mpirun{root} "
                f"--hostfile \"$d/hosts\" -np {len(job.nodes)} --map-by ppr:1:node "
                f"--tag-output {exports} bash -c {shlex.quote(job.script)}")

    def preflight(self, nodes: Sequence[str]) -> list[str]:
        rc, out, timed_out = self.remote("command -v mpirun && mpirun --version", 60)
        if timed_out or rc != 0:
            return [f"mpirun is not usable on {self.launch.host} (rc {rc}): "
                    f"{out.strip()[-300:] or 'not found'} -- install OpenMPI there"]
        return []


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], paramiko.SSHException | OSError
                                                 | NodecertError)


def launcher(cfg: Site, launch: Endpoint, nodes: dict[str, Endpoint],
             connector: Callable[[Endpoint], paramiko.SSHClient] = connect) -> Launcher:
    kind = SlurmLauncher if cfg.engine == "slurm" else MpirunLauncher
    return kind(cfg, launch, nodes, connector)


__all__ = ["MpirunLauncher", "SlurmLauncher", "launcher", "slurm_base_state", "unschedulable"]
