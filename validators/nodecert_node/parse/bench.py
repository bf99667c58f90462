"""GPU benchmark tools: nccl-tests (all_reduce_perf), nvbandwidth, gpu_burn."""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError, toolnotes

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
    info = toolnotes.nccl_notes(body)
    nccl_version = version.group(1) if version else (
        nccl_code_version(int(library.group(2))) if library else info["nccl_version"])
    n_ranks = len(ranks) or len(re.findall(r"^#\s+Rank\s+\d+ ", body, re.MULTILINE))
    failures = [ln.strip() for ln in lines
                if "Test CUDA failure" in ln or "Test NCCL failure" in ln
                or "Test failure" in ln]
    if not rows:
        # A run that printed no results: NCCL's own warnings say why. Beside results,
        # a warning (NCCL_DEBUG=INFO prints them) is a note, judged by the figures.
        failures += [ln.strip() for ln in lines if "NCCL WARN" in ln]
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
            "failures": failures, "network": info["network"], "gdrdma": info["gdrdma"],
            "notes": info["notes"]}


def parse_nvbandwidth(text: str) -> dict[str, Any]:
    """Per test: the bandwidth matrix (GB/s; None for N/A) and its SUM line when given;
    "statuses", one per test case nvbandwidth took up, in its order: {"test": name or
    None, "status": "running" | "waived" | "error", "message"}. nvbandwidth prints a
    waived case as a bare "Waived: " line without its name (its filter found nothing to
    measure, e.g. no GPU pair with peer access) and a case it could not find or run as
    "ERROR: ..."; the caller, which knows the order it asked for, maps them to names."""
    tests: dict[str, Any] = {}
    statuses: list[dict[str, Any]] = []
    cur: str | None = None
    header: list[int] | None = None
    for line in text.splitlines():
        m = re.match(r"^Running (\w+)\.$", line)
        if m:
            cur, header = m.group(1), None
            tests[cur] = {"matrix": {}, "sum": None}
            statuses.append({"test": cur, "status": "running", "message": ""})
            continue
        st = re.match(r"^(Waived|ERROR|Error):\s*(.*)$", line)
        if st:
            status = "waived" if st.group(1) == "Waived" else "error"
            last = statuses[-1] if statuses else None
            if (status == "error" and last is not None and last["status"] == "running"
                    and cur is not None and not tests[cur]["matrix"]):
                # The case that was running ended in this error before its matrix.
                last.update(status="error", message=st.group(2).strip()[:300])
                cur, header = None, None  # nothing after it is that case's matrix
            else:
                statuses.append({"test": None, "status": status,
                                 "message": st.group(2).strip()[:300]})
                cur, header = None, None
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
    version = re.search(r"^nvbandwidth Version: (\S+)", text, re.MULTILINE)
    if not tests and not (statuses and version):
        raise ParseError("no 'Running <test>.' line: not nvbandwidth output")
    return {"version": version.group(1) if version else None, "tests": tests,
            "statuses": statuses}


def nvbandwidth_unmeasured(parsed: dict[str, Any], planned: list[str]) -> list[str]:
    """The planned test cases with no matrix, each with what nvbandwidth said of it. A
    status line without a name is matched to the planned case in its position only when
    the named ones line up with the plan; otherwise the case is "not reported"."""
    statuses = parsed.get("statuses") or []
    aligned = len(statuses) == len(planned) and all(
        st["test"] in (None, want) for st, want in zip(statuses, planned))
    out = []
    for k, test in enumerate(planned):
        if parsed["tests"].get(test, {}).get("matrix"):
            continue
        st = statuses[k] if aligned else next(
            (s for s in statuses if s["test"] == test), None)
        if st is None:
            out.append(f"{test} not reported")
        elif st["status"] == "waived":
            out.append(f"{test} waived by nvbandwidth (nothing it could measure on this "
                       "node, e.g. no GPU pair with peer access)")
        elif st["status"] == "error":
            out.append(f"{test} ended in an error: {st['message'] or '(no message)'}")
        else:
            out.append(f"{test} printed no matrix (cut short?)")
    return out


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
