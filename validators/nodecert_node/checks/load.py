"""load.burnin, load.thermal_soak and load.scaling.

The load (options load.engine) is, by default, a GEMM in the stack's own PyTorch
(checks/framework.py: bf16 unless load.dtype says fp16/tf32/fp8/fp32, compared
with a reference product every 10 iterations, TFLOPS judged against the profile
and the node's best GPU). `gpu_burn` (wilicc/gpu-burn) is the alternative for
stacks without PyTorch or on request: it also compares each result with a
reference, and its FP32 throughput is judged against the node's best GPU only.
The soak samples every GPU about once a second with `nvidia-smi --query-gpu
... -lms` while the load runs and keeps the time series for the report.
load.scaling trains a reference model on each GPU alone and on all of them
(nodecert_node/scaling.py holds the sizing and the judge).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

from nodecert_node import energy, gpu, scaling, telemetry
from nodecert_node.context import Ctx, judge_findings, within
from nodecert_node.contract import Evidence, Limits, Result, Verdict
from nodecert_node.framework import (
    WORKERS,
    NoFramework,
    framework,
    framework_python,
    gemm_summary,
    run_gemm,
)
from nodecert_node.parse import bench, smi
from nodecert_node.registry import check
from nodecert_node.tools import run

# clocks_event_reasons bits (NVML nvmlClocksEventReasons / DCGM dcgm_fields.h).
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_BRAKE = 0x8, 0x20, 0x40, 0x80
SOAK_FIELDS = ["index", "temperature.gpu", "temperature.gpu.tlimit", "clocks.sm",
               "power.draw", "clocks_event_reasons.active", "temperature.memory"]

def _judge_results(g: int, x: dict[str, Any], dtype: str) -> tuple[list[str], list[str],
                                                                    list[str]]:
    """(fails, warns, errors) of one GPU's GEMM results: wrong from the start (against
    the float64 reference), silently corrupted later, not bit-identical within
    tolerance, or not finished."""
    fails: list[str] = []
    warns: list[str] = []
    errors: list[str] = []
    ready, done = x["ready"], x["done"]
    if ready.get("ref_bad"):
        fails.append(f"GPU{g}: its first {dtype} product differs from the float64 reference "
                     f"({ready['ref_bad']} elements, max relative error "
                     f"{ready.get('ref_max_rel', 0):.3g}): wrong results from the start")
    bad = sum(int(m.get("bad", 0)) for m in x["mismatches"])
    if bad:
        first = x["mismatches"][0]
        fails.append(f"GPU{g}: silent data corruption: {bad} elements differ from the "
                     f"reference product beyond the {dtype} tolerance (first at iteration "
                     f"{first.get('iter')}, max relative error "
                     f"{float(first.get('max_rel', 0)):.3g})")
    elif x["mismatches"]:
        warns.append(f"GPU{g}: repeated products are not bit-identical "
                     f"({len(x['mismatches'])} checks), all within the {dtype} tolerance")
    if x["errors"] or not done:
        errors.append(f"GPU{g}: the GEMM load did not finish: "
                      f"{(x['errors'] or ['no result reported'])[-1][:300]}")
    return fails, warns, errors


def judge_gemm(per_gpu: dict[int, list[dict[str, Any]]], limits: Limits,
               check_name: str = "load.burnin") -> Result:
    fails: list[str] = []
    warns: list[str] = []
    errors: list[str] = []
    s = {g: gemm_summary(evs) for g, evs in sorted(per_gpu.items())}
    dtype = next((x["dtype"] for x in s.values() if x["dtype"]), "bf16")
    floor_key = f"burnin.tflops_min_{dtype}"
    for g, x in s.items():
        f, w, e = _judge_results(g, x, dtype)
        fails, warns, errors = fails + f, warns + w, errors + e
    rates = {g: x["sustained"] for g, x in s.items() if x["sustained"] is not None}
    best = max(rates.values(), default=0.0)
    for g, v in rates.items():
        within(limits, floor_key, round(v, 1), f"GPU{g} sustained {dtype} TFLOPS", fails)
        if best:
            within(limits, "load.peer_fraction_min", round(v / best, 3),
                   f"GPU{g} {v:.0f} TFLOPS as a fraction of the node's best GPU "
                   f"({best:.0f})", fails)
    digests = Counter(x["ready"].get("ref_digest") for x in s.values()
                      if x["ready"].get("ref_digest"))
    if len(digests) > 1:
        common = digests.most_common(1)[0][0]
        odd = [g for g, x in s.items() if x["ready"].get("ref_digest") not in (None, common)]
        warns.append(f"GPU{', GPU'.join(str(g) for g in odd)}: reference product differs "
                     "from the other GPUs' on identical inputs (different kernel or GPU)")
    thresholds = {**limits.pick("load.peer_fraction_min"), **limits.pick(floor_key)}
    value = {"tflops_per_gpu": {str(g): round(v, 1) for g, v in rates.items()},
             "dtype": dtype, "n": next((x["n"] for x in s.values() if x["n"]), None),
             "seconds": max((float(x["done"].get("seconds", 0)) for x in s.values()),
                            default=0.0), "load": "torch"}
    facts = {"windows": {str(g): x["windows"] for g, x in s.items()},
             "gpu_names": {str(g): x["name"] for g, x in s.items()},
             "framework": {k: next((x["ready"].get(k) for x in s.values()
                                    if x["ready"].get(k)), None) for k in ("torch", "cuda")}}
    if fails or not errors:
        lo = min(rates.values(), default=0.0)
        return judge_findings(
            check_name, fails, warns + errors,
            f"{len(rates)} GPUs, {dtype} GEMM {value['n']}^3 for {value['seconds']:g} s: "
            f"{lo:.0f}-{best:.0f} TFLOPS sustained, results bit-exact vs the reference",
            value=value, unit="TFLOPS", thresholds=thresholds, facts=facts,
            fault_code="NC-BURNIN" if fails else "",
            remediation="A GPU with wrong results or far below its peers is not ready: check "
                        "its clocks and temperatures (load.thermal_soak), reseat, or RMA."
                        if fails else "")
    return Result(check_name, Verdict.ERROR, errors[0] if len(errors) == 1 else
                  f"{errors[0]} (+{len(errors) - 1} more)", value=value, unit="TFLOPS",
                  thresholds=thresholds, findings=tuple(errors + warns), facts=facts,
                  fault_code="NC-LOAD-ERROR",
                  remediation="Read the worker's output in the evidence (CUDA errors, Xids in "
                              "dmesg); fix the cause and re-run. An ERROR is never a pass.")


# --- load.burnin ------------------------------------------------------------------------


def engine(ctx: Ctx) -> str:
    """torch (the stack pins PyTorch) unless options say gpu_burn."""
    chosen = str((ctx.options.get("load") or {}).get("engine", "auto"))
    if chosen == "auto":
        return "torch" if framework(ctx).get("torch") else "gpu_burn"
    return chosen


def no_framework(name: str, exc: NoFramework, ev: list[Evidence]) -> Result:
    return Result(name, Verdict.FAIL, str(exc), evidence=tuple(ev),
                  fault_code="NC-NO-FRAMEWORK",
                  remediation="Provision the stack (nodecert provision) so its framework "
                              "environment exists, or run the load with gpu_burn "
                              "(options load.engine=gpu_burn).")


def judge_burnin(parsed: dict[str, Any], limits: Limits) -> Result:
    """gpu_burn's output: result errors per GPU, FP32 throughput against the node's best."""
    fails: list[str] = []
    last = parsed["reports"][-1] if parsed["reports"] else {"gflops": [], "errors": []}
    for g, verdict in sorted(parsed["verdicts"].items()):
        if verdict == "FAULTY":
            errs = last["errors"][g] if g < len(last["errors"]) else "?"
            fails.append(f"GPU{g}: results differ from the reference ({errs} errors): silent "
                         "data corruption")
    # Sustained throughput: the mean over the second half of the run, per GPU.
    half = [r for r in parsed["reports"] if r["pct"] >= 50] or parsed["reports"]
    n = max((len(r["gflops"]) for r in half), default=0)
    per_gpu = [sum(r["gflops"][g] for r in half if g < len(r["gflops"])) / len(half)
               for g in range(n)]
    best = max(per_gpu, default=0.0)
    for g, v in enumerate(per_gpu):
        if best:
            within(limits, "load.peer_fraction_min", round(v / best, 3),
                   f"GPU{g} {v:.0f} Gflop/s as a fraction of the node's best GPU "
                   f"({best:.0f})", fails)
    if not per_gpu:
        fails.append("gpu_burn reported no throughput")
    return judge_findings(
        "load.burnin", fails, [], f"{n} GPUs loaded for {parsed['seconds']} s: "
        f"{min(per_gpu, default=0):.0f}-{best:.0f} Gflop/s (FP32 GEMM), no result errors",
        value={"gflops_per_gpu": [round(v, 1) for v in per_gpu], "seconds": parsed["seconds"],
               "load": "gpu_burn"}, unit="Gflop/s",
        thresholds=limits.pick("load.peer_fraction_min"),
        fault_code="NC-BURNIN" if fails else "",
        remediation="A GPU with result errors or far below its peers is not ready: check "
                    "its clocks and temperatures (load.thermal_soak), reseat, or RMA."
                    if fails else "")


@check("load.burnin", order=70, suites=("standard", "full", "lab"),
       tools=("gpu_burn",),
       description="a GEMM on every GPU in the framework: correct results, sustained TFLOPS")
def burnin(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)  # no GPU or no driver: FAIL before any load
    seconds = int((ctx.options.get("load") or {}).get("burnin_s", 60))
    rows: list[dict[str, str]] = []
    raw: list[str] = []
    stop = threading.Event()
    start = time.monotonic()
    # The draw while the load runs: what it cost (energy) and what each watt bought.
    sampler = telemetry.sample(gpu.backend(ctx), stop, rows, raw, period_ms=1000,
                               fields=energy.ENERGY_FIELDS)
    try:
        if engine(ctx) == "torch":
            try:
                per_gpu, wev = run_gemm(ctx, len(gpus), seconds)
            except NoFramework as exc:
                return no_framework("load.burnin", exc, ev)
            res = judge_gemm(per_gpu, ctx.limits).with_(evidence=tuple(ev + wev))
        else:
            out = run(["gpu_burn", str(seconds)], timeout=seconds + 120, name="gpu_burn")
            ev.append(out.evidence)
            res = judge_burnin(bench.parse_gpu_burn(out.text),
                               ctx.limits).with_(evidence=tuple(ev))
    finally:
        elapsed = time.monotonic() - start
        telemetry.stop(stop, sampler)
    return energy.with_energy(res, rows, raw, elapsed, sampler.returncode,
                              command=telemetry.command(sampler))


# --- load.thermal_soak ------------------------------------------------------------------

class _Sustained:
    """A temperature beyond its limit counts when it holds `soak.sustained_samples_min`
    consecutive samples (where the profile sets it: Grace-Blackwell trays move tens of
    degrees in seconds; elsewhere every sample counts); a shorter excursion is a
    transient, reported as a WARN with where it began."""

    def __init__(self, limits: Limits, fails: list[str], warns: list[str]) -> None:
        t = limits.opt("soak.sustained_samples_min")
        self.need = max(1, int(t.value)) if t is not None else 1
        self.fails, self.warns = fails, warns
        self.runs: dict[tuple[int, str], list[str]] = {}  # the misses in a row

    def over(self, g: int, kind: str, misses: list[str]) -> bool:
        """One sample's outcome for GPU g's `kind` of temperature; True once it fails."""
        run = self.runs.setdefault((g, kind), [])
        if not misses:
            self._transient(g, kind)
            return False
        run.append(misses[0])
        if len(run) < self.need:
            return False
        self.runs.pop((g, kind))
        self.fails.append(run[0] if self.need == 1 else
                          f"{run[0]}; held for {len(run)} consecutive samples")
        return True

    def _transient(self, g: int, kind: str) -> None:
        run = self.runs.pop((g, kind), [])
        if run:
            self.warns.append(f"{run[0]}: a transient of {len(run)} sample(s), under the "
                              f"{self.need} consecutive samples that make a failure")

    def end(self) -> None:
        for g, kind in list(self.runs):
            self._transient(g, kind)  # a run still open at the end is as long as it got


def _reading(row: dict[str, str]) -> tuple[float | None, float | None, float | None,
                                           float | None, int, float | None]:
    """(temperature, T.Limit margin, SM clock, power, throttle reasons, memory
    temperature) of one telemetry row; a figure the GPU does not report is None (memory
    temperature is N/A on GDDR parts), never 0."""
    return (smi.csv_number(row["temperature.gpu"]),
            smi.csv_number(row.get("temperature.gpu.tlimit", "")),
            smi.csv_number(row.get("clocks.sm") or row.get("clocks.current.sm") or ""),
            smi.csv_number(row["power.draw"]),
            int(row["clocks_event_reasons.active"] or "0", 16),
            smi.csv_number(row.get("temperature.memory") or ""))


def _slowdowns(g: int, k: int, reasons: int, temp: float | None,
               clock: float | None) -> list[tuple[str, str, str]]:
    """(kind, message, "fail" or "warn") for each slowdown the throttle reasons of one
    sample show: a hardware slowdown under load fails, a software thermal one warns."""
    out = [(name, f"GPU{g}: {name} under load (sample {k}, {temp or 0:g} C, clock "
                  f"{clock or 0:g} MHz)", "fail")
           for bit, name in ((HW_SLOWDOWN, "HW Slowdown"), (HW_THERMAL, "HW Thermal Slowdown"),
                             (HW_BRAKE, "HW Power Brake Slowdown")) if reasons & bit]
    if reasons & SW_THERMAL:
        out.append(("sw", f"GPU{g}: SW Thermal Slowdown under load (sample {k})", "warn"))
    return out


def judge_soak(samples: list[dict[str, str]], headroom_abs: dict[int, int | None],
               limits: Limits) -> Result:
    """samples: --query-gpu rows (SOAK_FIELDS); headroom_abs: GPU -> absolute max-operating
    temperature where the GPU reports one (pre-Hopper), else None (T.Limit margin used)."""
    fails: list[str] = []
    warns: list[str] = []
    series: dict[int, list[list[float | None]]] = {}
    flagged: set[tuple[int, str]] = set()
    sustained = _Sustained(limits, fails, warns)
    for row in samples:
        g = int(row["index"])
        k = len(series.get(g, []))  # this GPU's sample number (about one per second)
        temp, tlimit, clock, power, reasons, mem = _reading(row)
        series.setdefault(g, []).append([k, temp or 0, clock or 0, power or 0, reasons,
                                         mem if mem is not None else None])
        limit_abs = headroom_abs.get(g)
        headroom = tlimit if tlimit is not None else (
            limit_abs - temp if limit_abs is not None and temp is not None else None)

        for kind, msg, into in _slowdowns(g, k, reasons, temp, clock):
            if (g, kind) not in flagged:  # each GPU's slowdown said once
                flagged.add((g, kind))
                (fails if into == "fail" else warns).append(msg)
        if headroom is not None and (g, "temp") not in flagged:
            miss: list[str] = []
            within(limits, "soak.headroom_c_min", headroom, f"GPU{g} headroom to its max "
                   f"operating temperature (at {temp or 0:g} C, sample {k})", miss)
            if sustained.over(g, "temp", miss):
                flagged.add((g, "temp"))
        if mem is not None and (g, "mem") not in flagged:
            miss = []
            within(limits, "soak.mem_temp_max_c", mem,
                   f"GPU{g} memory temperature under load (sample {k})", miss)
            if sustained.over(g, "mem", miss):
                flagged.add((g, "mem"))
    sustained.end()
    if not samples:
        fails.append("no telemetry samples were taken during the load")
    peak = {g: max(float(s[1] or 0) for s in ss) for g, ss in series.items()}
    mem_peak = {g: max(float(s[5]) for s in ss if s[5] is not None)
                for g, ss in series.items() if any(s[5] is not None for s in ss)}
    plateau_mhz, plateau_w = _plateau(series, 2), _plateau(series, 3)
    return judge_findings(
        "load.thermal_soak", fails, warns,
        f"{len(series)} GPUs, {len(samples) // max(len(series), 1)} samples each: peak "
        f"{max(peak.values(), default=0):g} C, no hardware slowdown",
        value={"peak_temp_c": peak, "peak_mem_temp_c": mem_peak, "samples": len(samples),
               "plateau_sm_mhz": plateau_mhz, "plateau_power_w": plateau_w},
        thresholds=limits.pick("soak.headroom_c_min", "soak.mem_temp_max_c",
                               "soak.sustained_samples_min"),
        facts={"series_fields": ["sample", "temp_c", "sm_mhz", "power_w", "reasons",
                                 "mem_temp_c"],
               "series": {str(g): ss for g, ss in series.items()}},
        fault_code="NC-THERMAL" if fails else "",
        remediation="Check the GPU's cooling (fans, airflow, heatsink, liquid loop), its power "
                    "supply and PSU brake signals; a GPU that slows down under load is not "
                    "ready." if fails else "")


def _plateau(series: dict[int, list[list[float | None]]], field: int) -> dict[int, float]:
    """Each GPU's median of `field` over the second half of its samples: the plateau the
    load settled at. The series holds 0 where nvidia-smi gave no reading ([N/A]): those
    are left out, and a GPU with no reading has no plateau (never a plateau of 0)."""
    out = {}
    for g, ss in series.items():
        got = [float(s[field] or 0) for s in ss[len(ss) // 2:]]
        got = [x for x in got if x > 0]
        if got:
            out[g] = round(statistics.median(got), 1)
    return out


@check("load.thermal_soak", order=71, suites=("standard", "full", "lab"),
       tools=(gpu.SMI, "gpu_burn"),
       description="temperatures, clocks, power and slowdown reasons under a sustained load")
def thermal_soak(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    seconds = int((ctx.options.get("load") or {}).get("soak_s", 60))
    absolute = {i: g.get("temp_max_operating") for i, g in enumerate(gpus)}
    rows: list[dict[str, str]] = []
    raw: list[str] = []
    stop = threading.Event()
    start = time.monotonic()
    use_torch = engine(ctx) == "torch"
    sampler = telemetry.sample(gpu.backend(ctx), stop, rows, raw, period_ms=1000,
                               fields=SOAK_FIELDS)
    load_ev: list[Evidence] = []
    load_error = ""
    try:
        if use_torch:
            per_gpu, load_ev = run_gemm(ctx, len(gpus), seconds)
            res = judge_gemm(per_gpu, ctx.limits, "load.thermal_soak")
            if res.verdict == Verdict.ERROR:
                load_error = f"the load did not run to the end: {res.summary}"
        else:
            load_ev = [run(["gpu_burn", str(seconds)], timeout=seconds + 120,
                           name="gpu_burn (load)").evidence]
    except NoFramework as exc:
        return no_framework("load.thermal_soak", exc, ev)
    finally:
        telemetry.stop(stop, sampler)
    ev += [*load_ev, Evidence.of("telemetry", telemetry.command(sampler), sampler.returncode,
                                 "".join(raw), time.monotonic() - start)]
    res = judge_soak(rows, absolute, ctx.limits).with_(evidence=tuple(ev))
    if load_error and res.verdict < Verdict.FAIL:
        # Telemetry without the full load proves nothing about a loaded GPU.
        return res.with_(verdict=Verdict.ERROR, summary=load_error, fault_code="NC-LOAD-ERROR",
                         findings=(load_error, *res.findings))
    return res


# --- load.scaling -----------------------------------------------------------------------

@check("load.scaling", order=72, suites=("standard", "full", "lab"),
       description="training throughput on 1 GPU and all GPUs of the node: scaling efficiency")
def scaling_run(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    if ctx.plan.framework and not framework(ctx).get("torch"):
        # The reference job is PyTorch: a stack without it is not failed for that, and
        # not passed either: the figure is simply missing, and the result says so.
        return Result("load.scaling", Verdict.WARN, "not measured: the stack pins no PyTorch "
                      "(the reference training job runs in PyTorch)", evidence=tuple(ev),
                      remediation="Use a stack with PyTorch to have scaling measured.")
    try:
        py = framework_python(ctx)
    except NoFramework as exc:
        return no_framework("load.scaling", exc, ev)
    load = dict(ctx.options.get("load") or {})
    # Sized for the smallest GPU: the model must fit on every one of them.
    mem = min(float(g.get("memory_total_mib") or 0) for g in gpus)
    size = scaling.model_size(mem)
    limit = float(load.get("scaling_timeout_s", 600))
    single, e1 = scaling.phase(scaling.scaling_argv(py, "single", len(gpus), size, load),
                               limit, "scaling: every GPU alone")
    ddp, e2 = scaling.phase(scaling.scaling_argv(py, "ddp", len(gpus), size, load), limit,
                            f"scaling: {len(gpus)} GPUs, DDP")
    ev += [e for e in (e1, e2) if e is not None]
    res = scaling.judge_scaling(single, ddp, len(gpus), scaling.topology(ctx.limits),
                                ctx.limits)
    # The cluster's scaling job runs the same model with the same environment.
    return res.with_(evidence=tuple(ev), facts={
        **res.facts, "python": py, "worker": os.path.join(WORKERS, "scaling.py")})
