"""`nodecert cluster validate`: the fabric of every node, every node paired with at least
two partners (two-node all-reduce and ib_write_bw per rail), the all-reduce over all
nodes, and on its failure a bisection that names the culprit(s).

Stages and what each contributes to the cluster's verdict:
  cluster.fabric     every node's own fabric check (net.ib / net.roce) run through
                     validate: ports, rates, firmware, error counters growing;
  fabric.cabling     with a cable plan: the discovered links against it (clustercabling);
  cluster.pairs      pair rounds, isolation of the node (or the rail) whose pairings are
                     all bad while its partners do well elsewhere;
  cluster.allreduce  the collective over all nodes, bisected when it falls short.
  cluster.scaling    the reference training job over all nodes (clusterscaling);
  cluster.storage    the shared file system read by every node at once (clusterstorage).
A job that could not run (launch failure, hang past its limit) is ERROR with its logs;
a node is named only from evidence, never guessed.

This module is long because it holds every stage's job orchestration side by side (the
jobs share one sequence of names and ports, one wave scheduler and one log directory);
what each stage's figures mean lives in clusterjudge, clusterscaling and clusterstorage.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.cluster import counters as clustercounters
from nodecert.cluster import pairing as clusterplan
from nodecert.cluster import scaling as clusterscaling
from nodecert.cluster import storage as clusterstorage
from nodecert.cluster.jobs import Job, JobResult, Launcher, launcher
from nodecert.cluster.judge import (
    Expectation,
    Reading,
    allreduce_script,
    expectation,
    pair_script,
    rail_notes,
    read_allreduce,
    read_rails,
)
from nodecert.cluster.output import port_busy
from nodecert.core.errors import InventoryError
from nodecert.inventory.cluster import PORT_BLOCK, ClusterConfig
from nodecert.inventory.reader import HostSpec
from nodecert.profiles import thresholds
from nodecert.runs.layout import RunDir
from nodecert.runs.store import write_json
from nodecert.transport.ssh import Endpoint
from nodecert_node.contract import Evidence, Result, Threshold, Verdict, worst

Progress = Callable[[str], None]
SCHEMA = "nodecert.cluster-run/v1"


@dataclass
class PairOutcome:
    nodes: tuple[str, str]
    round: int
    reading: Reading
    job: str
    ok: bool
    rails_ok: dict[str, bool] = field(default_factory=dict)
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "round": self.round, "job": self.job,
                "ok": self.ok, "busbw": self.reading.busbw, "oob": self.reading.oob,
                "rails": self.reading.rails or {}, "rails_ok": self.rails_ok,
                "problem": self.reading.problem, "error": self.error}


@dataclass
class ClusterContext:
    """Everything a cluster run needs, resolved from the inventory before any job."""

    nodes: list[str]  # inventory names
    engine_names: dict[str, str]  # inventory name -> the engine's name for it
    specs: dict[str, HostSpec]
    endpoints: dict[str, Endpoint]
    launch: Endpoint
    cfg: ClusterConfig
    exp: Expectation
    simulated: bool
    # error counters may gain this much while the jobs run (net.error_counter_growth_max)
    counter_limit: Threshold = field(default_factory=lambda: Threshold(0, "<=", "errors"))
    # the nodes' resolved thresholds (the scaling stage's floors)
    limits: dict[str, Threshold] = field(default_factory=dict)
    # the scaling job's timed and warm-up steps (the suite's load.scaling_steps/_warmup)
    scaling_steps: tuple[int, int] = (30, 10)
    # the order's shared file system (nodecert_shared_fs), None where it names none
    shared_fs: dict[str, Any] | None = None


class ClusterRun:
    def __init__(self, ctx: ClusterContext, run_dir: Path, say: Progress,
                 launch: Launcher | None = None,
                 counters: Callable[[], dict[str, Any]] | None = None, *,
                 cabling: Callable[[], Result] | None = None) -> None:
        self.ctx, self.dir, self.say = ctx, run_dir, say
        by_engine = {ctx.engine_names[n]: ctx.endpoints[n] for n in ctx.nodes}
        self.launcher = launch or launcher(ctx.cfg, ctx.launch, by_engine)
        self.launcher.launch_name = ctx.engine_names.get(ctx.launch.host, ctx.launch.host)
        self.stop = threading.Event()
        self._seq = 0
        # where this run's port blocks start, among the site's port_slots
        self._port_slot = secrets.randbelow(ctx.cfg.port_slots)
        self._lock = threading.Lock()
        self.jobs: list[JobResult] = []
        # Reads every node's error counters (clustercounters.read_all); None: not read.
        self.counters = counters
        # Discovers the fabric and judges it against the cable plan; None: no plan.
        self.cabling = cabling

    # --- jobs -------------------------------------------------------------------------
    def job(self, kind: str, nodes: tuple[str, ...], script_for: Callable[[str, int], str]
            ) -> Job:
        with self._lock:
            self._seq += 1
            seq = self._seq
        names = self.launcher.rank_order([self.ctx.engine_names[n] for n in nodes])
        # Each job's own ports: jobs of one round run at once on disjoint nodes, and a
        # port is never reused right after a job that may have hung on it. Where the
        # slots start is drawn per run, so another user of the node cannot know the
        # ports in advance; the job's first rank checks they are free (prelude).
        slots = self.ctx.cfg.port_slots
        port = self.ctx.cfg.bootstrap_port + ((seq + self._port_slot) % slots) * PORT_BLOCK
        return Job(f"nodecert-{self.dir.name[-6:]}-{kind}-{seq}", names,
                   script_for(names[0], port), timeout_s=self.ctx.cfg.job_timeout_s)

    def run_jobs(self, jobs: list[Job]) -> list[JobResult]:
        """Jobs on disjoint nodes at once; a job sharing a node with another (a bisection
        pairs every lone suspect with the same known-good node) waits for the next wave:
        an exclusive allocation never waits on nodecert's own job."""
        done: dict[int, JobResult] = {}
        pending = list(enumerate(jobs))
        while pending:
            wave: list[tuple[int, Job]] = []
            later: list[tuple[int, Job]] = []
            busy: set[str] = set()
            for k, job in pending:
                if busy.isdisjoint(job.nodes):
                    wave.append((k, job))
                    busy |= set(job.nodes)
                else:
                    later.append((k, job))
            pool = ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix="cluster")
            futures = [(k, pool.submit(self.launcher.run, j)) for k, j in wave]
            try:
                for k, f in futures:
                    while not f.done():
                        wait([f], timeout=1.0)  # wakes for Ctrl-C
                    done[k] = f.result()
            except KeyboardInterrupt:
                self.stop.set()
                self.launcher.interrupt()  # cancels and sweeps; the waits end at once
                pool.shutdown(wait=True)
                self.launcher.settle()
                raise
            finally:
                pool.shutdown(wait=True)
            pending = later
        results = [done[k] for k in range(len(jobs))]
        for r in results:
            taken = port_busy(r.by_rank().get(0, ""))
            if taken is not None and not r.error:
                r.error = (f"port {taken} on the job's first node was already taken by "
                           "another program: nothing was measured (run it again)")
        logs = self.dir / "jobs"
        logs.mkdir(parents=True, exist_ok=True)
        for r in results:
            (logs / f"{r.job.name}.log").write_text(
                f"$ {r.command}\n# rc={r.returncode} timed_out={r.timed_out} "
                f"seconds={r.seconds:.1f} leftovers={r.leftovers} {r.error}\n{r.output}")
        self.jobs += results
        return results

    # --- stages -----------------------------------------------------------------------
    def pairs(self) -> list[PairOutcome]:
        c = self.ctx
        rounds = clusterplan.pair_rounds(c.nodes, partners=c.cfg.partners)
        out: list[PairOutcome] = []
        for k, pairs in enumerate(rounds, 1):
            if self.stop.is_set():
                break
            self.say(f"pair round {k}/{len(rounds)}: {len(pairs)} pair(s) at once")
            jobs = [self.job("pair", pair, lambda first, port: pair_script(
                first, port, c.exp, c.cfg.max_bytes, c.cfg.gpudirect)) for pair in pairs]
            for pair, res in zip(pairs, self.run_jobs(jobs), strict=True):
                out.append(self._judge_pair(pair, k, res))
        return out

    def _judge_pair(self, pair: tuple[str, str], rnd: int, res: JobResult) -> PairOutcome:
        ranks = res.by_rank()
        reading = read_allreduce(ranks.get(0, ""))
        reading.rails = read_rails(ranks.get(1, ""), self.ctx.exp.devices)
        reading.notes += rail_notes(ranks.get(1, ""))
        ar_ok = (reading.busbw is not None and bool(self.ctx.exp.busbw.check(reading.busbw))
                 and not reading.oob)
        rails_ok = {d: v is not None and bool(self.ctx.exp.rail.check(v))
                    for d, v in reading.rails.items()}
        error = res.error or ("hung past its limit" if res.timed_out else "")
        transport = self.ctx.exp.transport_problem(reading)
        if transport:
            reading.notes.insert(0, transport)
        return PairOutcome(pair, rnd, reading, res.job.name,
                           ar_ok and all(rails_ok.values()) and not error and not transport,
                           rails_ok, error)

    def allreduce(self, nodes: list[str]) -> tuple[Reading, JobResult]:
        c = self.ctx
        job = self.job("all", tuple(nodes), lambda first, port: allreduce_script(
            first, port, c.exp.gpus, c.cfg.max_bytes))
        res = self.run_jobs([job])[0]
        return read_allreduce(res.by_rank().get(0, "")), res

    def collectives(self) -> dict[str, Reading]:
        """The extra collectives the settings ask for, each over all nodes."""
        c = self.ctx
        out: dict[str, Reading] = {}
        for test in c.cfg.collectives:
            self.say(f"{test} over all {len(c.nodes)} nodes")
            job = self.job(test.replace("_", ""), tuple(c.nodes),
                            functools.partial(self._collective_script, test=test))
            res = self.run_jobs([job])[0]
            r = read_allreduce(res.by_rank().get(0, ""))
            if not res.ok and not r.problem:
                r.problem = res.error or f"exit code {res.returncode}"
            out[test] = r
        return out

    def _collective_script(self, first: str, port: int, *, test: str) -> str:
        return allreduce_script(first, port, self.ctx.exp.gpus, self.ctx.cfg.max_bytes, test)

    def scaling(self, fabric: dict[str, dict[str, Any]]) -> tuple[Result, list[str]]:
        """The reference training job over all nodes, judged with every node's own run."""
        c = self.ctx
        per_node = {n: clusterscaling.NodeScaling.of(fabric[n].get("scaling") or {})
                    for n in c.nodes}
        # The job runs the first node's environment and worker on every node: the same
        # stack and the same node code (validate installed it everywhere just before).
        first = per_node[c.nodes[0]]
        rank0, error = "", ""
        problem = first.launch_problem()
        if all(s.tokens_s_n for s in per_node.values()) and not problem:
            self.say(f"training job over all {len(c.nodes)} nodes")
            job = self.job("scaling", tuple(c.nodes), lambda head, port: (
                clusterscaling.job_script(head, port, first, gpus=c.exp.gpus,
                                          nodes=len(c.nodes), steps=c.scaling_steps)))
            res = self.run_jobs([job])[0]
            rank0 = res.by_rank().get(0, "")
            error = res.error or ("hung past its limit" if res.timed_out else
                                  "" if res.ok else f"exit code {res.returncode}")
        else:
            error = "not run: " + (problem or "a node's own training run gave no figures")
        result, named = clusterscaling.judge(per_node, rank0, error, gpus=c.exp.gpus,
                                             limits=c.limits, link_layer=c.exp.link_layer,
                                             simulated=c.simulated)
        if result.verdict != Verdict.PASS:
            result = result.with_(evidence=self._evidence(
                {j.job.name for j in self.jobs if "-scaling-" in j.job.name}))
        return result, named

    def storage(self, fabric: dict[str, dict[str, Any]]) -> tuple[Result, list[str]]:
        """Every node reads the shared file system at once; judged with each node's own. A
        node below its share is measured once more, all nodes at once again."""
        c = self.ctx
        spec = c.shared_fs or {}
        mount = spec["mounts"][0]["path"]
        peer = c.limits["storage.shared_peer_fraction_min"]
        self.say(f"all {len(c.nodes)} nodes reading {mount} at once")
        rates, error, jobs = self._read_at_once(spec, "")
        repeat, again = None, ""
        slow = clusterstorage.laggards(rates, peer) if not error else {}
        if slow and not self.stop.is_set():
            self.say(f"again, all {len(c.nodes)} nodes at once: {', '.join(slow)} below "
                     f"{peer.describe()} of the median")
            repeat, again, more = self._read_at_once(spec, "r")
            jobs |= more
        result, named = clusterstorage.judge(
            {n: fabric[n].get("storage") or {"verdict": "ERROR", "summary": "not run"}
             for n in c.nodes}, rates, error, spec=spec, peer=peer, simulated=c.simulated,
            repeat=repeat, repeat_error=again)
        if result.verdict != Verdict.PASS or repeat is not None:
            result = result.with_(evidence=self._evidence(jobs))
        return result, named

    def _read_at_once(self, spec: dict[str, Any], tag: str
                      ) -> tuple[dict[str, float | None], str, set[str]]:
        """(node -> MB/s, what went wrong, the jobs' names): each node lays out its file,
        then all read at once for aggregate_read_s seconds and remove it."""
        c = self.ctx
        mount = spec["mounts"][0]["path"]
        size = int(spec.get("size_mb") or 1024)
        run = self.dir.name[-6:] + tag
        prep = self.run_jobs([self.job("fsprep", tuple(c.nodes), lambda _h, _p: (
            clusterstorage.script(clusterstorage.PREP, mount, run, size)))])[0]
        rates: dict[str, float | None] = dict.fromkeys(c.nodes)
        error = prep.error or ("" if prep.ok else f"laying out the files: exit code "
                                                  f"{prep.returncode}")
        seconds = int(spec.get("aggregate_read_s") or 10)
        job = self.job("fsread", tuple(c.nodes), lambda _h, _p: (
            clusterstorage.script(clusterstorage.READ, mount, run, size, seconds)))
        res = self.run_jobs([job])[0]  # removes the files, also after a failed prep
        if not error:
            error = res.error or ("hung past its limit" if res.timed_out else "")
            ranks = [self._node_of(e) for e in job.nodes]
            rates = clusterstorage.read_rates(res.by_rank(), ranks)
        return rates, error, {prep.job.name, job.name}

    def _node_of(self, engine_name: str) -> str:
        return next(n for n, e in self.ctx.engine_names.items() if e == engine_name)

    def _collectives_result(self, extra: dict[str, Reading]) -> Result:
        # No public floor exists for these across nodes (a real 2-node B200 all_gather
        # reads 260 GB/s where all-reduce reaches 340): reported, not judged; one that
        # did not run at all is an ERROR.
        failed = {k: r.problem for k, r in extra.items() if r.busbw is None}
        findings = tuple(f"{k}: {r.busbw:.1f} GB/s bus bandwidth at the largest size "
                         "(reported, not judged: no sourced floor)" for k, r in extra.items()
                         if r.busbw is not None) + tuple(f"{k}: {p}" for k, p in failed.items())
        v = Verdict.ERROR if failed else Verdict.PASS
        return Result("cluster.collectives", v, f"{len(extra) - len(failed)}/{len(extra)} "
                      "extra collectives ran over all nodes", findings=findings,
                      simulated=self.ctx.simulated)

    def _group_ok(self, res: JobResult) -> bool:
        r = read_allreduce(res.by_rank().get(0, ""))
        return (res.ok and r.busbw is not None and bool(self.ctx.exp.busbw.check(r.busbw))
                and not r.oob)

    def bisect(self, reference: str | None) -> clusterplan.Bisection:
        c = self.ctx

        def run(groups: list[tuple[str, ...]]) -> list[bool]:
            self.say(f"bisection round: {len(groups)} group(s) of "
                     f"{', '.join(str(len(g)) for g in groups)} node(s)")
            jobs = [self.job("bisect", g, lambda first, port: allreduce_script(
                first, port, c.exp.gpus, c.cfg.max_bytes)) for g in groups]
            return [self._group_ok(r) for r in self.run_jobs(jobs)]
        return clusterplan.bisect(c.nodes, run, reference=reference)

    # --- the whole run --------------------------------------------------------------------
    def run(self, fabric: dict[str, dict[str, Any]]) -> dict[str, Any]:
        c = self.ctx
        t0 = time.monotonic()
        started = time.time()
        before = self.counters() if self.counters else None
        if self.cabling:
            self.say("fabric.cabling: the discovered links against the cable plan")
        cabled = self.cabling() if self.cabling else None
        pairs = self.pairs()
        iso = clusterplan.isolate({p.nodes: p.ok for p in pairs if not p.error})
        rail_culprits = self._rail_culprits(pairs)
        self.say(f"all-reduce over all {len(c.nodes)} nodes")
        reading, whole = self.allreduce(c.nodes)
        whole_ok = self._group_ok(whole)
        bis = None
        if not whole_ok and not self.stop.is_set():
            good = next((n for n in iso.healthy if n not in iso.culprits), None)
            bis = self.bisect(good)
        extra = {} if self.stop.is_set() else self.collectives()
        scaled = (self.scaling(fabric) if c.cfg.scaling and not self.stop.is_set()
                  else None)
        stored = (self.storage(fabric) if c.shared_fs and not self.stop.is_set() else None)
        grew = (clustercounters.growth(before, self.counters())
                if before is not None and self.counters else {})
        results = [self._fabric_result(fabric, grew), self._pairs_result(pairs, iso, rail_culprits),
                   self._allreduce_result(reading, whole, bis)]
        if cabled:
            results.append(cabled)
        if extra:
            results.append(self._collectives_result(extra))
        if scaled:
            results.append(scaled[0])
        if stored:
            results.append(stored[0])
        culprits = sorted({*iso.culprits, *(bis.culprits if bis else []), *grew,
                           *(scaled[1] if scaled else []), *(stored[1] if stored else []),
                           *rail_culprits, *[n for n, f in fabric.items()
                                             if f["verdict"] in ("FAIL", "ERROR")]})
        verdict = worst(r.verdict for r in results)
        return {
            "schema": SCHEMA, "run_id": self.dir.name, "engine": c.cfg.engine,
            # Unix seconds, as a node run records them (the caller may move "started"
            # back to where its own part of the measurement began)
            "started": round(started, 3), "finished": round(time.time(), 3),
            "config": c.cfg.as_dict(), "nodes": c.nodes, "simulated": c.simulated,
            "launch_host": c.launch.host, "expectation": c.exp.as_dict(),
            "fabric": fabric, "pairs": [p.as_dict() for p in pairs],
            "counter_growth": grew,
            "collectives": {k: r.as_dict() for k, r in extra.items()},
            "scaling": scaled[0].as_dict() if scaled else None,
            "shared_fs": stored[0].as_dict() if stored else None,
            "rounds": max((p.round for p in pairs), default=0),
            "isolation": {"culprits": iso.culprits, "suspects": iso.suspects,
                          "healthy": iso.healthy, "rails": rail_culprits},
            "allreduce": {"nodes": c.nodes, "busbw": reading.busbw, "ok": whole_ok,
                          "problem": reading.problem, "job": whole.job.name},
            "bisection": ({"rounds": [[list(g) for g in r] for r in bis.rounds],
                           "culprits": bis.culprits} if bis else None),
            "results": [r.as_dict() for r in results], "verdict": verdict.name,
            "culprits": culprits, "seconds": round(time.monotonic() - t0, 1),
            "jobs": [{"name": j.job.name, "nodes": list(j.job.nodes),
                      "returncode": j.returncode, "timed_out": j.timed_out,
                      "seconds": round(j.seconds, 2), "leftovers": j.leftovers,
                      "error": j.error} for j in self.jobs],
        }

    def _rail_culprits(self, pairs: list[PairOutcome]) -> dict[str, list[str]]:
        """node -> rails whose pairings were all below the rail floor while each partner's
        same rail did well with someone else."""
        out: dict[str, list[str]] = {}
        for dev in self.ctx.exp.devices:
            iso = clusterplan.isolate({p.nodes: p.rails_ok.get(dev, False) for p in pairs
                                       if not p.error and p.reading.rails})
            for node in iso.culprits:
                out.setdefault(node, []).append(dev)
        return out

    def _evidence(self, names: set[str]) -> tuple[Evidence, ...]:
        return tuple(Evidence.of(j.job.name, j.command, j.returncode, j.output, j.seconds)
                     for j in self.jobs if j.job.name in names)

    def _fabric_result(self, fabric: dict[str, dict[str, Any]],
                       grew: dict[str, dict[str, dict[str, int]]]) -> Result:
        bad = {n: f for n, f in fabric.items() if f["verdict"] in ("FAIL", "ERROR")}
        v = worst(Verdict[f["verdict"]] for f in fabric.values()) if fabric else Verdict.ERROR
        findings = tuple(f"{n}: {f['verdict']} {f['summary']}" for n, f in sorted(bad.items()))
        limit = self.ctx.counter_limit
        over = [f"{n} {dev}: {k} +{g} during the cluster's jobs ({limit.check(g).message})"
                for n, devs in sorted(grew.items()) for dev, cs in sorted(devs.items())
                for k, g in sorted(cs.items()) if not limit.check(g)]
        if over:
            findings += tuple(over)
            v = max(v, Verdict.FAIL)
        summary = (f"{len(fabric) - len(bad)}/{len(fabric)} nodes' fabric as ordered"
                   if fabric else "no node's fabric check ran")
        return Result("cluster.fabric", v, summary, findings=findings,
                      simulated=self.ctx.simulated)

    def _pairs_result(self, pairs: list[PairOutcome], iso: clusterplan.Isolation,
                      rails: dict[str, list[str]]) -> Result:
        errors = [p for p in pairs if p.error]
        findings = [f"{n}: every pairing below expectation while its partners passed "
                    "elsewhere" for n in iso.culprits]
        findings += [f"{', '.join(iso.suspects)}: bad pairings the evidence cannot pin on "
                     "one node (pair them with known-good nodes)"] if iso.suspects else []
        findings += [f"{n}: rail(s) {', '.join(d)} below {self.ctx.exp.rail.describe()} in "
                     "every pairing" for n, d in sorted(rails.items())]
        findings += [f"{' + '.join(p.nodes)}: {p.error} ({p.job})" for p in errors]
        bad = [p for p in pairs if not p.ok and not p.error]
        v = (Verdict.FAIL if iso.culprits or iso.suspects or rails or bad else Verdict.PASS)
        if errors:
            v = max(v, Verdict.ERROR)
        busbw = [p.reading.busbw for p in pairs if p.reading.busbw is not None]
        summary = (f"{len(pairs) - len(bad) - len(errors)}/{len(pairs)} pairings meet "
                   f"{self.ctx.exp.busbw.describe()} and every rail "
                   f"{self.ctx.exp.rail.describe()}")
        return Result("cluster.pairs", v, summary, value=min(busbw) if busbw else None,
                      unit="GB/s", thresholds={"busbw": self.ctx.exp.busbw,
                                               "rail": self.ctx.exp.rail},
                      findings=tuple(findings),
                      evidence=self._evidence({p.job for p in pairs if not p.ok}),
                      fault_code="NC-CLUSTER-PAIR" if v != Verdict.PASS else "",
                      simulated=self.ctx.simulated).noted(
            "NCCL/perftest", [f"{' + '.join(p.nodes)}: {n}" for p in pairs
                              for n in p.reading.notes])

    def _allreduce_result(self, reading: Reading, whole: JobResult,
                          bis: clusterplan.Bisection | None) -> Result:
        exp = self.ctx.exp.busbw
        findings: list[str] = []
        if whole.timed_out:
            v, summary = Verdict.ERROR, (f"all-reduce over {len(self.ctx.nodes)} nodes hung "
                                         f"past {self.ctx.cfg.job_timeout_s:g} s")
        elif whole.error or reading.busbw is None:
            v = Verdict.ERROR
            summary = f"all-reduce over all nodes did not run: {whole.error or reading.problem}"
        else:
            out = exp.check(reading.busbw)
            transport = self.ctx.exp.transport_problem(reading)
            v = Verdict.PASS if out and not reading.oob and not transport else Verdict.FAIL
            summary = f"all-reduce over {len(self.ctx.nodes)} nodes: busbw {out.message}"
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
        left = {n: k for j in self.jobs for n, k in j.leftovers.items() if k}
        if left:
            findings.append(f"processes left after cancelled jobs: {left}")
            v = max(v, Verdict.ERROR)
        return Result("cluster.allreduce", v, summary, value=reading.busbw, unit="GB/s",
                      thresholds={"busbw": exp}, findings=tuple(findings),
                      evidence=self._evidence({whole.job.name}) if v != Verdict.PASS else (),
                      simulated=self.ctx.simulated).noted("NCCL", reading.notes)


def new_run_dir(runs_dir: Path) -> Path:
    return RunDir.new(runs_dir, "cluster").make().path


def model_limits(specs: dict[str, HostSpec]) -> dict[str, dict[str, Any]]:
    models = sorted({s.gpu_model for s in specs.values()})
    if len(models) != 1:
        raise InventoryError(f"the cluster mixes GPU models ({', '.join(models)})",
                             hint="validate one model's nodes at a time (--limit)")
    first = next(iter(specs.values()))
    return thresholds.resolve(models[0], inventory=first.validation.get("thresholds"))


def save(run_dir: Path, data: dict[str, Any]) -> None:
    write_json(RunDir(run_dir).cluster_results, data)


__all__ = ["SCHEMA", "ClusterContext", "ClusterRun", "PairOutcome",
           "expectation", "model_limits", "new_run_dir", "save"]
