"""Seeded figures for the emulated fleet: what its nodes measure under load.

Every node of a fleet of one GPU model measures about the same, spread as real fleets
spread (GEMM TFLOPS and copy bandwidth about 0.8% of the median, temperatures about
1.5 C, from one node's cooling position to the next); a few nodes differ on purpose:

* weak: every load figure 5% below the fleet's median -- above every floor (an H200's
  bf16 GEMM floor is 590 TFLOPS against a median of 660), so no check fails it; only
  its peers show it is slow;
* wearing: healthy at its first run, then worse at every run it serves (GEMM 2% lower,
  2 C warmer at rest, more corrected ECC errors): a fault that appears only over
  successive runs, flagged as a trend long before it crosses a floor;
* repaired: passes every check at rest (the reboot cleared the signal) and fails under
  load (the burn-in's results differ from the reference).

Pure and deterministic: (seed, node index, run number) -> the same figures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

FIGURE_KINDS = ("weak", "wearing", "repaired")
SPREAD = 0.008  # relative spread (sigma) of healthy nodes' load figures
TEMP_SPREAD_C = 1.5
WEAK_FACTOR = 0.95
WEAR_PER_RUN = 0.02
# An H200 SXM's figures (medians): bf16 GEMM sustained, PCIe Gen5 x16 copies, soak plateau.
MEDIAN = {"gemm": 660.0, "h2d": 53.0, "d2h": 52.0, "soak_temp": 62.0, "idle_temp": 33.0,
          "sm_mhz": 1980.0, "power_w": 690.0}
FIGURE_CHECKS = ("load.burnin", "fabric.bandwidth", "load.thermal_soak", "health.gpu")


@dataclass(frozen=True)
class NodeFigures:
    index: int
    kind: str  # "ok" or one of FIGURE_KINDS
    seed: int = 0
    gpus: int = 1

    def _rng(self, run: int, what: str) -> random.Random:
        # Run-to-run noise is smaller than node-to-node spread: the node's own offset
        # (seeded by the node alone) plus a little noise per run.
        return random.Random(f"{self.seed}-{self.index}-{run}-{what}")

    def _offset(self, what: str, gpu: int) -> float:
        return random.Random(f"{self.seed}-{self.index}-{gpu}-{what}").gauss(0.0, 1.0)

    def factor(self, run: int) -> float:
        """The node's load figures relative to a healthy node's (1.0)."""
        if self.kind == "weak":
            return WEAK_FACTOR
        if self.kind == "wearing":
            return 1.0 - WEAR_PER_RUN * max(run - 1, 0)
        return 1.0

    def _perf(self, what: str, gpu: int, run: int) -> float:
        noise = self._rng(run, f"{what}{gpu}").gauss(0.0, SPREAD / 4)
        v = MEDIAN[what] * (1 + SPREAD * self._offset(what, gpu) + noise) * self.factor(run)
        return round(v, 1)

    def value(self, check: str, run: int,
              load: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The `value` of the node's result for `check` at its run number `run` (1 first);
        a burn-in echoes the plan's load options (`load`), as a real node does."""
        gpus = [str(g) for g in range(self.gpus)]
        load = load or {}
        if check == "load.burnin":
            return {"tflops_per_gpu": {g: self._perf("gemm", int(g), run) for g in gpus},
                    "dtype": load.get("dtype", "bf16"), "n": load.get("gemm_size", 8192),
                    "seconds": float(load.get("burnin_s", 60)), "load": "emulated"}
        if check == "fabric.bandwidth":
            return {"host_to_device_memcpy_ce": {g: self._perf("h2d", int(g), run) for g in gpus},
                    "device_to_host_memcpy_ce": {g: self._perf("d2h", int(g), run)
                                                 for g in gpus}}
        if check == "load.thermal_soak":
            temp = {g: round(MEDIAN["soak_temp"] + TEMP_SPREAD_C * self._offset("t", int(g)), 1)
                    for g in gpus}
            return {"peak_temp_c": temp, "peak_mem_temp_c": {}, "samples": 60 * len(gpus),
                    "plateau_sm_mhz": {g: self._perf("sm_mhz", int(g), run) for g in gpus},
                    "plateau_power_w": {g: self._perf("power_w", int(g), run) for g in gpus}}
        if check == "health.gpu":
            worn = max(run - 1, 0) if self.kind == "wearing" else 0
            return {"gpus": self.gpus, "ecc_volatile_uncorrectable": 0, "remap_pending": 0,
                    "ecc_corrected_per_gpu": dict.fromkeys(gpus, 3 * worn),
                    "temp_c_per_gpu": {g: round(MEDIAN["idle_temp"] + 2.0 * worn + TEMP_SPREAD_C
                                                * self._offset("idle", int(g)), 1)
                                       for g in gpus}}
        return None

    def result(self, check: str, run: int, base: dict[str, Any],
               load: dict[str, Any] | None = None) -> dict[str, Any]:
        """`base` (the recorded or default result) with this node's figures for `check`."""
        value = self.value(check, run, load)
        if value is None:
            return base
        if check == "health.gpu":
            value = {**(base.get("value") or {}), **value}
        res = dict(base, value=value, unit="TFLOPS" if check == "load.burnin" else
                   base.get("unit", ""))
        if base.get("summary", "").startswith("emulated node: no recording"):
            res["summary"] = "emulated node: seeded figures"
        if self.kind == "repaired" and check == "load.burnin":
            res.update(verdict="FAIL", summary="emulated fault: GPU0 results differ from the "
                       "reference under load (silent data corruption)", fault_code="NC-BURNIN",
                       remediation="An emulated node: no action.")
        return res


__all__ = [
    "FIGURE_CHECKS",
    "FIGURE_KINDS",
    "MEDIAN",
    "SPREAD",
    "TEMP_SPREAD_C",
    "WEAK_FACTOR",
    "NodeFigures",
]
