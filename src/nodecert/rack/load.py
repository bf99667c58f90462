"""The NVLink domain under load: the rack-wide all-reduce over NVLink (NCCL's multi-node
NVLink, MNNVL) judged against the GPU model's sourced floor, and the bandwidth sweep
(rack.sweep) that names a slow GPU in linear time. The jobs run on the cluster path
(Slurm or mpirun, the trays' nodecert_cluster), each time-bounded, cancelled and swept
as the cluster's jobs are (cluster.run.ClusterRun).

  rack.allreduce  all_reduce_perf over every GPU of the rack: NCCL must report MNNVL
                  with every GPU in its clique, and the out-of-place bus bandwidth at the
                  largest size meet rack.mnnvl_busbw_min;
  rack.sweep      GPU pairs across trays, two sampling rounds and a bounded confirmation.

DCGM's multi-node diagnostic (dcgmi mndiag) is not run: no recorded output of it exists
to read it by, so its verdict could not be told from a misreading.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.cluster.context import ClusterContext
from nodecert.cluster.judge import Expectation, Reading, allreduce_script, prelude, read_allreduce
from nodecert.cluster.run import ClusterRun, model_limits
from nodecert.core.errors import InventoryError
from nodecert.inventory.cluster import inventory_cluster
from nodecert.inventory.engine import cluster_hosts
from nodecert.inventory.reader import Inventory, resolve
from nodecert.rack import sweep
from nodecert.transport.become import BecomeSource
from nodecert.transport.jobs import JobResult, Launcher
from nodecert_node.contract import Evidence, Result, Threshold, Verdict

Progress = Callable[[str], None]
FLOOR = "rack.mnnvl_busbw_min"
PEER = "rack.sweep_peer_fraction_min"
# NCCL_DEBUG=INFO's line saying the communicator spans the NVLink domain (NCCL 2.2x+):
# "MNNVL 1 cliqueId 2786 cliqueSize 4 cliqueRank 0 nvlDomainSize 4"
_MNNVL = re.compile(r"NCCL INFO MNNVL (\d+) cliqueId \S+ cliqueSize (\d+) cliqueRank \d+ "
                    r"nvlDomainSize (\d+)")


@dataclass
class LoadPlan:
    """What the domain's jobs need, resolved from the inventory before any job."""

    ctx: ClusterContext
    floor: Threshold | None  # rack.mnnvl_busbw_min; None: no sourced floor for the model
    peer: Threshold
    gpus: int  # per tray
    not_judged: list[str] = field(default_factory=list)


def load_plan(inventory: Path | Inventory, rack: dict[str, Any],
              become: BecomeSource | None = None) -> LoadPlan | None:
    """The plan, or None when the trays name no job engine (nodecert_cluster): the
    domain under load is then not judged, and the record says so. InventoryError on
    bad input, before any connection."""
    names = list(rack["trays"])
    inventory = resolve(inventory)
    specs = {h: s for h, s in inventory.hosts.items() if h in names}
    hv_all = inventory.hostvars(names)
    raw = hv_all[names[0]].get("nodecert_cluster")
    if not raw:
        return None
    cfg = inventory_cluster(inventory, raw)
    if cfg is None:
        return None
    if len(names) < 2:
        raise InventoryError(f"{inventory}: rack {rack['name']} has one tray: the NVLink "
                             "domain's jobs need two", hint="list the rack's trays")
    hosts = cluster_hosts(inventory, names, hv_all, cfg, become)
    limits = model_limits(specs)
    gpus = specs[names[0]].gpu_count
    floor = Threshold.from_dict(limits[FLOOR]) if FLOOR in limits else None
    if PEER not in limits:
        raise InventoryError(f"no {PEER} for {specs[names[0]].gpu_model}",
                             hint="the rack's GPU model needs a validator profile")
    exp = Expectation(floor or Threshold(0, ">=", "GB/s", "no sourced floor"),
                      Threshold(0, ">=", "Gb/s", "not used: no NIC in the NVLink domain"),
                      (), gpus, "NVLink")
    ctx = ClusterContext(names, hosts.engine_names, specs, hosts.endpoints, hosts.launch,
                         cfg, exp, simulated=all(s.simulated for s in specs.values()))
    plan = LoadPlan(ctx, floor, Threshold.from_dict(limits[PEER]), gpus)
    if floor is None:
        plan.not_judged.append(f"rack.allreduce: no sourced all-reduce floor over the NVLink "
                               f"domain for {specs[names[0]].gpu_model} ({FLOOR}); measured "
                               "and reported only")
    return plan


def pair_script(first: str, port: int, tray_a: str, gpu_a: int, gpu_b: int, *,
                max_bytes: str) -> str:
    """Two trays, one GPU each: GPU gpu_a on the tray the engine calls `tray_a`, gpu_b
    on the other; a 2-rank all-reduce between them, over the NVLink domain. Which tray
    holds rank 0 is read where the job runs (the prelude's $first: under srun the step's
    first node), never assumed from the order the nodes were given in."""
    a = shlex.quote(tray_a)
    return (f"{prelude(first, port)}; if [ \"$first\" = {a} ]; then g0={int(gpu_a)}; "
            f"g1={int(gpu_b)}; else g0={int(gpu_b)}; g1={int(gpu_a)}; fi; "
            "if [ \"$r\" = 0 ]; then export CUDA_VISIBLE_DEVICES=$g0; else "
            "export CUDA_VISIBLE_DEVICES=$g1; fi; "
            f"exec all_reduce_perf -b 1M -e {shlex.quote(max_bytes)} -f 2 -g 1")


def mnnvl_span(rank0: str) -> tuple[int, int] | None:
    """(MNNVL on: 1/0, the clique's size) from NCCL's INFO line; None where NCCL did not
    say (an older NCCL, or its debug output off)."""
    m = _MNNVL.search(rank0)
    return (int(m.group(1)), int(m.group(2))) if m else None


def judge_allreduce(reading: Reading, res: JobResult, span: tuple[int, int] | None,
                    floor: Threshold | None, *, world: int, trays: int, timeout_s: float,
                    simulated: bool) -> Result:
    """rack.allreduce from the job over every tray (pure)."""
    findings: list[str] = []
    value = reading.busbw
    if res.timed_out:
        v, summary = Verdict.ERROR, (f"all-reduce over {trays} trays hung past "
                                     f"{timeout_s:g} s")
    elif res.error or value is None:
        v = Verdict.ERROR
        summary = f"all-reduce over the rack did not run: {res.error or reading.problem}"
    elif span is not None and (span[0] != 1 or span[1] != world):
        v = Verdict.FAIL
        summary = (f"NCCL did not run the all-reduce over the NVLink domain: MNNVL "
                   f"{span[0]}, clique of {span[1]} GPUs where the rack has {world} "
                   f"(busbw {value:.1f} GB/s)")
    else:
        out = floor.check(value) if floor else None
        ok = (out is None or bool(out)) and not reading.oob
        v = Verdict.PASS if ok else Verdict.FAIL
        summary = (f"all-reduce over {trays} trays ({world} GPUs): busbw "
                   + (out.message if out is not None
                      else f"{value:.1f} GB/s (reported: no sourced floor)"))
        if reading.oob:
            findings.append(f"{reading.oob} out-of-bounds (wrong) values")
        if span is None:
            findings.append("NCCL did not say whether it used the NVLink domain (no MNNVL "
                            "line in its INFO output)")
    return Result("rack.allreduce", v, summary, value=value, unit="GB/s",
                  thresholds={"busbw": floor} if floor else {}, findings=tuple(findings),
                  evidence=(Evidence.of(res.job.name, res.command, res.returncode, res.output,
                                        res.seconds),) if v != Verdict.PASS else (),
                  fault_code="NC-RACK-ALLREDUCE" if v == Verdict.FAIL else "",
                  simulated=simulated).noted("NCCL", reading.notes)


class DomainLoad:
    """Runs the domain's jobs through a cluster run (its launcher, ports, waves, logs)."""

    def __init__(self, plan: LoadPlan, run_dir: Path, say: Progress,
                 launch: Launcher | None = None) -> None:
        self.plan, self.say = plan, say
        self.runner = ClusterRun(plan.ctx, run_dir, say, launch)

    def preflight(self) -> list[str]:
        c = self.plan.ctx
        return self.runner.launcher.preflight([c.engine_names[n] for n in c.nodes])

    def allreduce(self) -> Result:
        c = self.plan.ctx
        self.say(f"all-reduce over all {len(c.nodes)} trays' {len(c.nodes) * self.plan.gpus} "
                 "GPUs (NVLink domain)")
        job = self.runner.job("rack", tuple(c.nodes), lambda first, port: allreduce_script(
            first, port, self.plan.gpus, c.cfg.max_bytes))
        res = self.runner.run_jobs([job])[0]
        rank0 = res.by_rank().get(0, "")
        return judge_allreduce(read_allreduce(rank0), res, mnnvl_span(rank0), self.plan.floor,
                               world=len(c.nodes) * self.plan.gpus, trays=len(c.nodes),
                               timeout_s=c.cfg.job_timeout_s, simulated=c.simulated)

    def _measure(self, pairs: list[sweep.GpuPair], figures: dict[sweep.GpuPair, float | None],
                 errors: dict[sweep.GpuPair, str]) -> None:
        c = self.plan.ctx
        jobs = []
        for p in pairs:
            def script(first: str, port: int, p: sweep.GpuPair = p) -> str:
                return pair_script(first, port, c.engine_names[p.trays[0]], p.gpus[0],
                                   p.gpus[1], max_bytes=c.cfg.max_bytes)
            jobs.append(self.runner.job("sweep", p.trays, script))
        for p, res in zip(pairs, self.runner.run_jobs(jobs), strict=True):
            reading = read_allreduce(res.by_rank().get(0, ""))
            figures[p] = reading.busbw
            why = res.error or ("hung past its limit" if res.timed_out else "")
            if why or reading.busbw is None:
                errors[p] = f"{why or reading.problem} ({res.job.name})"

    def sweep(self) -> tuple[Result, list[str]]:
        c = self.plan.ctx
        figures: dict[sweep.GpuPair, float | None] = {}
        errors: dict[sweep.GpuPair, str] = {}
        rounds = sweep.plan(c.nodes, self.plan.gpus)
        for k, pairs in enumerate(rounds, 1):
            if self.runner.stop.is_set():
                break
            self.say(f"sweep round {k}/{len(rounds)}: {len(pairs)} GPU pairs across trays")
            self._measure(pairs, figures, errors)
        iso = sweep.named(figures, self.plan.peer)
        names = iso.culprits + iso.suspects
        if names and not self.runner.stop.is_set():
            again = sweep.confirmations(names, figures, self.plan.peer)
            self.say(f"sweep confirmation: {', '.join(names)} with GPUs known good")
            self._measure(again, figures, errors)
        return sweep.judge(figures, errors, self.plan.peer, simulated=c.simulated)

    def close(self) -> None:
        self.runner.launcher.close()


__all__ = ["FLOOR", "PEER", "DomainLoad", "LoadPlan", "judge_allreduce", "load_plan",
           "mnnvl_span", "pair_script"]
