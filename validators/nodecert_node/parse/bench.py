"""GPU benchmark tools: nccl-tests (all_reduce_perf), nvbandwidth, dcgmi diag."""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

# size count type redop [root] | time algbw busbw #wrong | time algbw busbw #wrong
# (nccl-tests before 2.13 had no root column; with validation off #wrong is N/A).
_NCCL_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(?:(-?\d+)\s+)?"
    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s+"
    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s*$")


def _wrong(v: str) -> int | None:
    return None if v == "N/A" else int(v)


def parse_nccl(text: str) -> dict[str, Any]:
    """Rows (out-of-place and in-place), out-of-bounds line, ranks, version, failures."""
    rows = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            rows.append({"size": int(m.group(1)), "type": m.group(3), "redop": m.group(4),
                         "time_us": float(m.group(6)), "algbw": float(m.group(7)),
                         "busbw": float(m.group(8)), "wrong": _wrong(m.group(9)),
                         "ip_busbw": float(m.group(12)), "ip_wrong": _wrong(m.group(13))})
    oob = re.search(r"^# Out of bounds values : (\d+) (OK|FAILED)", text, re.MULTILINE)
    avg = re.search(r"^# Avg bus bandwidth\s*: ([\d.]+)", text, re.MULTILINE)
    version = re.search(r"^NCCL version (\S+)", text, re.MULTILINE)
    ranks = re.findall(r"^#\s+Rank\s+\d+ ", text, re.MULTILINE)
    failures = [ln.strip() for ln in text.splitlines()
                if "Test CUDA failure" in ln or "Test NCCL failure" in ln
                or re.search(r"NCCL WARN|Test failure", ln)]
    validation = re.search(r"validation: (\d)", text)
    if not rows and not failures and "# nThread" not in text:
        raise ParseError("no nccl-tests header or result rows: not all_reduce_perf output")
    return {"rows": rows, "oob": int(oob.group(1)) if oob else None,
            "oob_ok": (oob.group(2) == "OK") if oob else None,
            "avg_busbw": float(avg.group(1)) if avg else None,
            "nccl_version": version.group(1) if version else None, "ranks": len(ranks),
            "validation": int(validation.group(1)) if validation else None,
            "failures": failures}


def parse_nvbandwidth(text: str) -> dict[str, Any]:
    """Per test: the bandwidth matrix (GB/s; None for N/A) and its SUM line when given."""
    tests: dict[str, Any] = {}
    cur: str | None = None
    header: list[int] | None = None
    for line in text.splitlines():
        m = re.match(r"^Running (\w+)\.$", line)
        if m:
            cur, header = m.group(1), None
            tests[cur] = {"matrix": {}, "sum": None}
            continue
        if cur is None:
            continue
        cells = line.split()
        if header is None and cells and all(c.isdigit() for c in cells):
            header = [int(c) for c in cells]
            continue
        if header is not None and len(cells) == len(header) + 1 and cells[0].isdigit():
            tests[cur]["matrix"][int(cells[0])] = {
                col: (None if v == "N/A" else float(v)) for col, v in zip(header, cells[1:])}
            continue
        s = re.match(rf"^SUM {cur} ([\d.]+)", line)
        if s:
            tests[cur]["sum"] = float(s.group(1))
    if not tests:
        raise ParseError("no 'Running <test>.' line: not nvbandwidth output")
    version = re.search(r"^nvbandwidth Version: (\S+)", text, re.MULTILINE)
    return {"version": version.group(1) if version else None, "tests": tests}


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """`dcgmi diag -r N` table: metadata and each test's result text."""
    meta: dict[str, str] = {}
    tests: dict[str, str] = {}
    section = ""
    for line in text.splitlines():
        sm = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+", line)
        if sm:
            section = sm.group(1)
            continue
        m = re.match(r"^\| (.+?)\s+\| (.+?)\s+\|$", line)
        if not m or m.group(1) in ("Diagnostic",):
            continue
        (meta if section == "Metadata" else tests)[m.group(1)] = m.group(2)
    if not tests and not meta:
        raise ParseError("no diagnostic table: not `dcgmi diag` output")
    return {"meta": meta, "tests": tests}


_BURN_LINE = re.compile(r"^\s*([\d.]+)%\s+proc'd: (.*?)\s+errors: (.*?)\s+temps: (.*?)\s*$")


def parse_gpu_burn(text: str) -> dict[str, Any]:
    """gpu_burn progress lines (per GPU: Gflop/s, errors, temperature) and its verdicts."""
    reports = []
    for line in text.splitlines():
        m = _BURN_LINE.match(line)
        if not m:
            continue
        gflops = [float(x) for x in re.findall(r"\(([\d.]+) Gflop/s\)", m.group(2))]
        errors = [int(x) for x in re.findall(r"\d+", m.group(3))]
        temps = [int(x) for x in re.findall(r"(-?\d+) C", m.group(4))]
        reports.append({"pct": float(m.group(1)), "gflops": gflops, "errors": errors,
                        "temps": temps})
    verdicts = {int(g): v for g, v in re.findall(r"^\s+GPU (\d+): (OK|FAULTY)\s*$", text,
                                                  re.MULTILINE)}
    if not reports and not verdicts:
        raise ParseError("no progress line (\"NN%  proc'd: ...\"): not gpu_burn output")
    seconds = re.search(r"^Burning for (\d+) seconds", text, re.MULTILINE)
    return {"reports": reports, "verdicts": verdicts,
            "seconds": int(seconds.group(1)) if seconds else None,
            "gpus": len(re.findall(r"^GPU \d+: .*\(UUID: ", text, re.MULTILINE))}
