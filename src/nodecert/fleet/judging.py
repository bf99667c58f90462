"""The fleet's results added to a run: each host judged against the fleet baseline
(fleet.peers) and against its own past runs (fleet.trend), recorded in its results.json
beside the checks' results, as drift is.

Judged with the thresholds the run used (recorded in its plan); a run planned before
the fleet thresholds existed takes them from the common profile.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nodecert.fleet import peers, trends
from nodecert.fleet.baseline import Baseline, newest_per_host
from nodecert.fleet.samples import FleetDataError, Sample, pair_samples
from nodecert.profiles import thresholds
from nodecert.runs.layout import RESULTS, RunDir, RunDirError, runs_under
from nodecert.runs.records import (
    GroupRecord,
    HostRecord,
    finished_run,
    host_history,
    host_records,
    read_cluster_record,
    read_host_record,
    recorded_plan,
)
from nodecert.runs.store import HostRun, ValidationRun, write_json
from nodecert_node.contract import Limits, Result, Verdict, worst

FLEET_KEYS = (*peers.KEYS, *trends.KEYS)


def fleet_limits(limits: Limits | None) -> Limits:
    """The run's limits, with the common profile's value for any fleet key it lacks."""
    common = thresholds.common_profile().thresholds
    raw: dict[str, dict[str, Any]] = {k: {**common[k], "origin": "profile common"}
                                      for k in FLEET_KEYS if k in common}
    if limits is not None:
        raw.update({k: t.as_dict() for k, t in limits.pick(*FLEET_KEYS).items()})
    return Limits(raw)


def history_of(runs_dir: Path, host: str, current: Path | None = None) -> list[
        tuple[str, list[Result]]]:
    """(run id, results) of each of the host's runs under runs_dir, oldest first; with
    `current` (a record), only the runs that started before it, then it: a run judged
    later is never judged with runs made after it."""
    cur = read_host_record(current) if current is not None and current.is_file() else None

    def when(r: HostRecord) -> float:
        return r.started or r.path.stat().st_mtime
    recs = [r for r in host_history(runs_dir, host)
            if cur is None or (r.path.resolve() != cur.path.resolve() and when(r) < when(cur))]
    recs.sort(key=when)
    out = [(r.run_id or r.path.parent.parent.name, r.results) for r in recs]
    if cur is not None:
        out.append((cur.run_id or cur.path.parent.parent.name, cur.results))
    return out


def host_results(hr: HostRun, *, baseline: Baseline | None,
                 runs_dir: Path | None) -> list[Result]:
    limits = fleet_limits(hr.plan.limits())
    res: list[Result] = []
    if baseline is not None:
        res.append(peers.judge(list(hr.results), baseline, limits,
                               host=hr.host).with_(simulated=hr.simulated or baseline.simulated))
    if runs_dir is not None:
        # This run's record was saved when its host finished: judged as the newest run.
        saved = hr.out_dir / RESULTS
        hist = history_of(runs_dir, hr.host, current=saved) if saved.is_file() else \
            [*history_of(runs_dir, hr.host), (hr.plan.run_id, list(hr.results))]
        res.append(trends.judge(hist, limits).with_(simulated=hr.simulated))
    return res


def add_to_run(run: ValidationRun, *, baseline: Baseline | None = None,
               runs_dir: Path | None = None) -> dict[str, list[Result]]:
    """fleet.peers (with a baseline) and fleet.trend (with the runs directory) for every
    host of the run that finished; saved in each host's record and the run's summary."""
    out: dict[str, list[Result]] = {}
    for name, hr in sorted(run.hosts.items()):
        if hr.status != "done":
            continue  # an unreachable or lost host has no figures to judge
        res = host_results(hr, baseline=baseline, runs_dir=runs_dir)
        out[name] = res
        hr.results.extend(res)
        hr.save()
    write_json(run.dir.summary, run.summary())
    return out


def load_runs(paths: Iterable[Path]) -> tuple[list[HostRecord], dict[str, list[Sample]]]:
    """The newest record of every host in these runs -- validation runs, or cluster runs
    (their nodes' own records) -- and each cluster node's figures from its pairings."""
    records: list[HostRecord] = []
    extra: dict[str, list[Sample]] = {}
    for path in paths:
        if RunDir(path).cluster_results.is_file():
            try:
                cluster = read_cluster_record(path)
            except RunDirError as exc:
                raise FleetDataError(exc.what, hint=exc.hint) from exc
            records += [rec for run in runs_under(path / "nodes") for rec in host_records(run)]
            extra.update(pair_samples(cluster.pairs))
        else:
            records += finished_run(path)
    return newest_per_host(records), extra


def judge_records(records: list[HostRecord], *, baseline: Baseline | None,
                  runs_dir: Path | None,
                  extra: dict[str, list[Sample]] | None = None) -> dict[str, list[Result]]:
    """fleet.peers and fleet.trend for saved records (read-only: nothing is written), each
    judged with the thresholds its run recorded; extra: host -> figures from its cluster
    run's pairings."""
    out: dict[str, list[Result]] = {}
    for rec in records:
        plan = recorded_plan(rec.run, rec.host)
        limits = fleet_limits(plan.limits() if plan else None)
        res: list[Result] = []
        if baseline is not None:
            res.append(peers.judge(rec.results, baseline, limits, host=rec.host,
                                   extra=(extra or {}).get(rec.host, ())).with_(
                simulated=rec.simulated or baseline.simulated))
        if runs_dir is not None:
            res.append(trends.judge(history_of(runs_dir, rec.host, current=rec.path),
                                    limits).with_(simulated=rec.simulated))
        out[rec.host] = res
    return out


def with_results(rec: HostRecord, extra: list[Result]) -> HostRecord:
    """The record with `extra` results in place of any it held for the same checks, and
    its verdict the worse of the saved one and theirs (a node the fleet FAILs is FAIL)."""
    names = {r.check for r in extra}
    results = [r for r in rec.results if r.check not in names] + list(extra)
    verdict = worst([rec.verdict if rec.verdict is not None else Verdict.ERROR,
                     *(r.verdict for r in extra)])
    return HostRecord(rec.path, {**rec.data, "results": [r.as_dict() for r in results],
                                 "verdict": verdict.name})


def add_to_cluster_run(cluster: GroupRecord, baseline: Baseline) -> GroupRecord:
    """A cluster run's nodes judged against the fleet: fleet.peers in each node's record
    (the nodes' own checks, under run_dir/nodes), and one cluster result naming every
    node beyond its peers; the cluster's verdict is the worse of its own and that one.
    The cluster record is saved again; returns it."""
    per_node: dict[str, Result] = {}
    run_dir = cluster.run_dir
    pairs = pair_samples(cluster.pairs)
    for run in runs_under(run_dir / "nodes"):
        for rec in host_records(run):
            res = judge_records([rec], baseline=baseline, runs_dir=None, extra=pairs)[rec.host]
            per_node[rec.host] = res[0]
            write_json(rec.path, with_results(rec, res).data, compact=True)
    verdict = worst(r.verdict for r in per_node.values())
    flagged = {n: r for n, r in sorted(per_node.items()) if r.verdict >= Verdict.WARN}
    summary = (f"{len(per_node)} node(s) within the fleet's spread (baseline "
               f"{baseline.version})" if not flagged else
               f"{len(flagged)} of {len(per_node)} node(s) beyond their peers: "
               + "; ".join(f"{n}: {r.summary}" for n, r in list(flagged.items())[:2]))
    result = Result("fleet.peers", verdict if per_node else Verdict.ERROR,
                    summary if per_node else "no node record to judge against the fleet",
                    value={n: r.value for n, r in per_node.items()},
                    findings=tuple(f"{n}: {r.summary}" for n, r in flagged.items()),
                    fault_code="NC-FLEET-OUTLIER" if verdict >= Verdict.FAIL else "",
                    simulated=cluster.simulated)
    results = [*(r for r in cluster.results if r.check != "fleet.peers"), result]
    saved = cluster.verdict if cluster.verdict is not None else Verdict.ERROR
    new = {**cluster.data, "results": [r.as_dict() for r in results],
           "verdict": worst([saved, result.verdict]).name,
           "culprits": sorted({*cluster.culprits,
                               *(n for n, r in flagged.items() if r.verdict >= Verdict.FAIL)})}
    write_json(cluster.path, new)
    return GroupRecord(cluster.path, new)


__all__ = ["FLEET_KEYS", "add_to_cluster_run", "add_to_run", "fleet_limits", "history_of",
           "host_results", "judge_records", "load_runs", "with_results"]
