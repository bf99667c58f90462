"""The cluster's data-path stage: the shared file system under every node at once.

  per node    each node's storage.shared (run through validate): mounted as ordered, its
              sequential read, checkpoint write and small-file rate against the order;
              all nodes run it at the same moment, and a node below a floor then is
              measured again alone and judged by that (the floors are one node's);
  all nodes   every node reads its own file at the same moment (a job through the engine:
              one fio a node, direct I/O): the total against the order's
              aggregate_read_mbps_min (does the file system keep every GPU fed?), and each
              node's share against the median (storage.shared_peer_fraction_min): the
              node the others do not wait for is not the one reading slowly;
  repeat      a node below its share is measured again, all nodes at once as before, and
              named only when it is below in both reads: one slow read on a shared
              server is the server's moment (its other clients, its cache), a node's own
              path (NIC, mount options, client) is slow every time.
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
            bw = parse_fio(by_rank.get(k, ""))[0]["read"]["bw_bytes"]
        except (ParseError, IndexError, KeyError):
            bw = None
        out[node] = bw / 1e6 if bw is not None else None
    return out


def laggards(rates: dict[str, float | None], peer: Threshold) -> dict[str, str]:
    """node -> what its read was against the median of one read at once, for each node
    below `peer` (pure)."""
    got = {n: v for n, v in rates.items() if v is not None}
    mid = statistics.median(got.values()) if got else 0.0
    out: dict[str, str] = {}
    for n, v in sorted(got.items()):
        check = peer.check(round(v / mid, 3)) if mid else None
        if check is not None and not check:
            out[n] = (f"read {v:.0f} MB/s while every node read at once, as a fraction of "
                      f"the median ({mid:.0f}): {check.message}")
    return out


def _own_runs(per_node: dict[str, dict[str, Any]]) -> tuple[list[str], list[str], list[str],
                                                              set[str]]:
    """(findings, errors, notes, nodes named) from each node's own storage.shared run:
    one that FAILed is named, one that ERRORed is an error, one re-measured alone is
    noted."""
    findings: list[str] = []
    errors: list[str] = []
    notes: list[str] = []
    named: set[str] = set()
    for n, r in sorted(per_node.items()):
        if r.get("measured"):  # re-measured alone after a low figure with all at once
            notes.append(f"{n}: storage.shared measured {r['measured']}"[:600])
        if r.get("verdict") == "FAIL":
            named.add(n)
            findings.append(f"{n}: {r.get('summary', '')}")
        elif r.get("verdict") == "ERROR":
            errors.append(f"{n}: {r.get('summary', '')}")
    return findings, errors, notes, named


def judge(per_node: dict[str, dict[str, Any]], rates: dict[str, float | None],
          job_error: str, *, spec: dict[str, Any], peer: Threshold,
          simulated: bool, repeat: dict[str, float | None] | None = None,
          repeat_error: str = "") -> tuple[Result, list[str]]:
    """(cluster.storage, the nodes it names) (pure). `repeat`: the second read at once,
    taken when a node was below its share in the first; a node is named for its share
    only when it is below in both."""
    findings, errors, notes, named = _own_runs(per_node)
    reads = [(rates, job_error, "the aggregate read")]
    if repeat is not None:
        reads.append((repeat, repeat_error, "the repeated aggregate read"))
    rounds = [one for one, _, _ in reads]
    for one, err, what in reads:
        if err or any(v is None for v in one.values()):
            missing = sorted(n for n, v in one.items() if v is None)
            errors.append(f"{what} did not give every node's figure: "
                          + (err or f"no fio result from {', '.join(missing)}"))
    got = {n: v for n, v in rates.items() if v is not None}
    used: dict[str, Threshold] = {"peer": peer}
    slow = [laggards(one, peer) for one in rounds]
    for n, why in slow[0].items():
        later = [s.get(n) for s in slow[1:]]
        if repeat is not None and not all(later):
            again = repeat.get(n)
            notes.append(f"{n}: {why}; not confirmed: "
                         + (f"{again:.0f} MB/s when all read again" if again is not None
                            else "no figure when all read again")
                         + " (one slow read of a shared server is not held against a node)")
            continue
        named.add(n)
        findings.append(f"{n}: {why}" + "".join(f"; again: {w}" for w in later if w))
    # the aggregate: what the file system delivered to all nodes at once, at its best read
    totals = [round(sum(v for v in one.values() if v is not None), 1) for one in rounds]
    total = max(totals)
    if got and spec.get("aggregate_read_mbps_min") and not errors:
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
    value: dict[str, Any] = {"aggregate_read_mbps": total, "read_mbps_at_once": got,
                             "per_node": per}
    if repeat is not None:
        value["repeat_read_mbps_at_once"] = {n: x for n, x in repeat.items() if x is not None}
        value["aggregate_read_mbps_each"] = totals
    return (Result("cluster.storage", v, summary, value=value, unit="MB/s", thresholds=used,
                   findings=tuple(findings + errors + notes),
                   fault_code="NC-SHARED-FS" if v == Verdict.FAIL else "",
                   simulated=simulated), sorted(named))


__all__ = ["PREP", "READ", "judge", "laggards", "read_rates", "script"]
