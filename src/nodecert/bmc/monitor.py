"""The BMC beside a node's run: sampled while the node's checks run (power and
temperatures, so the burn-in's draw is seen by the BMC too), read in full when they end,
and judged into the bmc.* Results of the host.

A BMC that cannot be read makes every bmc.* check ERROR with the reason (unreachable,
credentials refused, certificate not trusted); the node's own checks are not affected.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodecert.bmc.gather import BmcSource, source_for
from nodecert.bmc.judge import (
    BMC_CHECKS,
    event_rules,
    judge_inventory,
    judge_power,
    judge_sel,
    judge_sensors,
)
from nodecert.bmc.redfish import BmcError
from nodecert.core.errors import NodecertError
from nodecert.inventory.bmc import BmcSpec
from nodecert.runs.layout import RESULTS, RunDirError
from nodecert.runs.records import host_history, read_host_record
from nodecert_node.contract import Limits, Result, Verdict, error_result

# Checks during which the node draws its full power: the burn-in, the soak, the
# training job, DCGM's stress levels.
LOAD_PREFIXES = ("load.", "dcgm.")


def last_certified(runs_dir: Path, host: str) -> tuple[float, str] | None:
    """When the host was last certified from this runs directory: the end of the run
    whose report holds its certificate, with the run's id."""
    best: tuple[float, str] | None = None
    for rec in host_history(runs_dir, host):
        when = rec.finished
        if when and rec.run.certificate(host).is_file() and (best is None or when > best[0]):
            best = (when, rec.run.run_id)
    return best


class BmcMonitor:
    def __init__(self, spec: BmcSpec, *, host_dir: Path, limits: Limits, simulated: bool,
                 current: Callable[[], str | None],
                 source: BmcSource | None = None) -> None:
        self.spec = spec
        self.host_dir = host_dir
        self.limits = limits
        self.simulated = simulated
        self.current = current
        self.source = source or source_for(spec)
        self.samples: list[dict[str, Any]] = []
        self.sample_errors: list[str] = []
        # What the full read found of the firmware inventory (firmware.recipe reads it).
        self.firmware_inventory: list[dict[str, Any]] | None = None
        self.firmware_error = "the BMC was not read"
        self.bios: dict[str, Any] | None = None  # bmc.bios reads it
        self.bios_error = "the BMC was not read"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"bmc-{self.spec.host}",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            check = self.current()
            try:
                s = self.source.sample()
                s["check"] = check
                self.samples.append(s)
            except (BmcError, OSError, ValueError) as exc:
                self.sample_errors.append(f"{time.strftime('%H:%M:%S')} {exc}"[:300])
            self._stop.wait(self.spec.sample_s)

    def finish(self) -> list[Result]:
        """Stop sampling, read the BMC in full and judge; never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.spec.timeout_s * 4 + 5)
        t0 = time.monotonic()
        try:
            snap = self.source.snapshot()
        except (BmcError, NodecertError, OSError, ValueError) as exc:
            what = exc.what if isinstance(exc, NodecertError) else str(exc)
            hint = exc.hint if isinstance(exc, NodecertError) else None
            self.firmware_error = self.bios_error = f"BMC not read: {what}"
            fix = (f"{hint[0].upper()}{hint[1:]}; then" if hint else
                   "Check the BMC's network, its credentials and its certificate, then")
            return [error_result(c, f"BMC not read: {what}", fault_code="NC-BMC-UNREACHABLE",
                                 evidence=tuple(self.source.evidence[-4:]),
                                 remediation=f"{fix} re-run `nodecert validate`.")
                    .with_(simulated=self.simulated) for c in BMC_CHECKS]
        finally:
            self.source.close()
        took = time.monotonic() - t0
        self.firmware_inventory = snap.get("firmware_inventory")
        self.firmware_error = str(snap.get("firmware_error") or "")
        self.bios, self.bios_error = snap.get("bios"), str(snap.get("bios_error") or "")
        ev = {e.name: e for e in self.source.evidence}

        def pick(*names: str) -> tuple[Any, ...]:
            return tuple(ev[n] for n in names if n in ev)

        since = last_certified(self.host_dir.parent.parent, self.spec.host)
        loaded = sorted({str(s["check"]) for s in self.samples
                         if str(s.get("check") or "").startswith(LOAD_PREFIXES)})
        os_gpus, os_nics = self._os_view()
        results = [
            judge_sensors(snap["sensors"], evidence=pick(
                "thermal", "ipmitool sensor", "ipmitool sdr elist", "ipmitool chassis status"),
                          simulated=self.simulated, discrete=snap.get("discrete"),
                          chassis=snap.get("chassis"), rules=event_rules()),
            judge_sel(snap["sel"], since=since[0] if since else None,
                      since_what=f"the last certification (run {since[1]})" if since else "",
                      rules=event_rules(), evidence=pick("sel", "ipmitool sel elist"),
                      simulated=self.simulated),
            judge_power(snap["power"], self.samples, spares=self.spec.psu_spares,
                        limits=self.limits, loaded_checks=loaded,
                        evidence=pick("power", "ipmitool sdr type Power Supply"),
                        simulated=self.simulated),
            judge_inventory(snap["firmware"], self.spec.firmware, bmc_gpus=snap["gpus"],
                            os_gpus=os_gpus, bmc_nics=snap["nics"], os_nics=os_nics,
                            evidence=pick("manager", "ipmitool mc info"),
                            simulated=self.simulated),
        ]
        bmc = {**self.spec.public(), "sample_errors": self.sample_errors[-20:]}
        if snap.get("session"):
            bmc["session"] = snap["session"]  # how it was read (IPMI: the cipher suite)
        return [r.with_(duration_s=took, facts={**r.facts, "bmc": bmc}) for r in results]

    def _os_view(self) -> tuple[list[dict[str, Any]] | None, int | None]:
        """The GPUs (with serials) and RDMA ports the node's own checks saw."""
        try:
            record = read_host_record(self.host_dir / RESULTS)
        except RunDirError:
            return None, None
        gpus = nics = None
        for r in record.results:
            if r.check == "hardware.inventory" and r.verdict is not Verdict.ERROR:
                ident = r.facts.get("identity") or {}
                gpus = list(ident.get("gpus") or []) or None
            if r.check in ("net.ib", "net.roce") and isinstance(r.value, dict):
                ports = r.value.get("ports")
                if isinstance(ports, list) and ports:
                    nics = len(ports)
        return gpus, nics


__all__ = ["BmcMonitor", "last_certified"]
