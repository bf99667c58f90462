"""fabric.nccl_allreduce and fabric.bandwidth: the GPU fabric under load."""

from __future__ import annotations

import os
import statistics
from typing import Any

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings, within
from nodecert_node.contract import Evidence, Limits, Result, Verdict
from nodecert_node.framework import WORKERS, NoFramework, framework_python
from nodecert_node.parse import bench
from nodecert_node.parse.events import events
from nodecert_node.registry import check
from nodecert_node.tools import Output, ToolError, run, which


def torch_fallback(ctx: Ctx, tool: str, argv: list[str], timeout: float
                   ) -> tuple[list[dict[str, Any]], Evidence]:
    """Run the collective worker in the stack's PyTorch because `tool` is not installed.
    Raises ToolError(kind=missing) when neither is there."""
    try:
        py = framework_python(ctx)
    except NoFramework as exc:
        raise ToolError(f"{tool} is not installed and there is no PyTorch to measure with "
                        f"instead ({exc})", kind="missing") from exc
    out: Output = run([py, os.path.join(WORKERS, "collective.py"), *argv], timeout=timeout,
                      name=f"torch fallback for {tool}", ok_codes=(0, 2, 3))
    return events(out.text), out.evidence


def nccl_from_events(evs: list[dict[str, Any]]) -> dict[str, Any]:
    """The torch.distributed all-reduce's events in parse_nccl's shape."""
    start = next((e for e in evs if e["event"] == "start"), {})
    rows = [{"size": int(e["size"]), "type": "float", "redop": "sum",
             "time_us": float(e["time_us"]), "algbw": float(e["algbw"]),
             "busbw": float(e["busbw"]), "wrong": int(e["wrong"]),
             "ip_busbw": float(e["busbw"]), "ip_wrong": 0} for e in evs if e["event"] == "row"]
    failures = [str(e.get("message")) for e in evs if e["event"] == "error"]
    if not any(e["event"] == "done" for e in evs) and not failures:
        failures.append("the all-reduce did not finish")
    return {"rows": rows, "oob": None, "oob_ok": None, "avg_busbw": None,
            "nccl_version": start.get("nccl") or None, "ranks": int(start.get("ranks") or 0),
            "validation": 1, "failures": failures}


def nvbandwidth_from_events(evs: list[dict[str, Any]]) -> dict[str, Any]:
    """The torch copy test's events in parse_nvbandwidth's shape."""
    tests: dict[str, Any] = {}
    names = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce",
             "d2d": "device_to_device_memcpy_read_ce"}
    for e in evs:
        name = names.get(e["event"])
        if name is None:
            continue
        t = tests.setdefault(name, {"matrix": {}, "sum": None})
        if e["event"] == "d2d":
            t["matrix"].setdefault(int(e["dst"]), {})[int(e["src"])] = float(e["gbs"])
        else:
            t["matrix"].setdefault(0, {})[int(e["gpu"])] = float(e["gbs"])
    return {"version": "torch copy test", "tests": tests}

# --- fabric.nccl_allreduce --------------------------------------------------------------


def judge_nccl(parsed: dict[str, Any], gpus: int, limits: Limits) -> Result:
    name = "fabric.nccl_allreduce"
    fails: list[str] = []
    warns: list[str] = []
    if gpus == 1 and not parsed["failures"] and not any(r["wrong"] for r in parsed["rows"]):
        # One GPU has nothing to all-reduce with (busbw is 0 by definition): the
        # multi-GPU floor does not apply. Seen on a real single-H200 machine.
        return Result(name, Verdict.WARN, "one GPU: no intra-node all-reduce to measure "
                      "(bus bandwidth is 0 by definition)", value={
                          "busbw_gbs": None, "nccl": parsed["nccl_version"]},
                      findings=("one GPU: the all-reduce floor applies to multi-GPU nodes",))
    if parsed["failures"]:
        fails.append(f"all_reduce_perf failed: {parsed['failures'][0]}")
    rows = parsed["rows"]
    if not rows and not fails:
        fails.append("all_reduce_perf printed no results")
    if parsed["ranks"] and parsed["ranks"] < gpus:
        fails.append(f"all-reduce ran on {parsed['ranks']} of the node's {gpus} GPUs")
    for r in rows:
        for side, wrong in (("out-of-place", r["wrong"]), ("in-place", r["ip_wrong"])):
            if wrong:
                fails.append(f"{wrong} wrong values at {r['size']} B ({side}): the collective "
                             "returned corrupted data")
    if parsed["oob_ok"] is False:
        fails.append(f"{parsed['oob']} out-of-bounds values reported by nccl-tests")
    if parsed["validation"] == 0:
        warns.append("nccl-tests ran without data validation (-c 0)")
    busbw = rows[-1]["busbw"] if rows else None
    size = rows[-1]["size"] if rows else None
    if busbw is not None and within(limits, "fabric.allreduce_busbw_gbs_min", busbw,
                                    f"bus bandwidth at {size} B", fails) is None:
        warns.append(f"no bus-bandwidth reference for this model; measured {busbw:g} GB/s")
    res = judge_findings(
        name, fails, warns, f"all-reduce over {parsed['ranks'] or gpus} GPUs: busbw {busbw:g} "
        f"GB/s at {size} B, 0 wrong values" if busbw is not None else "no result",
        value={"busbw_gbs": busbw, "size_bytes": size, "nccl": parsed["nccl_version"],
               "curve": [{"size": r["size"], "busbw": r["busbw"]} for r in rows]},
        unit="GB/s", thresholds=limits.pick("fabric.allreduce_busbw_gbs_min"),
        fault_code="NC-NCCL" if fails else "",
        remediation="Check NVLink/NVSwitch (hardware.topology), Fabric Manager and "
                    "`dmesg | grep NVRM`; wrong values mean a GPU or link corrupts data: RMA."
                    if fails else "")
    return res.noted("NCCL", parsed.get("notes") or ())


@check("fabric.nccl_allreduce", order=50, suites=("standard", "full", "lab"),
       tools=("all_reduce_perf",),
       description="NCCL all-reduce bus bandwidth over all GPUs, with every value checked")
def nccl_allreduce(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    opts = ctx.options.get("fabric") or {}
    timeout = float(opts.get("timeout_s", 300))
    if which("all_reduce_perf") is None:
        # nccl-tests is not installed: the same measurement in the stack's PyTorch.
        evs, wev = torch_fallback(ctx, "all_reduce_perf", [
            "allreduce", "--max-bytes", str(opts.get("nccl_max_size", "8G")),
            "--iters", str(opts.get("nccl_iters", 20))], timeout)
        res = judge_nccl(nccl_from_events(evs), len(gpus), ctx.limits)
        return res.with_(evidence=(*ev, wev), value={**res.value, "tool": "torch.distributed"})
    argv = ["all_reduce_perf", "-b", "8", "-e", str(opts.get("nccl_max_size", "8G")),
            "-f", "2", "-g", str(len(gpus)), "-c", "1", "-n", str(opts.get("nccl_iters", 20))]
    # A hung collective is killed at the limit and becomes ERROR with its partial log.
    # NCCL's INIT and NET lines say which transport it chose and why a run hung.
    out = run(argv, timeout=timeout, name="all_reduce_perf", ok_codes=range(0, 256),
              env_extra={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    ev.append(out.evidence)
    return judge_nccl(bench.parse_nccl(out.text), len(gpus), ctx.limits).with_(
        evidence=tuple(ev))


# --- fabric.bandwidth -------------------------------------------------------------------

def _judge_pairs(d2d: dict[str, Any], limits: Limits, fails: list[str]) -> dict[str, float]:
    """GPU<->GPU copy bandwidth: each pair against its floor and the other pairs'
    median; returns the pairs' figures ("a-b": GB/s)."""
    pairs = {(a, b): v for a, row in d2d["matrix"].items() for b, v in row.items()
             if v is not None}
    med = statistics.median(pairs.values()) if pairs else 0.0
    for (a, b), v in sorted(pairs.items()):
        if within(limits, "fabric.d2d_gbs_min", v, f"GPU{a}->GPU{b}", fails) is False:
            continue
        if med:
            within(limits, "fabric.peer_fraction_min", round(v / med, 3),
                   f"GPU{a}->GPU{b} {v:g} GB/s as a fraction of the other pairs' median "
                   f"({med:g} GB/s)", fails)
    return {f"{a}-{b}": v for (a, b), v in pairs.items()}


def judge_bandwidth(parsed: dict[str, Any], limits: Limits,
                    planned: list[str] | None = None) -> Result:
    """Each GPU's and pair's copy bandwidth against its floor and its peers' median. A
    planned test case nvbandwidth waived, failed or left out was not measured: WARN naming
    it and why, never a pass on the cases that did run; nothing measured is an ERROR."""
    name = "fabric.bandwidth"
    fails: list[str] = []
    unmeasured = bench.nvbandwidth_unmeasured(parsed, planned) if planned else []
    value: dict[str, Any] = {}
    for test, key, label in (("host_to_device_memcpy_ce", "fabric.h2d_gbs_min", "host->GPU"),
                             ("device_to_host_memcpy_ce", "fabric.h2d_gbs_min", "GPU->host")):
        t = parsed["tests"].get(test)
        if not t:
            continue
        # One row (the CPU); columns are GPUs (nvbandwidth's layout for these tests).
        per_gpu = {g: v for row in t["matrix"].values() for g, v in row.items()
                   if v is not None}
        value[test] = per_gpu
        med = statistics.median(per_gpu.values()) if per_gpu else 0.0
        for g, v in sorted(per_gpu.items()):
            if within(limits, key, v, f"GPU{g} {label}", fails) is False:
                continue
            if med:
                within(limits, "fabric.peer_fraction_min", round(v / med, 3),
                       f"GPU{g} {label} {v:g} GB/s as a fraction of its peers' median "
                       f"({med:g} GB/s)", fails)
    d2d = parsed["tests"].get("device_to_device_memcpy_read_ce")
    if d2d:
        value["device_to_device_memcpy_read_ce"] = _judge_pairs(d2d, limits, fails)
    if not value:
        return Result(name, Verdict.ERROR, "nvbandwidth measured nothing: "
                      + ("; ".join(unmeasured) or "no host<->GPU or GPU<->GPU matrix"),
                      value={"not_measured": unmeasured}, unit="GB/s",
                      fault_code="NC-BANDWIDTH-NOT-MEASURED",
                      remediation="Run nvbandwidth by hand on the node and read its "
                                  "errors (driver, CUDA runtime, peer access).")
    if unmeasured:
        value["not_measured"] = unmeasured
    warns = [f"copy bandwidth not measured: {'; '.join(unmeasured)}"] if unmeasured else []
    h2d = value.get("host_to_device_memcpy_ce") or {}
    return judge_findings(
        name, fails, warns, f"host->GPU {min(h2d.values()):g}-{max(h2d.values()):g} GB/s per GPU"
        + (", GPU<->GPU measured" if d2d else "") if h2d else "measured",
        value=value, unit="GB/s",
        thresholds=limits.pick("fabric.h2d_gbs_min", "fabric.d2d_gbs_min",
                               "fabric.peer_fraction_min"),
        fault_code="NC-BANDWIDTH" if fails else "NC-BANDWIDTH-NOT-MEASURED" if warns
        else "",
        remediation="Compare with hardware.pcie and hardware.topology for the named GPU; "
                    "reseat or check the PCIe switch / NVLink." if fails else
                    "A waived GPU<->GPU case means nvbandwidth found no GPU pair with peer "
                    "access: check hardware.topology, the NVLink state and that IOMMU/ACS "
                    "do not block peer-to-peer." if warns else "")


@check("fabric.bandwidth", order=51, suites=("standard", "full", "lab"),
       tools=("nvbandwidth",),
       description="host<->GPU and GPU<->GPU copy bandwidth per GPU and pair")
def bandwidth(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    opts = ctx.options.get("fabric") or {}
    tests = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce"]
    if int(ctx.limits.value("nvlink.links_per_gpu", 0) or 0) > 0 and len(gpus) > 1:
        tests.append("device_to_device_memcpy_read_ce")
    if which("nvbandwidth") is None:
        # nvbandwidth is not installed: copy bandwidth measured in the stack's PyTorch.
        evs, wev = torch_fallback(ctx, "nvbandwidth", ["copy", "--bytes", "1G"] + (
            ["--d2d"] if "device_to_device_memcpy_read_ce" in tests else []),
            float(opts.get("timeout_s", 300)))
        if any(e["event"] == "error" for e in evs):
            msg = next(str(e.get("message")) for e in evs if e["event"] == "error")
            raise ToolError(f"the torch copy test failed: {msg[:300]}", wev)
        res = judge_bandwidth(nvbandwidth_from_events(evs), ctx.limits, tests)
        return res.with_(evidence=(*ev, wev), value={**res.value, "tool": "torch copy test"})
    argv = ["nvbandwidth"]
    for t in tests:
        argv += ["-t", t]
    out = run(argv, timeout=float(opts.get("timeout_s", 300)), name="nvbandwidth")
    ev.append(out.evidence)
    return judge_bandwidth(bench.parse_nvbandwidth(out.text), ctx.limits, tests).with_(
        evidence=tuple(ev))
