"""How long Ctrl-C of `cluster validate` takes to end its running jobs, on a loaded
controller: the launcher's interrupt (the engine's cancel and every job's sweep), the
jobs' threads returning, and the final settle, with the SSH round trips emulated at a
fixed latency and the controller's CPUs kept busy by spinning processes.

Run on demand:   .venv/bin/python benchmarks/ctrl_c.py [--pairs 8] [--latency 1.0]
                 [--load 2] [--json OUT]

Two strategies are timed on the same emulated launch host: `now` (nodecert's: the cancel
and every sweep at once, each sweep over its nodes at once, the jobs' threads not cleaning
up again) and `serial` (the earlier one: sweeps, then the cancel, then every job's thread
cancelling and sweeping its own job, node after node). Nothing leaves this machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchlib import report

from nodecert.inventory.cluster import ClusterConfig
from nodecert.transport.engines import SlurmLauncher
from nodecert.transport.jobs import Job
from nodecert.transport.ssh import Endpoint


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


class Emulated(SlurmLauncher):
    """The launch host and the nodes as fixed-latency round trips: a job runs until the
    run is interrupted; every other command and every node's sweep costs `latency`."""

    def __init__(self, latency: float, serial: bool) -> None:
        super().__init__(ClusterConfig(engine="slurm", partition="gpu"),
                         Endpoint("h1", "127.0.0.1", 22, "root", None, (), "python3"))
        self.latency, self.serial = latency, serial
        self.started = threading.Semaphore(0)

    def remote(self, command: str, timeout: float,
               always: bool = False) -> tuple[int | None, str, bool]:
        if "srun" in command:
            self.started.release()
            self.cancelled.wait(60)
            return None, "", True
        time.sleep(self.latency)
        return 0, "", False

    def sweep(self, job: Job) -> dict[str, int]:
        targets = [*job.nodes, self.launch_name]
        if self.serial:
            for _ in targets:
                time.sleep(self.latency)
        else:
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                list(pool.map(lambda _: time.sleep(self.latency), targets))
        return dict.fromkeys(job.nodes, 0)

    def interrupt(self) -> None:
        if not self.serial:
            super().interrupt()
            return
        with self._admit:  # the earlier strategy: sweeps, then the cancel, one after
            self.cancelled.set()
            running = list(self._running.values())
        self._interrupted += running
        with ThreadPoolExecutor(max_workers=min(16, len(running) or 1)) as pool:
            list(pool.map(self.sweep, running))
        self.cancel(*running)

    def run(self, job: Job) -> Any:
        res = super().run(job)
        if self.serial:  # the earlier threads cleaned up their own job again
            self.cancel(job)
            self.sweep(job)
        return res


def measure(pairs: int, latency: float, serial: bool) -> float:
    launcher = Emulated(latency, serial)
    jobs = [Job(f"nodecert-bench-pair-{k}", (f"h{2 * k + 1}", f"h{2 * k + 2}"), "true", {},
                300) for k in range(pairs)]
    with ThreadPoolExecutor(max_workers=pairs) as pool:
        futures = [pool.submit(launcher.run, j) for j in jobs]
        for _ in jobs:
            launcher.started.acquire()
        t0 = time.monotonic()
        launcher.interrupt()
        for f in futures:
            f.result()
    launcher.settle()
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--latency", type=float, default=1.0, help="seconds per round trip")
    ap.add_argument("--load", type=int, default=2, help="spinning processes per CPU")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
                for _ in range(args.load * (os.cpu_count() or 1))]
    out: dict[str, Any] = {"pairs": args.pairs, "latency_s": args.latency,
                           "spinners": len(spinners), "cpus": os.cpu_count()}
    try:
        out["idle"] = {s: round(measure(args.pairs, args.latency, s == "serial"), 2)
                       for s in ("now", "serial")}
        for p in spinners:
            p.start()
        out["loaded"] = {s: round(measure(args.pairs, args.latency, s == "serial"), 2)
                         for s in ("now", "serial")}
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=10)
    report(out, args.json)


if __name__ == "__main__":
    main()
