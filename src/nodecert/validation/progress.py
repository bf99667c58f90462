"""A run's progress, readable at one host or a thousand.

Every line about a host goes to that host's own log in the run directory
(<run>/<host>/progress.log). What reaches the operator depends on the run's size:
with few hosts, every line (as it happens); with many, only what needs a human as it
happens -- a check that FAILs or ERRORs, a host that is lost or unreachable -- and one
summary line with the counts now and then (or a live view on a terminal, fed with the
same counts).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from nodecert.core.textsafe import one_line
from nodecert.core.verdict import Verdict
from nodecert.runs.store import HostRun

Say = Callable[[str], None]
# Up to this many hosts a run prints every line; above it, the summary (nodecert policy:
# 16 hosts' interleaved lines still fit a screen's worth of scrolling per check).
DETAIL_MAX_HOSTS = 16
SUMMARY_EVERY_S = 10.0
STATES = ("pending", "connecting", "running", "finished")


@dataclass(frozen=True)
class Snapshot:
    """Where a run stands: hosts by state, finished hosts by verdict, results by verdict."""
    total: int
    states: dict[str, int]
    hosts: dict[str, int]  # finished hosts by verdict
    results: dict[str, int]  # every result so far by verdict
    elapsed_s: float
    failures: tuple[str, ...] = field(default=())  # the latest alarms, newest last

    def line(self) -> str:
        s = self.states
        done = " ".join(f"{n} {v}" for v, n in self.hosts.items() if n)
        checks = " ".join(f"{n} {v}" for v, n in self.results.items() if n)
        return (f"hosts {s.get('finished', 0)}/{self.total} finished"
                f"{f' ({done})' if done else ''}, {s.get('running', 0)} running, "
                f"{s.get('connecting', 0)} connecting, {s.get('pending', 0)} waiting"
                f" | checks: {checks or 'none yet'} | {self.elapsed_s:.0f}s")


class RunProgress:
    def __init__(self, runs: dict[str, HostRun], say: Say, *, detail: bool,
                 status: Callable[[Snapshot], None] | None = None) -> None:
        self.runs = runs
        self.say = say
        self.detail = detail
        self.status = status
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.connecting: set[str] = set()
        self.alarms: list[str] = []
        self.last_summary = 0.0
        self.final: dict[str, tuple[str, Counter[str]]] = {}  # finished hosts, counted once

    def emit(self, hr: HostRun, text: str, *, alarm: bool = False) -> None:
        """One line about a host: to its log; to the operator in detail mode, or when it
        is an alarm (a FAIL/ERROR, a lost host)."""
        line = one_line(f"{hr.host:<14} {text}")
        try:
            hr.out_dir.mkdir(parents=True, exist_ok=True)
            with (hr.out_dir / "progress.log").open("a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {one_line(text)}\n")
        except OSError:
            pass  # the results file is the record; a log that cannot grow is not fatal
        with self.lock:
            if alarm:
                self.alarms = [*self.alarms[-9:], line]
            if self.detail or alarm:
                self.say(line)

    def connect_started(self, host: str) -> None:
        with self.lock:
            self.connecting.add(host)

    def connect_done(self, host: str) -> None:
        with self.lock:
            self.connecting.discard(host)

    def snapshot(self) -> Snapshot:
        states: Counter[str] = Counter()
        hosts: Counter[str] = Counter()
        results: Counter[str] = Counter()
        with self.lock:
            connecting = set(self.connecting)
            alarms = tuple(self.alarms)
        for name, hr in list(self.runs.items()):
            done = self.final.get(name)
            if done is None and hr.status not in ("pending", "running") and hr.finished:
                done = self.final[name] = (hr.verdict.name, Counter(
                    r.verdict.name for r in list(hr.results)))
            if done is not None:
                states["finished"] += 1
                hosts[done[0]] += 1
                results.update(done[1])
                continue
            if hr.status == "pending":
                states["pending"] += 1
            else:  # running, or finishing (its last results being written)
                states["connecting" if name in connecting else "running"] += 1
            for r in list(hr.results):
                results[r.verdict.name] += 1
        order = [v.name for v in Verdict]
        return Snapshot(len(self.runs), dict(states),
                        {v: hosts[v] for v in order if hosts[v]},
                        {v: results[v] for v in order if results[v]},
                        time.monotonic() - self.started, alarms)

    def tick(self, *, final: bool = False) -> None:
        """Called about once a second: the live view's feed; the summary line every
        SUMMARY_EVERY_S (and at the end) when the run is not printed in detail."""
        if self.status is not None:
            self.status(self.snapshot())
            return
        now = time.monotonic()
        if self.detail or (not final and now - self.last_summary < SUMMARY_EVERY_S):
            return
        self.last_summary = now
        line = self.snapshot().line()  # takes the lock itself
        with self.lock:
            self.say(line)


__all__ = ["DETAIL_MAX_HOSTS", "RunProgress", "Snapshot"]
