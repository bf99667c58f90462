"""NVIDIA's GPUs through nvidia-smi: the inventory (`-q`), the driver, the topology
matrix and NVLink status, the power limits, the GPU list, the compute processes and
the telemetry sampler (`--query-gpu -lms`)."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from nodecert_node.context import NoGpu, try_text
from nodecert_node.contract import Evidence
from nodecert_node.gpu.base import Backend, Inventory, register
from nodecert_node.parse import pci, smi, topo
from nodecert_node.tools import ToolError, run, which

SMI = "nvidia-smi"


class Nvidia(Backend):
    vendor = "nvidia"
    tool = SMI

    def inventory(self, ctx: Any) -> Inventory:
        """`nvidia-smi -q`, parsed; NoGpu when there is no GPU or no working driver."""
        try:
            out = run([SMI, "-q"], timeout=ctx.timeout, ok_codes=(0,))
        except ToolError as exc:
            ev = [exc.evidence] if exc.evidence else []
            gpus_on_bus: int | None = None
            try:
                ls = run(["lspci", "-nn", "-D"], timeout=ctx.timeout)
                ev.append(ls.evidence)
                gpus_on_bus = len(pci.nvidia_gpus(pci.parse_lspci(ls.text)))
            except ToolError as exc2:
                if exc2.evidence:
                    ev.append(exc2.evidence)
            if gpus_on_bus == 0:
                raise NoGpu("no NVIDIA GPU on this node: lspci shows no NVIDIA display/3D "
                            "controller", ev, "NC-NO-GPU",
                            "Check that the GPUs are seated and powered and the node is the "
                            "one ordered; a GPU node without GPUs cannot be certified.") from exc
            if exc.kind == "timeout":
                raise
            raise NoGpu(f"the NVIDIA driver is not working: {exc}", ev, "NC-NO-DRIVER",
                        "Install/load the pinned NVIDIA driver (nodecert provision), then "
                        "check `nvidia-smi` and `dmesg | grep NVRM`.") from exc
        header, gpus = smi.parse_q(out.text)
        if not gpus:
            raise NoGpu("nvidia-smi reports no GPU (\"No devices were found\")",
                        [out.evidence], "NC-NO-GPU",
                        "Check GPU seating/power and `dmesg | grep NVRM`.")
        return header, list(gpus), [out.evidence]

    def driver_version(self, ctx: Any) -> tuple[str | None, Evidence]:
        out = run([SMI, "--query-gpu=driver_version", "--format=csv,noheader"],
                  timeout=ctx.timeout, name="driver version")
        first = out.text.split()
        return (first[0] if first else None), out.evidence

    def topology(self, ctx: Any) -> tuple[dict[str, dict[str, str]], dict[str, str], Evidence]:
        out = run([SMI, "topo", "-m"], timeout=ctx.timeout, name="nvidia-smi topo")
        return topo.parse_topo_matrix(out.text), topo.nic_legend(out.text), out.evidence

    def link_status(self, ctx: Any) -> tuple[Any, Evidence]:
        out = run([SMI, "nvlink", "-s"], timeout=ctx.timeout)
        return topo.parse_nvlink_status(out.text), out.evidence

    def power_limits(self, ctx: Any) -> tuple[dict[str, dict[str, float | None]], Evidence]:
        out = run([SMI, "-q", "-d", "POWER"], timeout=ctx.timeout, name="nvidia-smi power")
        return smi.power_limits(out.text), out.evidence

    def list_text(self, ctx: Any, ev: list[Evidence]) -> str | None:
        return try_text(ev, self.list_argv(), ctx)

    def list_argv(self) -> list[str]:
        return [SMI, "-L"]

    def compute_apps(self, timeout: float) -> str:
        out = run([SMI, "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                  timeout=timeout)
        return out.text

    def sample(self, stop: threading.Event, rows: list[dict[str, str]], raw: list[str],
               period_ms: int, fields: list[str]) -> subprocess.Popen[str]:
        exe = which(SMI) or SMI
        proc = subprocess.Popen([exe, f"--query-gpu={','.join(fields)}",
                                 "--format=csv,noheader,nounits", "-lms", str(period_ms)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                raw.append(line)
                if stop.is_set():
                    break
                if line.strip():
                    rows.extend(smi.parse_query_csv(line, fields))
        threading.Thread(target=reader, daemon=True).start()
        return proc


NVIDIA = register(Nvidia())

__all__ = ["NVIDIA", "SMI", "Nvidia"]
