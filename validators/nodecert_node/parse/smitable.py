"""The plain `nvidia-smi` table, as users paste it into tickets.

The table's layout changes between driver branches: the header row's spacing, whether
the GPU block has a third row (MIG M., since R450), the width of each cell, a
processes table with or without GI/CI columns, a "MIG devices" table. So cells are
found by the table's own `|` borders and read by what they hold, never by column
position: a GPU block whose rows do not have the header's three cells is refused naming
the line, and a cell the driver printed as `N/A`, `ERR!` or `[N/A]` is None (with the
raw text kept), never 0.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

# The title row; R610 spells the driver "KMD Version" and the CUDA it supports "CUDA UMD
# Version" (smi.HEADER_ALIASES), earlier branches "Driver Version" and "CUDA Version".
_HEAD = re.compile(r"NVIDIA-SMI (\S+)\s+(?:Driver|KMD) Version: (\S+)\s+"
                   r"CUDA (?:UMD )?Version: (\S+)")
_BORDER = re.compile(r"^\s*[+|][-=+|]+[+|]?\s*$")
_NA = ("N/A", "ERR!", "[N/A]", "Unknown", "[Unknown Error]")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    if not (inner.startswith("|") and inner.endswith("|")):
        return []
    return [c.strip() for c in inner[1:-1].split("|")]


def _num(raw: str, unit: str, what: str, n: int) -> float | None:
    raw = raw.strip()
    if raw in _NA:
        return None
    m = re.fullmatch(rf"(-?\d+(?:\.\d+)?)\s*{unit}", raw)
    if not m:
        raise ParseError(f"nvidia-smi table line {n}: {what} {raw!r} is not a number in "
                         f"{unit or 'units'}")
    return float(m.group(1))


# Windows drivers print the driver model where Linux prints persistence mode.
_DRIVER_MODELS = ("WDDM", "TCC", "MCDM")


def _gpu_row1(cells: list[str], n: int, windows: bool = False) -> dict[str, Any]:
    first = cells[0].split()
    allowed = (*_DRIVER_MODELS, "N/A") if windows else ("On", "Off", "N/A")
    if len(first) < 3 or not first[0].isdigit() or first[-1] not in allowed:
        raise ParseError(f"nvidia-smi table line {n}: expected 'index name "
                         f"{'driver-model' if windows else 'persistence'}', got "
                         f"{cells[0]!r}")
    name = " ".join(first[1:-1])
    bus = cells[1].split()
    if not bus or not re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d", bus[0]):
        raise ParseError(f"nvidia-smi table line {n}: expected a PCI bus id, got {cells[1]!r}")
    ecc = cells[2]
    return {"index": int(first[0]), "name": name, "name_truncated": name.endswith("..."),
            "persistence": None if windows else first[-1],
            **({"driver_model": first[-1]} if windows else {}), "bus_id": bus[0].upper(),
            "display_active": bus[1] if len(bus) > 1 else None,
            "ecc_volatile_uncorrected": int(ecc) if ecc.isdigit() else None,
            "ecc_cell": ecc}


def _memory(cell: str, n: int) -> tuple[float | None, float | None]:
    """A 'used / total' MiB cell (the GPU block's and a MIG device's)."""
    mem = re.fullmatch(r"(\S+)\s*/\s*(\S+)", cell)
    if not mem:
        raise ParseError(f"nvidia-smi table line {n}: expected 'used / total' memory, got "
                         f"{cell!r}")
    return (_num(mem.group(1), "MiB", "memory used", n),
            _num(mem.group(2), "MiB", "memory total", n))


_ROW2 = re.compile(r"^(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>P\d+|\S+)\s+"
                   r"(?P<pwr>\S+)\s*/\s*(?P<cap>\S+)$")


def _gpu_row2(cells: list[str], n: int) -> dict[str, Any]:
    m = _ROW2.match(cells[0])
    if not m:
        raise ParseError(f"nvidia-smi table line {n}: expected 'fan temp perf power / cap', "
                         f"got {cells[0]!r}")
    used, total = _memory(cells[1], n)
    util = cells[2].split(None, 1)
    if not util:
        raise ParseError(f"nvidia-smi table line {n}: the GPU-Util cell is empty")
    fan = m.group("fan")
    return {"fan_pct": _num(fan, "%", "fan", n), "fan_cell": fan,
            "temp_c": _num(m.group("temp"), "C", "temperature", n),
            "perf_state": m.group("perf"),
            "power_w": _num(m.group("pwr"), "W", "power draw", n),
            "power_cap_w": _num(m.group("cap"), "W", "power cap", n),
            "memory_used_mib": used, "memory_total_mib": total,
            "util_pct": _num(util[0], "%", "GPU-Util", n),
            "compute_mode": util[1].strip() if len(util) > 1 else None}


def _processes(rows: list[tuple[int, str]], with_ids: bool) -> list[dict[str, Any]]:
    out = []
    for n, line in rows:
        cells = _cells(line)
        if len(cells) != 1 or not cells[0] or "No running processes" in cells[0]:
            continue
        tok = cells[0].split()
        want = 7 if with_ids else 5
        if len(tok) < want or not tok[0].isdigit():
            raise ParseError(f"nvidia-smi table line {n}: a process row needs {want} fields, "
                             f"got {cells[0]!r}")
        head, name_mem = (tok[:5], tok[5:]) if with_ids else (tok[:3], tok[3:])
        out.append({"gpu": int(head[0]),
                    "gi": head[1] if with_ids else None, "ci": head[2] if with_ids else None,
                    "pid": int(head[-2]), "type": head[-1],
                    "name": " ".join(name_mem[:-1]),
                    "memory_mib": _num(name_mem[-1], "MiB", "process memory", n)})
    return out


def parse_smi_table(text: str) -> dict[str, Any]:
    """{"smi_version", "driver_version", "cuda_version", "gpus": [...], "mig_devices":
    [...], "processes": [...]}: one entry per GPU block (index, name, persistence, bus id,
    ECC cell, fan, temperature, perf state, power and cap, memory, utilisation, compute
    and MIG mode), per MIG device (GPU, GI, CI, device, memory) and per process."""
    head = _HEAD.search(text)
    if not head:
        raise ParseError("no 'NVIDIA-SMI ... Driver (or KMD) Version: ... CUDA (UMD) "
                         "Version:' header: not the nvidia-smi table")
    lines = list(enumerate(text.splitlines(), 1))
    sections: list[tuple[str, list[tuple[int, str]]]] = []
    cur: list[tuple[int, str]] = []
    kind = "gpus"
    for n, line in lines:
        if "Processes:" in line or "MIG devices:" in line:
            sections.append((kind, cur))
            kind, cur = ("processes" if "Processes:" in line else "mig"), []
            continue
        cur.append((n, line))
    sections.append((kind, cur))
    gpus: list[dict[str, Any]] = []
    mig: list[dict[str, Any]] = []
    procs: list[dict[str, Any]] = []
    for kind, rows in sections:
        if kind == "gpus":
            gpus = _gpu_section(rows)
        elif kind == "mig":
            mig = _mig_section(rows)
        else:
            hdr = next((ln for _, ln in rows if "PID" in ln), "")
            procs = _processes(_after_rule(rows), with_ids=" GI " in f" {hdr} ")
    if not gpus:
        raise ParseError("the nvidia-smi table lists no GPU (cut short?)")
    # nvidia-smi always ends with its processes table: without it the text may have been
    # cut after a whole GPU block, and GPUs after the cut would be missing unseen.
    complete = any(k == "processes" and any(_BORDER.match(ln) for _, ln in _after_rule(rows))
                   for k, rows in sections)
    return {"smi_version": head.group(1), "driver_version": head.group(2),
            "cuda_version": head.group(3), "gpus": gpus, "mig_devices": mig,
            "processes": procs, "complete": complete}


def _after_rule(rows: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The rows after the table's `|===|` header rule."""
    for k, (_, line) in enumerate(rows):
        if "|===" in line or line.strip().startswith("|="):
            return rows[k + 1:]
    return []


def _gpu_block(block: list[tuple[int, list[str]]], windows: bool) -> dict[str, Any]:
    gpu = _gpu_row1(block[0][1], block[0][0], windows)
    gpu.update(_gpu_row2(block[1][1], block[1][0]))
    mig_cell = block[2][1][2] if len(block) >= 3 else ""
    gpu["mig_mode"] = mig_cell if mig_cell and mig_cell not in _NA else None
    return gpu


def _gpu_section(rows: list[tuple[int, str]]) -> list[dict[str, Any]]:
    # The header's rows between the top border and the `===` rule: 3 since R450 (MIG M.),
    # 2 before; each GPU block has as many.
    start = next((k for k, (_, ln) in enumerate(rows)
                  if "Persistence-M" in ln or "Driver-Model" in ln), None)
    if start is None:
        raise ParseError("no 'GPU  Name ... Persistence-M' (or Driver-Model) header row: "
                         "not the nvidia-smi table")
    # Windows (Driver-Model) has no MIG: its blocks may stop after two rows, at a border.
    windows = "Driver-Model" in rows[start][1]
    per_gpu = 0
    for _, ln in rows[start:]:
        if "|===" in ln:
            break
        per_gpu += 1
    gpus = []
    block: list[tuple[int, list[str]]] = []
    for n, line in _after_rule(rows[start:]):
        if _BORDER.match(line) or not line.strip():
            if windows and len(block) == 2 and per_gpu == 3:
                gpus.append(_gpu_block(block, windows))
                block = []
            if block:
                raise ParseError(f"nvidia-smi table line {n}: a GPU block of {len(block)} "
                                 f"row(s) where the header has {per_gpu} (cut short?)")
            continue
        cells = _cells(line)
        if len(cells) != 3:
            raise ParseError(f"nvidia-smi table line {n}: expected 3 cells, got {len(cells)} "
                             f"in {line.strip()[:100]!r}")
        block.append((n, cells))
        if len(block) == per_gpu:
            gpus.append(_gpu_block(block, windows))
            block = []
    if block:
        raise ParseError(f"nvidia-smi table line {block[-1][0]}: the last GPU block is cut "
                         "short")
    return gpus


def _mig_section(rows: list[tuple[int, str]]) -> list[dict[str, Any]]:
    out = []
    for n, line in _after_rule(rows):
        cells = _cells(line)
        if len(cells) < 2 or not cells[0]:
            continue
        ids = cells[0].split()
        if len(ids) != 4 or not all(i.isdigit() for i in ids):
            raise ParseError(f"nvidia-smi table line {n}: expected 'GPU GI CI MIG-dev', got "
                             f"{cells[0]!r}")
        used, total = _memory(cells[1], n)
        out.append({"gpu": int(ids[0]), "gi": int(ids[1]), "ci": int(ids[2]),
                    "device": int(ids[3]), "memory_used_mib": used,
                    "memory_total_mib": total})
    return out


__all__ = ["parse_smi_table"]
