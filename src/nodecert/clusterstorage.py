"""The cluster's data-path stage: the shared file system under every node at once.

  per node    each node's storage.shared (run through validate): mounted as ordered, its
              sequential read, checkpoint write and small-file rate against the order;
  all nodes   every node reads its own file at the same moment (a job through the engine:
              one fio a node, direct I/O): the total against the order's
              aggregate_read_mbps_min (does the file system keep every GPU fed?), and each
              node's share against the median (storage.shared_peer_fraction_min): the
              node the others do not wait for is not the one reading slowly.
Files are written in a fresh directory per node under the first mount point and removed
by the read job, whatever its outcome.
"""

from __future__ import annotations

import shlex
import statistics
from typing import Any

from nodecert_node.contract import Result, Threshold, Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse.fio import parse_fio

PREP, READ = "prep", "read"


def work_dir(mount: str, run: str) -> str:
    return f"{mount}/nodecert-agg-{run}-$(hostname -s)"


def script(phase: str, mount: str, run: str, size_mb: int, seconds: int = 10) -> str:
    """prep: each node lays out and fsyncs its file; read: reads it (direct) over and over
    for `seconds`, then removes its directory. Reading for a fixed time, not a fixed
    size, keeps every node reading while the others do: a node that started a moment
    later is not measured alone."""
    d = work_dir(shlex.quote(mount), run)
    if phase == PREP:
        return (f"set -e; mkdir -m 0700 {d}; exec fio --name=aggprep --output-format=json "
                f"--rw=write --bs=4M --ioengine=psync --end_fsync=1 --size={size_mb}M "
                f"--filename={d}/agg.dat >/dev/null")
    return (f"trap 'rm -rf {d}' EXIT; fio --name=aggread --output-format=json --rw=read "
            f"--bs=1M --direct=1 --ioengine=psync --size={size_mb}M --time_based "
            f"--runtime={seconds} --filename={d}/agg.dat")


def read_rates(by_rank: dict[int | None, str], ranks: list[str]) -> dict[str, float | None]:
    """node -> MB/s its fio read moved (None where its output is unreadable)."""
    out: dict[str, float | None] = {}
    for k, node in enumerate(ranks):
        try:
            out[node] = parse_fio(by_rank.get(k, ""))[0]["read"]["bw_bytes"] / 1e6
        except (ParseError, IndexError, KeyError):
            out[node] = None
    return out


def judge(per_node: dict[str, dict[str, Any]], rates: dict[str, float | None],
          job_error: str, *, spec: dict[str, Any], peer: Threshold,
          simulated: bool) -> tuple[Result, list[str]]:
    """(cluster.storage, the nodes it names) (pure)."""
    findings: list[str] = []
    errors: list[str] = []
    named: set[str] = set()
    for n, r in sorted(per_node.items()):
        if r.get("verdict") == "FAIL":
            named.add(n)
            findings.append(f"{n}: {r.get('summary', '')}")
        elif r.get("verdict") == "ERROR":
            errors.append(f"{n}: {r.get('summary', '')}")
    got = {n: v for n, v in rates.items() if v is not None}
    if job_error or len(got) < len(rates):
        missing = sorted(n for n, v in rates.items() if v is None)
        errors.append("the aggregate read did not give every node's figure: "
                      + (job_error or f"no fio result from {', '.join(missing)}"))
    total = round(sum(got.values()), 1)
    used: dict[str, Threshold] = {"peer": peer}
    if got:
        mid = statistics.median(got.values())
        for n, v in sorted(got.items()):
            out = peer.check(round(v / mid, 3)) if mid else None
            if out is not None and not out:
                named.add(n)
                findings.append(f"{n}: read {v:.0f} MB/s while every node read at once, as a "
                                f"fraction of the median ({mid:.0f}): {out.message}")
        if spec.get("aggregate_read_mbps_min") and not errors:
            t = Threshold(spec["aggregate_read_mbps_min"], ">=", "MB/s",
                          "order spec nodecert_shared_fs.aggregate_read_mbps_min",
                          "the order (inventory nodecert_shared_fs)")
            used["aggregate"] = t
            out = t.check(total)
            if not out:
                findings.append(f"aggregate read of {len(got)} nodes at once: {out.message}")
    v = Verdict.FAIL if findings else Verdict.PASS
    if errors:
        v = max(v, Verdict.ERROR)
    summary = (f"{len(got)} nodes reading at once: {total:.0f} MB/s in total, "
               f"{min(got.values(), default=0):.0f}-{max(got.values(), default=0):.0f} MB/s "
               "per node" if v == Verdict.PASS else (findings + errors)[0][:300])
    per = {n: r.get("value") or {} for n, r in sorted(per_node.items())}
    return (Result("cluster.storage", v, summary,
                   value={"aggregate_read_mbps": total, "read_mbps_at_once": got,
                          "per_node": per}, unit="MB/s", thresholds=used,
                   findings=tuple(findings + errors),
                   fault_code="NC-SHARED-FS" if v == Verdict.FAIL else "",
                   simulated=simulated), sorted(named))


__all__ = ["PREP", "READ", "judge", "read_rates", "script"]
