"""The fleet baseline: per GPU model and metric, the peers' median and robust spread,
built from many nodes' runs and signed (a DSSE envelope, as certificates are).

The baseline is versioned by what it was built from: its version is the digest of its
statistics, so two baselines with the same figures have the same version and a changed
one is never mistaken for its predecessor.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.certs import signing
from nodecert.fleet import stats
from nodecert.fleet.samples import FleetDataError, Sample, gpu_model, samples
from nodecert.runs.records import HostRecord
from nodecert.runs.store import write_json
from nodecert_node.contract import Verdict

PAYLOAD_TYPE = "application/vnd.nodecert.fleet-baseline+json"
SCHEMA = "nodecert.fleet-baseline/v1"
MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class MetricStats:
    unit: str
    better: str
    median: float
    sigma: float  # 1.4826 x MAD
    nodes: int  # how many nodes gave a figure
    samples: int  # how many figures (GPUs, pairs, or one per node)
    low: float
    high: float

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "better": self.better, "median": self.median,
                "sigma": self.sigma, "nodes": self.nodes, "samples": self.samples,
                "min": self.low, "max": self.high}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricStats:
        return cls(str(d["unit"]), str(d["better"]), float(d["median"]), float(d["sigma"]),
                   int(d["nodes"]), int(d["samples"]), float(d["min"]), float(d["max"]))


@dataclass(frozen=True)
class Baseline:
    groups: dict[str, dict[str, MetricStats]]  # GPU model -> metric -> stats
    created: str
    runs: tuple[str, ...]
    hosts: int
    excluded: dict[str, str]  # host -> why it is not in the baseline
    simulated: bool
    fleet: str | None = None  # the fleet it was built for (signed with it)

    @property
    def version(self) -> str:
        body = {m: {k: s.as_dict() for k, s in g.items()} for m, g in self.groups.items()}
        return hashlib.sha256(signing.canonical_json(body)).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": self.version, "created": self.created,
                "fleet": self.fleet, "runs": list(self.runs), "hosts": self.hosts,
                "simulated": self.simulated,
                "excluded": dict(sorted(self.excluded.items())),
                "groups": {m: {k: s.as_dict() for k, s in sorted(g.items())}
                           for m, g in sorted(self.groups.items())}}


def newest_per_host(records: Iterable[HostRecord]) -> list[HostRecord]:
    """One record per host: the one that finished last (a host validated twice counts once)."""
    best: dict[str, HostRecord] = {}
    for rec in records:
        if rec.host not in best or rec.finished > best[rec.host].finished:
            best[rec.host] = rec
    return [best[h] for h in sorted(best)]


def build(records: Iterable[HostRecord], *, now: dt.datetime | None = None,
          extra: dict[str, list[Sample]] | None = None, fleet: str | None = None) -> Baseline:
    """The baseline of these hosts' newest records. A host that FAILed or ERRORed, or whose
    GPU model was not read, is left out (and listed why): a baseline is what healthy
    peers measure. extra: host -> figures from elsewhere (a cluster run's pairings)."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    meta: dict[tuple[str, str], tuple[str, str]] = {}
    hosts_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    excluded: dict[str, str] = {}
    runs: set[str] = set()
    used = 0
    simulated = False
    for rec in newest_per_host(records):
        model = gpu_model(rec.results)
        if rec.verdict is None or rec.verdict >= Verdict.FAIL:
            said = "none" if rec.verdict is None else rec.verdict.name
            excluded[rec.host] = f"verdict {said} in run {rec.run_id}"
            continue
        if not model:
            excluded[rec.host] = f"no GPU model read (hardware.inventory) in run {rec.run_id}"
            continue
        used += 1
        simulated = simulated or rec.simulated
        if rec.run_id:
            runs.add(rec.run_id)
        for s in [*samples(rec.results), *(extra or {}).get(rec.host, [])]:
            key = (model, s.metric)
            values[key].append(s.value)
            meta[key] = (s.unit, s.better)
            hosts_of[key].add(rec.host)
    groups: dict[str, dict[str, MetricStats]] = defaultdict(dict)
    for (model, metric), vs in values.items():
        unit, better = meta[(model, metric)]
        # Rounded as written: the baseline read back is the baseline built.
        groups[model][metric] = MetricStats(unit, better, round(stats.median(vs), 4),
                                            round(stats.robust_sigma(vs), 4),
                                            len(hosts_of[(model, metric)]), len(vs), min(vs),
                                            max(vs))
    if not groups:
        raise FleetDataError("no host of these runs has figures for a baseline"
                             + (f" ({len(excluded)} left out: "
                                + "; ".join(f"{h}: {w}" for h, w in sorted(excluded.items())[:3])
                                + ")" if excluded else ""),
                             hint="build the baseline from runs of a suite that measures "
                                  "(standard or full: burn-in, NCCL, bandwidth, soak)")
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Baseline(dict(groups), when, tuple(sorted(runs)), used, excluded, simulated,
                    fleet or None)


def write(baseline: Baseline, path: Path, key: signing.PrivateKey) -> None:
    """The baseline, signed, written whole or not at all (mode 0644: it holds no secret)."""
    env = signing.sign_envelope(signing.canonical_json(baseline.as_dict()), PAYLOAD_TYPE, key)
    write_json(path, env)


def _parse(data: dict[str, Any], where: str) -> Baseline:
    if data.get("schema") != SCHEMA:
        raise FleetDataError(f"{where}: not a fleet baseline (schema {data.get('schema')!r})",
                             hint="build one with `nodecert fleet baseline`")
    try:
        groups = {str(m): {str(k): MetricStats.from_dict(s) for k, s in g.items()}
                  for m, g in data["groups"].items()}
        b = Baseline(groups, str(data["created"]), tuple(map(str, data.get("runs") or [])),
                     int(data["hosts"]), {str(h): str(w) for h, w in
                                          (data.get("excluded") or {}).items()},
                     bool(data.get("simulated")),
                     str(data["fleet"]) if data.get("fleet") is not None else None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FleetDataError(f"{where}: damaged fleet baseline ({exc!r})",
                             hint="build it again with `nodecert fleet baseline`") from exc
    if b.version != data.get("version"):
        raise FleetDataError(f"{where}: its version {data.get('version')!r} is not the digest "
                             f"of its figures ({b.version})",
                             hint="build it again with `nodecert fleet baseline`")
    return b


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a figure")


@dataclass(frozen=True)
class Expect:
    """What a verifier asks of a baseline besides its signature: built for this fleet
    (None: any), no older than max_age (None: any age)."""

    fleet: str | None = None
    max_age: dt.timedelta | None = None


def held(b: Baseline, where: str, expect: Expect, now: dt.datetime | None = None) -> Baseline:
    """The baseline, when it is for the fleet and of the age the verifier asks."""
    if expect.fleet is not None and b.fleet != expect.fleet:
        raise FleetDataError(f"{where}: built for fleet {b.fleet!r}, not {expect.fleet!r}",
                             hint="use the baseline of this fleet (nodecert fleet baseline "
                                  "--fleet NAME)")
    if expect.max_age is not None:
        try:
            made = dt.datetime.fromisoformat(b.created.replace("Z", "+00:00"))
        except ValueError as exc:
            raise FleetDataError(f"{where}: its creation time {b.created!r} is unreadable"
                                 ) from exc
        made = made if made.tzinfo else made.replace(tzinfo=dt.UTC)
        if (now or dt.datetime.now(dt.UTC)) - made > expect.max_age:
            days = expect.max_age.total_seconds() / 86400
            raise FleetDataError(f"{where}: built {b.created}, older than the {days:g} days "
                                 "allowed", hint="build a current one with `nodecert fleet "
                                                 "baseline`")
    return b


def read(path: Path, trusted: list[signing.PublicKey], expect: Expect | None = None,
         now: dt.datetime | None = None) -> Baseline:
    """A baseline whose signature verifies with one of the trusted keys, for the fleet
    and of the age `expect` asks; anything else is refused with FleetDataError (a node
    is never judged against an unverified, foreign or stale one)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FleetDataError(f"cannot read fleet baseline {path}: {exc.strerror}") from exc
    if len(raw) > MAX_BYTES:
        raise FleetDataError(f"{path}: {len(raw)} bytes, more than a fleet baseline holds")
    try:
        env = json.loads(raw)
        ptype, payload, _ = signing.verify_envelope(env, trusted)
    except ValueError as exc:
        raise FleetDataError(f"{path}: not a signed fleet baseline ({exc})",
                             hint="build one with `nodecert fleet baseline`") from exc
    except signing.SignatureError as exc:
        raise FleetDataError(f"{path}: the fleet baseline's signature does not verify ({exc})",
                             hint="give the public key of whoever signed it (--pubkey)") from exc
    if ptype != PAYLOAD_TYPE:
        raise FleetDataError(f"{path}: payload type {ptype}, expected {PAYLOAD_TYPE}")
    try:
        data = json.loads(payload, parse_constant=_no_constant)
    except ValueError as exc:
        raise FleetDataError(f"{path}: the signed payload is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise FleetDataError(f"{path}: the signed payload is not a fleet baseline")
    return held(_parse(data, str(path)), str(path), expect or Expect(), now)


__all__ = [
    "PAYLOAD_TYPE",
    "SCHEMA",
    "Baseline",
    "Expect",
    "MetricStats",
    "build",
    "held",
    "newest_per_host",
    "read",
    "write",
]
