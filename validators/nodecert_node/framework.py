"""Running the stack's own framework: the environment's python and its workers.

The workers (nodecert_node/workers/*.py) run under the provisioned environment's
python, which the plan names (plan.framework); this module starts them (one
process per GPU for the GEMM load) and reads their JSON events. The judges live
with their checks (load.burnin, stack.framework_smoke), pure functions of the events.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from nodecert_node.context import Ctx
from nodecert_node.contract import Evidence
from nodecert_node.parse.events import events
from nodecert_node.tools import Output, ToolError, run

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


class NoFramework(Exception):
    """The stack pins a framework but its environment is not on the node."""


def framework(ctx: Ctx) -> dict[str, Any]:
    return dict(ctx.plan.framework)


def framework_python(ctx: Ctx) -> str:
    fw = framework(ctx)
    py = str(fw.get("python") or "")
    if not py:
        raise NoFramework("no framework environment is assigned to this host (no stack, or "
                          "the stack pins no framework)")
    if not os.path.exists(py):
        raise NoFramework(f"the stack's framework environment is missing: {py} does not exist")
    return py


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
