"""Back-pressure from the controller's own load: admit new SSH connections only while
the controller keeps up, and never blame a host for the controller's own slowness.

A thread that sleeps 0.25 s at a time measures how late it wakes: its lateness is the
time any thread of this process waits for the interpreter (the GIL) or the CPU. Past
OVERLOAD_LAG_S the controller is saturated: connection handshakes (which must finish
within their time limits) wait until it has caught up, and a handshake that failed
while the controller was late is tried again, since the time limit it ran out of was
spent waiting here, not on the host.

The same measure gives the node's clock (`clock()`): monotonic time less everything the
controller lost to its own lateness. A limit on how long a node may stay silent is
counted on it, so a controller starved by other work on its machine takes longer to
call a dead node silent (slower is fine) but never calls a healthy node silent because
it was itself too late to read what the node had sent (wrong is not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

TICK_S = 0.25
# nodecert policy: two seconds late means handshakes in flight are being starved and
# SSH's own limits (15 s) come within reach for reasons not the host's. Lower, the gate
# throttles a healthy controller (measured on 1,000 emulated nodes: at 0.25 s a host
# waited 37 s for its connection at the median; at 2 s the run ended 42 s after its
# slowest node instead of 72 s, with no host failed).
OVERLOAD_LAG_S = 2.0
ADMIT_WAIT_MAX_S = 120.0  # past this, admit anyway (a controller that never catches up)


class LoadGate:
    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.lag_s = 0.0
        self.worst: list[tuple[float, float]] = []  # (time, lag) of recent overloads
        self.late_s = 0.0  # all the lateness measured so far (the node clock's lag)
        self.worst_lag_s = 0.0
        self._last_wake: float | None = None  # None: not watching, the clock is plain
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.overload_seen = threading.Event()  # set at the first overload of the run
        self._thread = threading.Thread(target=self._watch, name="loadgate", daemon=True)

    def start(self) -> LoadGate:
        self._last_wake = self.now()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        with self._lock:
            self._last_wake = None  # nobody measures any more: plain time from here

    def _watch(self) -> None:
        while True:
            t = self.now()
            if self._done.wait(TICK_S):
                return
            self.record_wake(t, self.now())

    def record_wake(self, slept_at: float, woke_at: float) -> None:
        """The watcher slept at `slept_at` for TICK_S and woke at `woke_at`."""
        lag = max(0.0, woke_at - slept_at - TICK_S)
        with self._lock:
            if self._done.is_set():
                return
            self.lag_s = lag
            self.late_s += lag
            self.worst_lag_s = max(self.worst_lag_s, lag)
            self._last_wake = woke_at
            if lag > OVERLOAD_LAG_S:
                self.worst = [w for w in self.worst if woke_at - w[0] < 600] + [(woke_at, lag)]
                self.overload_seen.set()

    def clock(self) -> float:
        """The node's clock: monotonic seconds less the controller's own lateness, both
        what the watcher measured and, while its wake-up is overdue, the time since it
        was due (the controller is late right now). It never runs backwards, and it
        advances at least TICK_S on every wake-up of the watcher, so a silent node is
        still found silent however loaded the controller. Plain monotonic time when the
        gate is not watching."""
        now = self.now()
        with self._lock:
            if self._last_wake is None:
                return now
            overdue = max(0.0, now - self._last_wake - TICK_S)
            return now - self.late_s - overdue

    def late_since(self, mark: tuple[float, float]) -> float:
        """Seconds the controller lost to its own lateness since `mark()`."""
        wall, node = mark
        return max(0.0, (self.now() - wall) - (self.clock() - node))

    def mark(self) -> tuple[float, float]:
        """(monotonic time, node clock) now: the start of something `late_since` measures."""
        return self.now(), self.clock()

    def overloaded(self) -> bool:
        return self.lag_s > OVERLOAD_LAG_S

    def overloaded_since(self, t0: float) -> bool:
        """Was the controller saturated at any time since monotonic time t0?"""
        with self._lock:
            return self.lag_s > OVERLOAD_LAG_S or any(t >= t0 for t, _ in self.worst)

    def admit(self, stop: threading.Event) -> None:
        """Wait (bounded) until the controller keeps up again."""
        end = self.now() + ADMIT_WAIT_MAX_S
        while self.overloaded() and self.now() < end and not stop.is_set():
            stop.wait(TICK_S)


__all__ = ["OVERLOAD_LAG_S", "LoadGate"]
