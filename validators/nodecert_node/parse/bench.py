"""GPU benchmark tools: nccl-tests (all_reduce_perf), nvbandwidth, dcgmi diag."""

from __future__ import annotations

import json
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


# Launcher prefixes in front of every line: Open MPI --tag-output "[1,0]<stdout>:",
# srun -l "0: ", pdsh "host: ".
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: |[\w.-]+: (?=[ #\d]))")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+"
                   r"(\d+)\s+\[([0-9a-fA-Fx:.]+)\]\s*(.*?)\s*$")


def nccl_code_version(code: int) -> str:
    """NCCL_VERSION_CODE -> "2.26.6" (major*10000+minor*100+patch since 2.9, before
    that major*1000+minor*100+patch)."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def parse_nccl(text: str) -> dict[str, Any]:
    """Rows (out-of-place and in-place), out-of-bounds line, ranks (with their hosts),
    version, failures. Launcher prefixes are removed; other lines (UCX, ssh, MPI
    warnings) are ignored."""
    lines = [_LAUNCHER_PREFIX.sub("", ln, count=1).rstrip() for ln in text.splitlines()]
    body = "\n".join(lines)
    rows = []
    ranks: list[dict[str, Any]] = []
    for line in lines:
        m = _NCCL_ROW.match(line)
        if m:
            rows.append({"size": int(m.group(1)), "type": m.group(3), "redop": m.group(4),
                         "time_us": float(m.group(6)), "algbw": float(m.group(7)),
                         "busbw": float(m.group(8)), "wrong": _wrong(m.group(9)),
                         "ip_busbw": float(m.group(12)), "ip_wrong": _wrong(m.group(13))})
            continue
        r = _RANK.match(line)
        if r:
            ranks.append({"rank": int(r.group(1)), "host": r.group(2),
                          "device": int(r.group(3)), "bus": r.group(4).lower(),
                          "name": r.group(5)})
    oob = re.search(r"^# Out of bounds values : (\d+) (OK|FAILED)", body, re.MULTILINE)
    avg = re.search(r"^# Avg bus bandwidth\s*: ([\d.]+)", body, re.MULTILINE)
    version = re.search(r"^NCCL version (\S+)", body, re.MULTILINE)
    library = re.search(r"^# nccl-tests version (\S+).*?nccl-library=(\d+)", body,
                        re.MULTILINE)
    nccl_version = version.group(1) if version else (
        nccl_code_version(int(library.group(2))) if library else None)
    n_ranks = len(ranks) or len(re.findall(r"^#\s+Rank\s+\d+ ", body, re.MULTILINE))
    failures = [ln.strip() for ln in lines
                if "Test CUDA failure" in ln or "Test NCCL failure" in ln
                or re.search(r"NCCL WARN|Test failure", ln)]
    validation = re.search(r"validation: (\d)", body)
    if not rows and not failures and "# nThread" not in body:
        raise ParseError("no nccl-tests header or result rows: not all_reduce_perf output")
    return {"rows": rows, "oob": int(oob.group(1)) if oob else None,
            "oob_ok": (oob.group(2) == "OK") if oob else None,
            "avg_busbw": float(avg.group(1)) if avg else None,
            "nccl_version": nccl_version,
            "tests_version": library.group(1) if library else None,
            "ranks": n_ranks, "hosts": sorted({r["host"] for r in ranks}),
            "rank_table": ranks,
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


_MESSAGE_ROWS = ("Error", "Warning", "Info")
_GPU_SUB = re.compile(r"^GPU\s*(\d+):\s*(\S.*)$")


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """`dcgmi diag -r N`: metadata, each test's result, its messages and per-GPU results.

    Reads `-j` JSON (DCGM 3 "DCGM GPU Diagnostic", DCGM 4 "DCGM Diagnostic") and the
    table of DCGM 2/3 ("Fail - GPU: 0" plus "Warning" rows) and DCGM 4 (per-GPU
    "GPU0: Pass" sub-rows). A row with an empty name continues the test above: a per-GPU
    result or a wrapped message; an Error/Warning/Info row is a message, never a test.
    "complete" is False when the closing border is missing (output cut short).
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _dcgmi_json(stripped)
    meta: dict[str, str] = {}
    tests: dict[str, str] = {}
    details: dict[str, list[str]] = {}
    gpus: dict[str, dict[int, str]] = {}
    section = ""
    cur: str | None = None
    in_message = False
    complete = False
    seen_table = False
    wrapped_full = False
    for line in text.splitlines():
        line = line.rstrip()
        sm = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+[+|]", line)
        if sm:
            section, cur, in_message, complete = sm.group(1), None, False, False
            continue
        if re.match(r"^\+[-=]+\+[-=]+\+$", line):
            complete = seen_table  # a border after rows closes the table (so far)
            continue
        m = re.match(r"^\|\s?(.*?)\s*\|(.*)\|$", line)
        if not m:
            continue
        inner = m.group(2)[1:] if m.group(2).startswith(" ") else m.group(2)
        name, value = m.group(1), inner.strip()
        seen_table, complete = True, False
        if name == "Diagnostic" and value == "Result":
            continue
        if section == "Metadata":
            if name:
                meta[name], cur = value, name
            elif cur is not None:  # a wrapped metadata value
                meta[cur] = f"{meta[cur]} {value}".strip()
            continue
        wrapped_prev, wrapped_full = wrapped_full, False
        if name in _MESSAGE_ROWS or not name:
            wrapped_full = len(inner) > 10 and len(inner.rstrip()) >= len(inner) - 2
        if name in _MESSAGE_ROWS:
            if cur is None:
                raise ParseError(f"dcgmi diag: a {name!r} row before any test: {line!r}")
            details[cur].append(f"{name}: {value}")
            in_message = True
            continue
        if not name:
            if cur is None:
                if value:
                    raise ParseError(f"dcgmi diag: a continuation row before any test: "
                                     f"{line!r}")
                continue
            g = _GPU_SUB.match(value)
            if g:
                gpus[cur][int(g.group(1))] = g.group(2).strip()
                in_message = False
            elif value and in_message and details[cur]:
                # DCGM wraps long messages at a fixed width, mid-word: a chunk that filled
                # the cell continues directly (the next chunk keeps its leading space)
                joined = inner.rstrip() if wrapped_prev else " " + value
                details[cur][-1] = details[cur][-1] + joined
            elif value:
                details[cur].append(value)
                in_message = True
            continue
        key = name if name not in tests else f"{name} ({section})"
        tests[key], cur, in_message = value, key, False
        details[key], gpus[key] = [], {}
    if not tests and not meta:
        raise ParseError("no diagnostic table: not `dcgmi diag` output")
    return {"meta": meta, "tests": tests, "details": details, "gpus": gpus,
            "complete": complete, "format": "table"}


def _dcgmi_json(text: str) -> dict[str, Any]:
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        raise ParseError(f"dcgmi diag -j: JSON is cut short or corrupt: {exc}") from exc
    if not isinstance(obj, dict):
        raise ParseError("dcgmi diag -j: not a JSON object")
    root = obj.get("DCGM Diagnostic") or obj.get("DCGM GPU Diagnostic")
    if not isinstance(root, dict) or not isinstance(root.get("test_categories"), list):
        raise ParseError("dcgmi diag -j: no 'DCGM Diagnostic' / 'DCGM GPU Diagnostic' "
                         "object with test_categories")
    meta: dict[str, str] = {}
    for src in (obj, root, obj.get("metadata"), root.get("metadata")):
        if isinstance(src, dict):
            for k in ("version", "DCGM Version", "Driver Version Detected", "GPU Device IDs"):
                if isinstance(src.get(k), (str, int, float)):
                    meta["DCGM Version" if k == "version" else k] = str(src[k])
    tests: dict[str, str] = {}
    details: dict[str, list[str]] = {}
    gpus: dict[str, dict[int, str]] = {}
    rank = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
    for cat in root["test_categories"]:
        for t in (cat or {}).get("tests") or []:
            name = str(t.get("name") or "")
            if not name:
                raise ParseError("dcgmi diag -j: a test without a name")
            results = t.get("results") or []
            per: dict[int, str] = {}
            msgs: list[str] = []
            for r in results:
                st = str(r.get("status", "")).strip()
                ident = r.get("entity_id", r.get("gpu_id", r.get("gpu_ids")))
                if isinstance(ident, (int, str)) and str(ident).isdigit():
                    per[int(ident)] = st
                for w in r.get("warnings") or []:
                    msgs.append("Warning: " + str(w.get("warning", w) if isinstance(w, dict)
                                                  else w))
                if r.get("info"):
                    msgs.append(f"Info: {r['info']}")
            summary = (t.get("test_summary") or {}).get("status")
            statuses = [summary] if summary else [r.get("status", "") for r in results]
            worst = max((str(s) for s in statuses if s),
                        key=lambda s: rank.get(s.lower()[:4], 3), default="")
            if not worst:
                raise ParseError(f"dcgmi diag -j: test {name!r} has no status")
            tests[name], details[name], gpus[name] = worst, msgs, per
    return {"meta": meta, "tests": tests, "details": details, "gpus": gpus,
            "complete": True, "format": "json"}


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
