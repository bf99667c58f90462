"""Benchmark one controller against an emulated fleet (nodecert.lab.fleet).

Run on demand:   .venv/bin/python benchmarks/fleet.py [--nodes 1000 5000] [--hog N] [--json OUT]

Per size: the emulator serves N nodes over real SSH on loopback (1% slow, 0.5% each
failing, dropped and unreachable, at least one of each), then a fresh controller
process runs `validate` (quick suite, every host at once) against its inventory and
reports: wall time and the slowest emulated node's own time (the sum of its checks'
durations), controller CPU seconds (user + system), peak RSS above the process's RSS
before the run, and costs per node and per node-check. The run is correct when every
node ends as its kind says: ok and slow nodes done, failing nodes FAIL on health.gpu,
dropped nodes lost, unreachable nodes unreachable -- and nothing else.

Targets: wall within 60 s of the slowest node; at most 50 ms controller CPU per
node-check and 2 MB RSS per concurrent node (1,000 nodes); 5,000 without error. The
emulator shares the machine's cores with the controller; its CPU is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nodecert.validation.run import ValidateRequest, validate

EXPECT = {"ok": "done", "slow": "done", "failing": "done", "dropped": "lost",
          "unreachable": "unreachable"}


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def controller(inventory: Path, runs: Path) -> dict[str, Any]:
    """One validate run in this (fresh) process; its figures as a dict."""
    if os.environ.get("FLEET_SWITCH_S"):
        sys.setswitchinterval(float(os.environ["FLEET_SWITCH_S"]))
    base_kb = _status_kb("VmRSS")
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    lines: list[str] = []
    run = validate(ValidateRequest(inventory, runs_dir=runs, detail=False), progress=lines.append)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    node_s = {h: sum(r.duration_s for r in hr.results) for h, hr in run.hosts.items()
              if hr.status == "done"}
    checks = sum(len(hr.checks) for hr in run.hosts.values())
    return {"hosts": len(run.hosts), "checks": checks, "wall_s": round(wall, 2),
            "slowest_node_s": round(max(node_s.values()), 2),
            "cpu_s": round(cpu, 2), "base_rss_mb": round(base_kb / 1024, 1),
            "peak_rss_mb": round(_status_kb("VmHWM") / 1024, 1),
            "status": {h: hr.status for h, hr in run.hosts.items()},
            "errors": {h: hr.error for h, hr in run.hosts.items() if hr.error},
            "verdict": {h: hr.verdict.name for h, hr in run.hosts.items()},
            "failed_checks": {h: sorted(r.check for r in hr.results
                                        if r.verdict.name == "FAIL")
                              for h, hr in run.hosts.items()},
            "controller_late": next((ln for ln in lines if "to its own load" in ln), ""),
            "summary_lines": len(lines), "run_dir": str(run.run_dir)}


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` processes that only spin, at the controller's own priority: other work on
    the same cores (the controller then gets a share of them, not all)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(count)]


def one_size(n: int, time_scale: float, hog: int = 0) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="nodecert-fleet-"))
    faults = max(1, n // 200)
    emu = subprocess.Popen(
        [sys.executable, "-m", "nodecert.lab.fleet", "--nodes", str(n), "--dir", str(work),
         "--slow", str(max(1, n // 100)), "--failing", str(faults), "--dropped", str(faults),
         "--unreachable", str(faults), "--time-scale", str(time_scale)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert emu.stdout is not None
        t = time.monotonic()
        ready = emu.stdout.readline().strip()
        if not ready.startswith("ready"):
            raise RuntimeError(f"the emulator did not start: {ready!r}")
        setup_s = time.monotonic() - t
        emu_cpu0 = _proc_cpu_s(emu.pid)
        hogs = cpu_hogs(hog)
        try:
            out = subprocess.run(
                [sys.executable, __file__, "--controller", str(work / "inventory.ini"),
                 str(work / "runs")], capture_output=True, text=True, timeout=3600,
                check=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        emu_cpu = _proc_cpu_s(emu.pid) - emu_cpu0
    finally:
        if emu.stdin:
            emu.stdin.close()
        emu.wait(timeout=120)
    fig = json.loads(out.stdout)
    kinds = json.loads((work / "kinds.json").read_text())
    wrong = [f"{h}: {kinds[h]} node ended {fig['status'][h]}"
             + (f" ({fig['errors'][h]})" if h in fig["errors"] else "")
             for h in kinds if fig["status"][h] != EXPECT[kinds[h]]]
    wrong += [f"{h}: failed {fig['failed_checks'][h]}" for h in kinds
              if (fig["failed_checks"][h] == ["health.gpu"]) != (kinds[h] == "failing")]
    per_rss = (fig["peak_rss_mb"] - fig["base_rss_mb"]) / n
    return {"nodes": n, "cpu_hogs": hog, "emulator_setup_s": round(setup_s, 1),
            "wall_s": fig["wall_s"],
            "slowest_node_s": fig["slowest_node_s"],
            "wall_minus_slowest_s": round(fig["wall_s"] - fig["slowest_node_s"], 2),
            "controller_cpu_s": fig["cpu_s"],
            "cpu_ms_per_node": round(1000 * fig["cpu_s"] / n, 1),
            "cpu_ms_per_node_check": round(1000 * fig["cpu_s"] / fig["checks"], 2),
            "peak_rss_mb": fig["peak_rss_mb"], "base_rss_mb": fig["base_rss_mb"],
            "rss_mb_per_node": round(per_rss, 3), "emulator_cpu_s": round(emu_cpu, 1),
            "kinds": {k: list(kinds.values()).count(k) for k in EXPECT},
            "wrong": wrong[:20], "wrong_count": len(wrong),
            "controller_late": fig["controller_late"],
            "summary_lines": fig["summary_lines"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--hog", type=int, default=0, metavar="N",
                    help="run N busy processes beside the controller (a starved machine)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--controller", nargs=2, type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.controller:
        print(json.dumps(controller(*a.controller)))
        return
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "kernel": platform.release(),
                           "mem_gb": round(os.sysconf("SC_PAGE_SIZE")
                                           * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
               "sizes": []}
    for n in a.nodes:
        res = one_size(n, a.time_scale, a.hog)
        print(json.dumps(res), flush=True)
        results["sizes"].append(res)  # type: ignore[attr-defined]
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
