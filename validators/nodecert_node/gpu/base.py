"""What the node asks of a GPU vendor's tools: one interface, one implementation per
vendor (nvidia.py today). Every answer is parsed (the normalised `Gpu` records of
parse.smi, the topology matrix) and comes with its evidence; "no GPU" or "no driver"
raises context.NoGpu (a FAIL, never a pass); a tool that fails raises tools.ToolError."""

from __future__ import annotations

import subprocess
import threading
from typing import Any, Dict, List, Tuple

from nodecert_node.contract import Evidence

Inventory = Tuple[Dict[str, str], List[Dict[str, Any]], List[Evidence]]


class Backend:
    """A GPU vendor's tools. Subclass it in a module of this package and register() an
    instance; a node's plan names its vendor (spec `gpu_vendor`, default nvidia)."""

    vendor = ""
    tool = ""  # its management tool, as the checks that run it declare (tools=)

    def inventory(self, ctx: Any) -> Inventory:
        """(header: driver and runtime versions, every GPU's record, evidence)."""
        raise NotImplementedError

    def driver_version(self, ctx: Any) -> tuple[str | None, Evidence]:
        raise NotImplementedError

    def topology(self, ctx: Any) -> tuple[dict[str, dict[str, str]], dict[str, str], Evidence]:
        """(GPU-to-GPU/NIC matrix, the NIC legend, evidence)."""
        raise NotImplementedError

    def link_status(self, ctx: Any) -> tuple[Any, Evidence]:
        """Each GPU's GPU-to-GPU links and their speed."""
        raise NotImplementedError

    def power_limits(self, ctx: Any) -> tuple[dict[str, dict[str, float | None]], Evidence]:
        """{bus id: {current_w, default_w}} (None where not reported)."""
        raise NotImplementedError

    def list_text(self, ctx: Any, ev: list[Evidence]) -> str | None:
        """The GPU list as the tool prints it (None where it cannot say; evidence kept)."""
        raise NotImplementedError

    def list_argv(self) -> list[str]:
        """The command that lists the GPUs, to run inside a container image."""
        raise NotImplementedError

    def compute_apps(self, timeout: float) -> str:
        """The compute processes on the GPUs: one "pid, name" row each (idle.py reads
        them); ToolError when the tool cannot say (an error is not a job, nor idle)."""
        raise NotImplementedError

    def sample(self, stop: threading.Event, rows: list[dict[str, str]], raw: list[str],
               period_ms: int, fields: list[str]) -> subprocess.Popen[str]:
        """Telemetry every period_ms, its rows parsed into `rows` as they come, until
        telemetry.stop()."""
        raise NotImplementedError


BACKENDS: dict[str, Backend] = {}
DEFAULT_VENDOR = "nvidia"


def register(backend: Backend) -> Backend:
    if not backend.vendor or (backend.vendor in BACKENDS \
            and BACKENDS[backend.vendor] is not backend):
        raise RuntimeError(f"GPU backend {backend.vendor!r}: no vendor, or declared twice")
    BACKENDS[backend.vendor] = backend
    return backend


def withdraw(vendor: str) -> None:
    """Remove a backend (a test's throwaway one)."""
    BACKENDS.pop(vendor, None)
