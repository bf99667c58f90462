"""`nodecert parse TOOL FILE`: a tool's output a user already has, read with the same pure
parsers the checks use (a node's output is read the same way wherever it comes from).

For triage: the output of a node that nodecert never ran on, pasted into a ticket, is
read into JSON, or refused with the line and what is wrong. Nothing is judged here:
the figures are shown as the tool printed them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert_node.parse import (
    ParseError,
    bench,
    cudasamples,
    dcgmi,
    engine,
    fio,
    ib,
    kernel,
    smi,
    smitable,
)
from nodecert_node.parse import perftest as perftest_parse
from nodecert_node.parse import topo as topo_parse

MAX_BYTES = 32 * 1024 * 1024


def _smi_q(text: str) -> Any:
    header, gpus = smi.parse_q(text)
    return {"header": header, "gpus": gpus}


def _smi_q_xml(text: str) -> Any:
    header, gpus = smi.parse_q_xml(text)
    return {"header": header, "gpus": gpus}


def _fio(text: str) -> Any:
    return fio.parse_fio(text) if text.lstrip().startswith("{") else fio.parse_fio_text(text)


# tool name -> (what it reads, parser)
TOOLS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "nvidia-smi": ("the plain nvidia-smi table", smitable.parse_smi_table),
    "nvidia-smi-q": ("nvidia-smi -q", _smi_q),
    "nvidia-smi-q-x": ("nvidia-smi -q -x", _smi_q_xml),
    "nvidia-smi-query-gpu": ("nvidia-smi --query-gpu=... --format=csv",
                             smi.parse_query_csv),
    "topo": ("nvidia-smi topo -m", topo_parse.parse_topo_matrix),
    "dcgmi-diag": ("dcgmi diag -r N [-j]", dcgmi.parse_dcgmi_diag),
    "dmesg": ("dmesg, dmesg -T, journalctl -k: NVRM Xid and GPU-loss events",
              kernel.parse_kernel_log),
    "ibstat": ("ibstat", ib.parse_ibstat),
    "nccl-tests": ("all_reduce_perf and the other nccl-tests", bench.parse_nccl),
    "nvbandwidth": ("nvbandwidth", bench.parse_nvbandwidth),
    "gpu-burn": ("gpu_burn", bench.parse_gpu_burn),
    "perftest": ("ib_write_bw and the other perftest tools", perftest_parse.parse_perftest),
    "fio": ("fio (--output-format=json, or its text output)", _fio),
    "bandwidthTest": ("the CUDA samples' bandwidthTest", cudasamples.parse_bandwidth_test),
    "p2pBandwidthLatencyTest": ("the CUDA samples' p2pBandwidthLatencyTest",
                                cudasamples.parse_p2p),
    "container-gpu-error": ("a container engine's GPU error (docker run --gpus, podman "
                            "--device nvidia.com/gpu=all, a pod's nvidia-smi)",
                            engine.parse_engine_error),
}


class TriageError(NodecertError):
    """The file cannot be read as the named tool's output."""


def _plain(value: Any) -> Any:
    """JSON-ready: dataclasses as mappings, tuples as lists, mapping keys as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def parse_file(tool: str, path: Path) -> Any:
    """The named tool's output in `path`, parsed; TriageError says why it cannot be."""
    if tool not in TOOLS:
        raise TriageError(f"no parser for {tool!r}",
                          hint="one of: " + ", ".join(sorted(TOOLS, key=str.lower)))
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise TriageError(f"cannot read the file: {exc.strerror}", where=str(path)) from None
    if len(data) > MAX_BYTES:
        raise TriageError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB: not one tool's "
                          "output", where=str(path))
    text = data.decode("utf-8", "replace")
    try:
        return _plain(TOOLS[tool][1](text))
    except ParseError as exc:
        raise TriageError(f"not {TOOLS[tool][0]} output as nodecert reads it: {exc}",
                          where=str(path), hint="name the tool that wrote it (nodecert "
                          "parse --help lists them)") from None


__all__ = ["MAX_BYTES", "TOOLS", "TriageError", "parse_file"]
