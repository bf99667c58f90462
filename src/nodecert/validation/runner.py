"""A runner starts each host's node run and feeds its events back; how it reaches the node
is its own (SSH today: session.py). What every runner shares is here: applying the
node's events to the host's record (judged, saved, shown as they come), closing a host
that ended early (what finished is kept, the rest becomes ERROR), the BMC sampled while
the checks run, and the run's heartbeat. A new runner is one module: a `Runner` that
implements `execute(hr)` and registers its name; `nodecert validate` picks it by
`ValidateRequest.runner`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from nodecert.bmc.judge import BMC_CHECKS
from nodecert.bmc.monitor import BmcMonitor
from nodecert.core import checks
from nodecert.core.errors import NodecertError
from nodecert.inventory.reader import Inventory
from nodecert.runs.store import HostLink, HostRun
from nodecert.stack.manifest import Stack
from nodecert.transport.become import BecomeSource
from nodecert.transport.events import BadEvent, decode_event
from nodecert.transport.loadgate import LoadGate
from nodecert.transport.silence import NodeLimit
from nodecert.validation.echoes import held_to_plan
from nodecert.validation.progress import RunProgress
from nodecert_node.contract import Evidence, Verdict, error_result

Progress = Callable[[str], None]
# The next line of a node's event stream (LineReader.line's contract: None at its end).
ReadLine = Callable[[Sequence[NodeLimit], threading.Event], "bytes | None"]
HEARTBEAT_S = 15.0
# How long a node may stay silent between checks (after its hello or a result, before
# the next start); during a check, the check's own limit and 30 s of transit.
EVENT_SILENCE_S = 60.0


class HostUnreachable(Exception):
    """The runner could not reach the host; `reason` says why, in the runner's words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Fetched:
    """What a runner read from a node: a command's output (at most the limit asked), and
    the stack the node's provisioning recorded where it was asked for (None: none known)."""

    raw: bytes
    recorded: Stack | None = None


class Runner:
    """Runs each host's plan on its node and records what the node says."""

    name: ClassVar[str] = ""

    def __init__(self, runs: dict[str, HostRun], links: dict[str, HostLink], say: Progress,
                 stop: threading.Event, *, progress: RunProgress | None = None,
                 gate: LoadGate | None = None, code_sha: str = "") -> None:
        self.runs = runs
        self.links = links  # how each host is reached: session state, never saved
        self.stop = stop
        self.sha = code_sha
        self.progress = progress or RunProgress(runs, say, detail=True)
        self.gate = gate or LoadGate()  # started by the caller for a real run

    @classmethod
    def for_run(cls, inventory: Inventory, runs: dict[str, HostRun],
                links: dict[str, HostLink], say: Progress, stop: threading.Event, *,
                become: BecomeSource | None = None, progress: RunProgress | None = None,
                gate: LoadGate | None = None) -> Runner:
        """The runner for one validation run of `inventory`'s hosts (`runs`): where a
        runner needs more of the inventory than each host's link (a launch host, the
        engine's names), it reads it here, before anything is contacted; InventoryError
        on what it cannot use."""
        return cls(runs, links, say, stop, progress=progress, gate=gate)

    def close(self) -> None:
        """Release what the runner holds for the run (a launch host's connection)."""

    def describe(self, hr: HostRun) -> dict[str, str]:
        """What the host's record says of how its run was started (beside the node's
        own hello): nothing for a direct session."""
        return {}

    def emit(self, hr: HostRun, text: str, *, alarm: bool = False) -> None:
        self.progress.emit(hr, text, alarm=alarm)

    def run_host(self, hr: HostRun) -> None:
        """The host's whole run: its BMC sampled meanwhile; whatever happens, its record
        is finished and saved."""
        hr.started = time.time()
        hr.status = "running"
        hr.save(interim=True)
        monitor = self._bmc_monitor(hr)
        try:
            self.execute(hr)
        except Exception as exc:  # one host's fault never sinks the others
            hr.status = "lost"
            hr.error = f"internal error while handling this host: {type(exc).__name__}: {exc}"
            self._close(hr)
        finally:
            self._bmc_results(hr, monitor)
            hr.finished = time.time()
            hr.save()

    def execute(self, hr: HostRun) -> None:
        """Start hr's plan on its node and apply each event it sends (`_on_event`), then
        `_close(hr)`; a host not reached ends here with its status and reason."""
        raise NotImplementedError

    def fetch(self, hr: HostRun, command: str, *, limit: int, timeout: float,
              recorded_stack: bool = False) -> Fetched:
        """Run `command` as root on hr's node and read its output, at most `limit` bytes,
        within `timeout`: how a run the node made on its own is collected (`revalidate
        --collect`). HostUnreachable when the node cannot be reached; OSError or
        TimeoutError when the reading fails."""
        raise NotImplementedError

    def _bmc_monitor(self, hr: HostRun) -> BmcMonitor | None:
        """The host's BMC, sampled while its checks run (none without nodecert_bmc)."""
        bmc = self.links[hr.host].bmc
        if bmc is None:
            return None
        monitor = BmcMonitor(bmc, host_dir=hr.out_dir, limits=hr.plan.limits(),
                             simulated=hr.simulated, current=lambda: hr.current)
        monitor.start()
        self.emit(hr, f"BMC {bmc.describe()}: sampling every {bmc.sample_s} s")
        return monitor

    def _bmc_results(self, hr: HostRun, monitor: BmcMonitor | None) -> None:
        if monitor is None:
            self._firmware_result(hr, None)
            return
        monitor.simulated = hr.simulated  # known once the node said hello
        try:
            results = monitor.finish()
        except Exception as exc:  # the BMC's fault never sinks the node's results
            results = [error_result(c, f"internal error while reading the BMC: "
                                       f"{type(exc).__name__}: {exc}") for c in BMC_CHECKS]
        hr.results.extend(results)
        for r in results:
            self.emit(hr, f"{r.check} {r.verdict.name}"
                      f"{' (SIMULATED)' if r.simulated else ''} - {r.summary[:110]}",
                      alarm=r.verdict >= Verdict.FAIL)
        self._firmware_result(hr, monitor)

    def _firmware_result(self, hr: HostRun, monitor: BmcMonitor | None) -> None:
        """The checks judged once the run and the BMC's readings are in (the firmware
        recipe, the BIOS profile, where the host names one): what the BMC and the node's
        own checks report, against them."""
        readings = checks.HostReadings(hr.recipe, hr.bios, monitor, list(hr.results))
        for decl in checks.after_bmc():
            try:
                got = decl.after_bmc(readings) if decl.after_bmc else None
            except Exception as exc:  # never sinks the node's results
                got = error_result(decl.id, f"internal error while judging it: "
                                            f"{type(exc).__name__}: {exc}")
            if got is None:
                continue
            res = got.with_(simulated=hr.simulated)
            hr.results.append(res)
            self.emit(hr, f"{res.check} {res.verdict.name}"
                      f"{' (SIMULATED)' if res.simulated else ''} - {res.summary[:110]}",
                      alarm=res.verdict >= Verdict.FAIL)

    def follow(self, hr: HostRun, read: ReadLine, clock: Callable[[], float], *,
               waiting_s: float = 0.0) -> None:
        """Apply each event line `read` gives (LineReader.line's contract) until the
        node's run ends, the node falls silent past its limit or the host's time limit
        (both counted on `clock`), the operator stops the run, or the stream breaks; how
        it ended is in hr.status and hr.error. The runner then `_close`s hr. waiting_s:
        how long the run may wait to start (a job queued for its node), on top of both
        limits."""
        silence = NodeLimit(EVENT_SILENCE_S + waiting_s, clock)
        host_limit = NodeLimit(float(hr.plan.host_timeout_s) + waiting_s, clock)
        try:
            while hr.status == "running":
                raw = read((silence, host_limit), self.stop)
                if raw is None:
                    break
                quiet = self._on_event(hr, decode_event(raw, hr.checks))
                if quiet is not None:
                    silence.reset(quiet)
        except TimeoutError:
            hr.status = "lost"
            what = f"during {hr.current}" if hr.current else "between checks"
            hr.error = (f"host time limit of {hr.plan.host_timeout_s:g} s reached {what}"
                        if host_limit.left() <= 0 else
                        f"no answer from the node {what} within its time limit")
        except InterruptedError:
            hr.status, hr.error = "interrupted", "interrupted by the operator (Ctrl-C)"
        except OSError as exc:
            cause = exc.__cause__ or exc
            hr.status = "lost"
            hr.error = (f"connection lost during {hr.current or 'the run'}: "
                        f"{type(cause).__name__}: {cause}")
        except BadEvent as exc:
            hr.status = "lost"
            hr.error = f"the node sent a bad event during {hr.current or 'the run'}: {exc}"
            hr.bad_output = exc.text

    def _on_event(self, hr: HostRun, ev: dict[str, Any]) -> float | None:
        """Apply one node event; returns how long the node may now stay silent, when
        that changes."""
        kind = ev.get("event")
        total = len(hr.checks)
        if kind == "hello":
            hr.simulated = hr.simulated or bool(ev.get("simulated"))
            hr.node = {k: ev.get(k) for k in ("version", "python", "host")}
            drains = ev.get("slurm_drains")
            if isinstance(drains, dict):  # node text: plain strings, capped
                hr.node["slurm_drains"] = {str(k)[:128]: str(v)[:200]
                                           for k, v in list(drains.items())[:64]}
            job_id = ev.get("slurm_job_id")
            if isinstance(job_id, str) and job_id.isdigit() and len(job_id) <= 20:
                hr.node["slurm_job_id"] = job_id  # the Slurm job the node's run was part of
            hr.node["code_sha256"] = self.sha
            hr.node.update(self.describe(hr))
            self.emit(hr, f"connected: node python {ev.get('python')}"
                      f"{', SIMULATED hardware' if hr.simulated else ''}; {total} checks")
        elif kind == "start":
            hr.current, hr.current_since = str(ev["check"]), time.monotonic()
            limit = hr.plan.timeout_for(hr.current)
            self.emit(hr, f"[{len(hr.results) + 1}/{total}] {hr.current} ...")
            return limit + 30  # the node enforces limit; +30 for transit
        elif kind == "result":
            res = held_to_plan(ev["result"], hr.plan)
            res = checks.judge(res, checks.JudgeContext(hr.host, hr.stack, hr.plan.spec))
            hr.results.append(res)
            hr.current = None
            hr.save(interim=True)
            self.emit(hr, f"[{len(hr.results)}/{total}] {res.check} {res.verdict.name}"
                      f"{' (SIMULATED)' if res.simulated else ''} {res.duration_s:.1f}s"
                      f" - {res.summary[:110]}  | {hr.counts()}, "
                      f"{time.time() - hr.started:.0f}s", alarm=res.verdict >= Verdict.FAIL)
            return EVENT_SILENCE_S
        elif kind == "done":
            hr.status = "interrupted" if ev.get("interrupted") else "done"
            if ev.get("interrupted"):
                hr.error = "the node stopped the run (its input closed)"
        return None

    def _close(self, hr: HostRun) -> None:
        if hr.status == "running":
            hr.status = "lost"
            hr.error = f"connection closed during {hr.current or 'the run'}"
        if hr.status not in ("lost", "interrupted"):
            hr.finish_missing("the node did not report this check", "NC-NOT-REPORTED")
            self.emit(hr, f"finished: {hr.verdict.name} ({hr.counts()}) in "
                      f"{time.time() - hr.started:.0f}s")
            return
        code = "NC-NOT-RUN-INTERRUPTED" if hr.status == "interrupted" else "NC-HOST-LOST"
        done = {r.check for r in hr.results}
        blamed = hr.current or (next((c for c in hr.checks if c not in done), None)
                                if hr.bad_output else None)
        if blamed and hr.status == "lost":
            shown = f"{hr.error}\n--- what the node sent ---\n{hr.bad_output}" \
                if hr.bad_output else hr.error
            hr.results.append(error_result(
                blamed, hr.error, fault_code="NC-HOST-LOST",
                evidence=(Evidence.of("control side", "nodecert validate", None, shown),),
                remediation="Check the node's console/BMC: a node that drops off the network "
                            "or hangs during validation is not ready.")
                .with_(simulated=hr.simulated))
        hr.finish_missing(hr.error, code)
        self.emit(hr, f"{'INTERRUPTED' if hr.status == 'interrupted' else 'ERROR'}: {hr.error}",
                  alarm=True)

    def heartbeat(self, done: threading.Event) -> None:
        """Once a second the run's summary (or live view); every HEARTBEAT_S a line for
        each check still running, into its host's log (and on screen in detail mode)."""
        last = time.monotonic()
        while not done.wait(1.0):
            self.progress.tick()
            if time.monotonic() - last < HEARTBEAT_S:
                continue
            last = time.monotonic()
            for hr in list(self.runs.values()):
                if hr.current and time.monotonic() - hr.current_since > HEARTBEAT_S:
                    self.emit(hr, f"... {hr.current} still running "
                              f"({time.monotonic() - hr.current_since:.0f}s)")



RUNNERS: dict[str, type[Runner]] = {}


def register(cls: type[Runner]) -> type[Runner]:
    """Make a runner known by its name (a class decorator)."""
    if not cls.name or RUNNERS.get(cls.name, cls) is not cls:
        raise RuntimeError(f"runner {cls.name!r}: no name, or declared twice")
    RUNNERS[cls.name] = cls
    return cls


def runner_class(name: str) -> type[Runner]:
    found = RUNNERS.get(name)
    if found is None:
        raise NodecertError(f"no runner named {name!r}",
                            hint=f"known runners: {', '.join(sorted(RUNNERS))}")
    return found


__all__ = ["EVENT_SILENCE_S", "HEARTBEAT_S", "RUNNERS", "Fetched", "HostUnreachable", "Runner",
           "register", "runner_class"]
