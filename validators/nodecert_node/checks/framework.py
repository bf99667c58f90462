"""The checks that run the stack's own framework: GEMM burn-in load and smoke test.

The workers (nodecert_node/workers/*.py) run under the provisioned environment's
python, which the plan names (plan["framework"]); this module starts them, one
process per GPU for the GEMM load, reads their JSON events and judges them.
Judges are pure functions of the events, tested on recorded real-GPU output.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

from nodecert_node.checks import Ctx, Limits, check, judge_findings, nvidia_smi_q
from nodecert_node.result import Evidence, Result, Threshold, Verdict
from nodecert_node.tools import Output, ToolError, run

WORKERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers")
DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")


class NoFramework(Exception):
    """The stack pins a framework but its environment is not on the node."""


def framework(ctx: Ctx) -> dict[str, Any]:
    return dict(ctx.plan.get("framework") or {})


def framework_python(ctx: Ctx) -> str:
    fw = framework(ctx)
    py = str(fw.get("python") or "")
    if not py:
        raise NoFramework("no framework environment is assigned to this host (no stack, or "
                          "the stack pins no framework)")
    if not os.path.exists(py):
        raise NoFramework(f"the stack's framework environment is missing: {py} does not exist")
    return py


def events(text: str) -> list[dict[str, Any]]:
    """The JSON event lines of a worker's output (framework warnings are skipped)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and "event" in ev:
                out.append(ev)
    return out


# --- GEMM load ---------------------------------------------------------------------------


def gemm_argv(py: str, gpu: int, load: dict[str, Any], seconds: float) -> list[str]:
    return [py, os.path.join(WORKERS, "gemm.py"), "--device", str(gpu),
            "--dtype", str(load.get("dtype", "bf16")), "--size", str(load.get("gemm_size", 8192)),
            "--seconds", str(seconds), "--report-s", str(load.get("report_s", 5))]


def run_gemm(ctx: Ctx, gpus: int, seconds: float) -> tuple[dict[int, list[dict[str, Any]]],
                                                            list[Evidence]]:
    """One worker per GPU, all at once; per GPU its events (an error event on a hang)."""
    py = framework_python(ctx)
    load = dict(ctx.options.get("load") or {})
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    evidence: dict[int, Evidence] = {}

    def one(g: int) -> None:
        try:
            out: Output = run(gemm_argv(py, g, load, seconds), timeout=seconds + 300,
                              name=f"gemm GPU{g}", ok_codes=(0, 2, 3))
            per_gpu[g], evidence[g] = events(out.text), out.evidence
        except ToolError as exc:
            text = exc.evidence.output if exc.evidence else ""
            per_gpu[g] = [*events(text), {"event": "error", "message": str(exc)}]
            if exc.evidence:
                evidence[g] = exc.evidence
    threads = [threading.Thread(target=one, args=(g,)) for g in range(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per_gpu, [evidence[g] for g in sorted(evidence)]


def gemm_summary(evs: list[dict[str, Any]]) -> dict[str, Any]:
    """Sustained throughput: the mean of the windows in the second half of the run."""
    ready = next((e for e in evs if e["event"] == "ready"), {})
    done = next((e for e in evs if e["event"] == "done"), {})
    windows = [float(w) for w in done.get("windows") or
               [e["tflops"] for e in evs if e["event"] == "window"]]
    half = windows[len(windows) // 2:] or windows
    return {"name": ready.get("name"), "dtype": ready.get("dtype"), "n": ready.get("n"),
            "sustained": sum(half) / len(half) if half else None,
            "windows": windows, "ready": ready, "done": done,
            "mismatches": [e for e in evs if e["event"] == "mismatch"],
            "errors": [str(e.get("message", "")) for e in evs if e["event"] == "error"]}


def judge_gemm(per_gpu: dict[int, list[dict[str, Any]]], limits: Limits,
               check_name: str = "load.burnin") -> Result:
    fails: list[str] = []
    warns: list[str] = []
    errors: list[str] = []
    s = {g: gemm_summary(evs) for g, evs in sorted(per_gpu.items())}
    dtype = next((x["dtype"] for x in s.values() if x["dtype"]), "bf16")
    floor_key = f"burnin.tflops_min_{dtype}"
    floor = limits.value(floor_key)
    frac = float(limits.value("load.peer_fraction_min", 0.9))
    for g, x in s.items():
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
    rates = {g: x["sustained"] for g, x in s.items() if x["sustained"] is not None}
    best = max(rates.values(), default=0.0)
    for g, v in rates.items():
        if floor is not None and v < float(floor):
            fails.append(f"GPU{g}: {v:.0f} TFLOPS sustained ({dtype}), below the floor of "
                         f"{float(floor):g}")
        if best and v < frac * best:
            fails.append(f"GPU{g}: {v:.0f} TFLOPS sustained, {100 * (1 - v / best):.0f}% "
                         f"below the node's best GPU ({best:.0f})")
    digests = Counter(x["ready"].get("ref_digest") for x in s.values()
                      if x["ready"].get("ref_digest"))
    if len(digests) > 1:
        common = digests.most_common(1)[0][0]
        odd = [g for g, x in s.items() if x["ready"].get("ref_digest") not in (None, common)]
        warns.append(f"GPU{', GPU'.join(str(g) for g in odd)}: reference product differs "
                     "from the other GPUs' on identical inputs (different kernel or GPU)")
    thresholds = {"load.peer_fraction_min": Threshold(frac, ">=", "ratio", "nodecert",
                                                      "issue #6: more than 10% below the best "
                                                      "GPU in the node fails"),
                  **limits.pick(floor_key)}
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


# --- framework smoke ---------------------------------------------------------------------


def judge_smoke(evs: list[dict[str, Any]], expect: dict[str, Any], gpu_count: int) -> Result:
    """expect: {"torch": version, "torch_cuda": "13.0", "tensorflow": ..., "tensorflow_cuda":
    ..., "cudnn": stack's cuDNN, "nccl": stack's NCCL}; gpu_count: GPUs nvidia-smi sees."""
    fails: list[str] = []
    warns: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["event"] == "framework":
            seen[str(e["framework"])] = e
    wanted = [f for f in ("torch", "tensorflow") if expect.get(f)]
    for fw in wanted:
        info = seen.get(fw)
        errs = [str(e.get("message")) for e in evs
                if e["event"] == "error" and e.get("framework") == fw]
        if info is None:
            fails.append(f"{fw}: {errs[0] if errs else 'did not report'}")
            continue
        if str(info.get("version")) != str(expect[fw]):
            fails.append(f"{fw}: version {info.get('version')}, the stack pins {expect[fw]}")
        want_cuda = expect.get(f"{fw}_cuda")
        if want_cuda and str(info.get("cuda")) != str(want_cuda):
            fails.append(f"{fw}: built for CUDA {info.get('cuda')}, the stack pins "
                         f"{want_cuda}")
        gpus = list(info.get("gpus") or [])
        if len(gpus) != gpu_count:
            fails.append(f"{fw}: sees {len(gpus)} GPUs, nvidia-smi sees {gpu_count}")
        if not info.get("cudnn"):
            fails.append(f"{fw}: no cuDNN")
        elif expect.get("cudnn") and _major(info["cudnn"]) != _major(expect["cudnn"]):
            warns.append(f"{fw}: bundles cuDNN {info['cudnn']}, the stack's system cuDNN is "
                         f"{expect['cudnn']} (different major)")
        if fw == "torch" and gpus:
            nccl = str(info.get("nccl") or "")
            if not nccl or nccl.startswith("unavailable"):
                fails.append(f"torch: NCCL {nccl or 'not reported'}")
            elif expect.get("nccl") and _mm(nccl) != _mm(expect["nccl"]):
                warns.append(f"torch: bundles NCCL {nccl}, the stack's system NCCL is "
                             f"{expect['nccl']} (different minor)")
        trained = {str(e["device"]): e for e in evs
                   if e["event"] == "train" and e.get("framework") == fw}
        for msg in errs if info is not None else []:
            fails.append(f"{fw}: {msg[:300]}")
        for dev, t in sorted(trained.items()):
            curve = [float(v) for v in t.get("losses") or []]
            if len(curve) < 2 or not curve[-1] < 0.5 * curve[0]:
                fails.append(f"{fw} on {dev}: loss did not fall by half "
                             f"({curve[0] if curve else '-'} -> "
                             f"{curve[-1] if curve else '-'})")
        if gpus and len(trained) < len(gpus) and not errs:
            fails.append(f"{fw}: trained on {len(trained)} of {len(gpus)} GPUs")
    if not wanted:
        return Result("stack.framework_smoke", Verdict.ERROR, "the stack pins no framework "
                      "to test", fault_code="NC-NO-FRAMEWORK")
    value = {fw: {"version": seen.get(fw, {}).get("version"),
                  "cuda": seen.get(fw, {}).get("cuda"), "cudnn": seen.get(fw, {}).get("cudnn"),
                  "nccl": seen.get(fw, {}).get("nccl"), "gpus": len(seen.get(fw, {}).get("gpus")
                                                                     or [])} for fw in wanted}
    losses = {f"{e.get('framework')} {e.get('device')}": [e["losses"][0], e["losses"][-1]]
              for e in evs if e["event"] == "train" and e.get("losses")}
    return judge_findings(
        "stack.framework_smoke", fails, warns,
        "; ".join(f"{fw} {value[fw]['version']} (CUDA {value[fw]['cuda']}) sees "
                  f"{value[fw]['gpus']} GPUs and trains on each" for fw in wanted),
        value=value, facts={"loss_first_last": losses},
        fault_code="NC-FRAMEWORK" if fails else "",
        remediation="Re-provision the framework environment (nodecert provision) and check "
                    "that it matches the stack; a framework that cannot train is not ready."
                    if fails else "")


def _major(v: Any) -> str:
    s = str(v)
    return s.split(".", maxsplit=1)[0] if "." in s else (str(int(s) // 10000) if s.isdigit() else s)


def _mm(v: Any) -> str:
    return ".".join(str(v).split(".")[:2])


@check("stack.framework_smoke")
def framework_smoke(ctx: Ctx) -> Result:
    _, gpus, ev = nvidia_smi_q(ctx)
    try:
        py = framework_python(ctx)
    except NoFramework as exc:
        return Result("stack.framework_smoke", Verdict.FAIL, str(exc), evidence=tuple(ev),
                      fault_code="NC-NO-FRAMEWORK",
                      remediation="Provision the stack (nodecert provision) so its framework "
                                  "environment exists, then re-run.")
    fw = framework(ctx)
    evs: list[dict[str, Any]] = []
    steps = int((ctx.options.get("load") or {}).get("smoke_steps", 30))
    for name in ("torch", "tensorflow"):
        if not fw.get(name):
            continue
        try:
            out = run([py, os.path.join(WORKERS, "smoke.py"), "--framework", name, "--steps",
                       str(steps)], timeout=max(ctx.timeout, 600), name=f"{name} smoke",
                      ok_codes=(0, 2, 3))
            evs += events(out.text)
            ev.append(out.evidence)
        except ToolError as exc:
            evs.append({"event": "error", "framework": name, "message": str(exc)})
            if exc.evidence:
                ev.append(exc.evidence)
    return judge_smoke(evs, fw, len(gpus)).with_(evidence=tuple(ev))
