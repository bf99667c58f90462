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
the stages' results are built in results.py, what each stage's figures mean lives in judge.py,
scaling.py and storage.py, and what a run is given in context.py.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from nodecert.cluster import counters as clustercounters
from nodecert.cluster import pairing as clusterplan
from nodecert.cluster import scaling as clusterscaling
from nodecert.cluster import storage as clusterstorage
from nodecert.cluster.cabling import with_link_errors
from nodecert.cluster.context import ClusterContext, PairOutcome
from nodecert.cluster.judge import (
    Reading,
    allreduce_script,
    expectation,
    pair_script,
    port_busy,
    rail_notes,
    read_allreduce,
    read_rails,
)
from nodecert.cluster.results import (
    allreduce_result,
    fabric_result,
    job_evidence,
    pairs_result,
    rail_culprits,
)
from nodecert.core.errors import InventoryError
from nodecert.inventory.cluster import PORT_BLOCK
from nodecert.inventory.reader import HostSpec
from nodecert.profiles import thresholds
from nodecert.runs.layout import RunDir
from nodecert.runs.store import write_json
from nodecert.transport.engines import launcher
from nodecert.transport.jobs import Job, JobResult, Launcher
from nodecert_node.contract import Result, Verdict, worst

Progress = Callable[[str], None]
SCHEMA = "nodecert.cluster-run/v1"


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
        reading = read_allreduce(ranks.get(0, ""), ranks.values())
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
                           ar_ok and all(rails_ok.values()) and not error and not transport
                           and not reading.port_failures, rails_ok, error)

    def allreduce(self, nodes: list[str]) -> tuple[Reading, JobResult]:
        c = self.ctx
        job = self.job("all", tuple(nodes), lambda first, port: allreduce_script(
            first, port, c.exp.gpus, c.cfg.max_bytes))
        res = self.run_jobs([job])[0]
        ranks = res.by_rank()
        return read_allreduce(ranks.get(0, ""), ranks.values()), res

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
            result = result.with_(evidence=job_evidence(self.jobs,
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
            result = result.with_(evidence=job_evidence(self.jobs, jobs))
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
        ranks = res.by_rank()
        r = read_allreduce(ranks.get(0, ""), ranks.values())
        return (res.ok and r.busbw is not None and bool(self.ctx.exp.busbw.check(r.busbw))
                and not r.oob and not r.port_failures)

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
        rails = rail_culprits(self.ctx, pairs)
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
        results = [fabric_result(self.ctx, fabric, grew),
                   pairs_result(self.ctx, self.jobs, pairs, iso, rails),
                   allreduce_result(self.ctx, self.jobs, reading, whole, bis)]
        if cabled:
            results.append(with_link_errors(cabled, grew))
        if extra:
            results.append(self._collectives_result(extra))
        if scaled:
            results.append(scaled[0])
        if stored:
            results.append(stored[0])
        # a node with a link not where (or not as) the plan says is a culprit too
        miscabled = {str(x["node"]) for x in (cabled.facts.get("links") or [] if cabled
                                              else []) if x.get("status") != "ok"}
        culprits = sorted({*iso.culprits, *(bis.culprits if bis else []), *grew, *miscabled,
                           *(scaled[1] if scaled else []), *(stored[1] if stored else []),
                           *rails, *[n for n, f in fabric.items()
                                             if f["verdict"] in ("FAIL", "ERROR")]})
        return self._record(
            started=started, seconds=time.monotonic() - t0, fabric=fabric, pairs=pairs,
            grew=grew, extra=extra, scaled=scaled[0] if scaled else None,
            stored=stored[0] if stored else None, iso=iso, rails=rails, reading=reading,
            whole_ok=whole_ok, whole=whole, bis=bis, results=results, culprits=culprits)

    def _record(self, *, started: float, seconds: float, fabric: dict[str, dict[str, Any]],
                pairs: list[PairOutcome], grew: dict[str, Any], extra: dict[str, Any],
                scaled: Result | None, stored: Result | None,
                iso: clusterplan.Isolation, rails: dict[str, list[str]], reading: Any,
                whole_ok: bool, whole: JobResult, bis: clusterplan.Bisection | None,
                results: list[Result], culprits: list[str]) -> dict[str, Any]:
        """The cluster run's record (results.json), as written."""
        c = self.ctx
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
            "scaling": scaled.as_dict() if scaled else None,
            "shared_fs": stored.as_dict() if stored else None,
            "rounds": max((p.round for p in pairs), default=0),
            "isolation": {"culprits": iso.culprits, "suspects": iso.suspects,
                          "healthy": iso.healthy, "rails": rails},
            "allreduce": {"nodes": c.nodes, "busbw": reading.busbw, "ok": whole_ok,
                          "problem": reading.problem, "job": whole.job.name},
            "bisection": ({"rounds": [[list(g) for g in r] for r in bis.rounds],
                           "culprits": bis.culprits} if bis else None),
            "results": [r.as_dict() for r in results], "verdict": verdict.name,
            "culprits": culprits, "seconds": round(seconds, 1),
            "jobs": [{"name": j.job.name, "nodes": list(j.job.nodes),
                      "returncode": j.returncode, "timed_out": j.timed_out,
                      "seconds": round(j.seconds, 2), "leftovers": j.leftovers,
                      "error": j.error} for j in self.jobs],
        }

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


__all__ = ["SCHEMA", "ClusterRun", "expectation", "model_limits", "new_run_dir", "save"]
