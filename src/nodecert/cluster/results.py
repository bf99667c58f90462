"""The cluster run's stage results from what its jobs measured: every node's fabric,
the pairings (a node or a rail whose pairings all fall short), the all-reduce over all
nodes with its bisection. Pure: the figures in, a Result out."""

from __future__ import annotations

from typing import Any

from nodecert.cluster import pairing as clusterplan
from nodecert.cluster.context import ClusterContext, PairOutcome
from nodecert.cluster.judge import Reading
from nodecert.transport.jobs import JobResult
from nodecert_node.contract import Evidence, Result, Verdict, worst


def rail_culprits(ctx: ClusterContext, pairs: list[PairOutcome]) -> dict[str, list[str]]:
    """node -> rails whose pairings were all below the rail floor while each partner's
    same rail did well with someone else."""
    out: dict[str, list[str]] = {}
    for dev in ctx.exp.devices:
        iso = clusterplan.isolate({p.nodes: p.rails_ok.get(dev, False) for p in pairs
                                   if not p.error and p.reading.rails})
        for node in iso.culprits:
            out.setdefault(node, []).append(dev)
    return out

def job_evidence(jobs: list[JobResult], names: set[str]) -> tuple[Evidence, ...]:
    return tuple(Evidence.of(j.job.name, j.command, j.returncode, j.output, j.seconds)
                 for j in jobs if j.job.name in names)

def fabric_result(ctx: ClusterContext, fabric: dict[str, dict[str, Any]],
                  grew: dict[str, dict[str, dict[str, int]]]) -> Result:
    bad = {n: f for n, f in fabric.items() if f["verdict"] in ("FAIL", "ERROR")}
    v = worst(Verdict[f["verdict"]] for f in fabric.values()) if fabric else Verdict.ERROR
    findings = tuple(f"{n}: {f['verdict']} {f['summary']}" for n, f in sorted(bad.items()))
    limit = ctx.counter_limit
    over = [f"{n} {dev}: {k} +{g} during the cluster's jobs ({limit.check(g).message})"
            for n, devs in sorted(grew.items()) for dev, cs in sorted(devs.items())
            for k, g in sorted(cs.items()) if not limit.check(g)]
    if over:
        findings += tuple(over)
        v = max(v, Verdict.FAIL)
    summary = (f"{len(fabric) - len(bad)}/{len(fabric)} nodes' fabric as ordered"
               if fabric else "no node's fabric check ran")
    return Result("cluster.fabric", v, summary, findings=findings,
                  simulated=ctx.simulated)

def pairs_result(ctx: ClusterContext, jobs: list[JobResult], pairs: list[PairOutcome],
                 iso: clusterplan.Isolation, rails: dict[str, list[str]]) -> Result:
    errors = [p for p in pairs if p.error]
    findings = [f"{n}: every pairing below expectation while its partners passed "
                "elsewhere" for n in iso.culprits]
    findings += [f"{', '.join(iso.suspects)}: bad pairings the evidence cannot pin on "
                 "one node (pair them with known-good nodes)"] if iso.suspects else []
    findings += [f"{n}: rail(s) {', '.join(d)} below {ctx.exp.rail.describe()} in "
                 "every pairing" for n, d in sorted(rails.items())]
    findings += [f"{' + '.join(p.nodes)}: {p.error} ({p.job})" for p in errors]
    findings += [f"{' + '.join(p.nodes)}: lost {x}" for p in pairs
                 for x in p.reading.port_failures]
    bad = [p for p in pairs if not p.ok and not p.error]
    v = (Verdict.FAIL if iso.culprits or iso.suspects or rails or bad else Verdict.PASS)
    if errors:
        v = max(v, Verdict.ERROR)
    busbw = [p.reading.busbw for p in pairs if p.reading.busbw is not None]
    summary = (f"{len(pairs) - len(bad) - len(errors)}/{len(pairs)} pairings meet "
               f"{ctx.exp.busbw.describe()} and every rail "
               f"{ctx.exp.rail.describe()}")
    return Result("cluster.pairs", v, summary, value=min(busbw) if busbw else None,
                  unit="GB/s", thresholds={"busbw": ctx.exp.busbw,
                                           "rail": ctx.exp.rail},
                  findings=tuple(findings),
                  evidence=job_evidence(jobs, {p.job for p in pairs if not p.ok}),
                  fault_code="NC-CLUSTER-PAIR" if v != Verdict.PASS else "",
                  simulated=ctx.simulated).noted(
        "NCCL/perftest", [f"{' + '.join(p.nodes)}: {n}" for p in pairs
                          for n in p.reading.notes])

def allreduce_result(ctx: ClusterContext, jobs: list[JobResult], reading: Reading,
                     whole: JobResult, bis: clusterplan.Bisection | None) -> Result:
    exp = ctx.exp.busbw
    findings: list[str] = []
    if whole.timed_out:
        v, summary = Verdict.ERROR, (f"all-reduce over {len(ctx.nodes)} nodes hung "
                                     f"past {ctx.cfg.job_timeout_s:g} s")
    elif reading.port_failures and not whole.error:
        # a port lost under load: whatever the run measured (or could not), it names it
        v = Verdict.FAIL
        summary = (f"all-reduce over {len(ctx.nodes)} nodes lost a network port under "
                   f"load: {reading.port_failures[0]}")
        findings += reading.port_failures
        if reading.busbw is not None:
            findings.append(f"busbw {reading.busbw:.1f} GB/s measured on the ports left")
    elif whole.error or reading.busbw is None:
        v = Verdict.ERROR
        summary = f"all-reduce over all nodes did not run: {whole.error or reading.problem}"
    else:
        out = exp.check(reading.busbw)
        transport = ctx.exp.transport_problem(reading)
        v = Verdict.PASS if out and not reading.oob and not transport else Verdict.FAIL
        summary = f"all-reduce over {len(ctx.nodes)} nodes: busbw {out.message}"
        if transport:
            # the figure may still meet its floor: the path is what the order breaks
            summary = f"{summary}; {transport}"
            findings.append(transport)
        if reading.oob:
            findings.append(f"{reading.oob} out-of-bounds (wrong) values")
    if bis is not None:
        findings.append(f"bisection in {len(bis.rounds)} round(s) names: "
                        f"{', '.join(bis.culprits) or 'nobody (every group passed)'}")
        if v == Verdict.ERROR and bis.culprits:
            v = Verdict.FAIL  # the hang is explained: the named node
    left = {n: k for j in jobs for n, k in j.leftovers.items() if k}
    if left:
        findings.append(f"processes left after cancelled jobs: {left}")
        v = max(v, Verdict.ERROR)
    return Result("cluster.allreduce", v, summary, value=reading.busbw, unit="GB/s",
                  thresholds={"busbw": exp}, findings=tuple(findings),
                  evidence=job_evidence(jobs, {whole.job.name}) if v != Verdict.PASS else (),
                  simulated=ctx.simulated).noted("NCCL", reading.notes)


__all__ = ["allreduce_result", "fabric_result", "job_evidence", "pairs_result",
           "rail_culprits"]
