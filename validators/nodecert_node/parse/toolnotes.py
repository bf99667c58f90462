"""What a tool says beside its figures that explains them: NCCL's INFO/WARN lines and
perftest's warnings.

These lines never change a verdict (the figures do); they go into the result's message
and value so that a slow or hung run names its likely cause: NCCL that found no
InfiniBand device and fell back to TCP sockets, GPUDirect RDMA disabled for an HCA, a
bootstrap connection that timed out; perftest running with relaxed ordering off, a lower
MTU than asked for, or the CPU frequency not at its maximum.

The line texts are NCCL's and perftest's own (NCCL's IB and socket transports, its
socket and init code; perftest's parameter report), matched after any launcher prefix
("host:pid:tid [dev] NCCL INFO ...", mpirun's "[1,0]<stdout>:", srun's "0: ").
"""

from __future__ import annotations

import re
from typing import Any

_NCCL_LINE = re.compile(r"\bNCCL (INFO|WARN) (.*)$")
# enum ibv_wc_status (rdma-core libibverbs/verbs.h): the work completion's status that
# NCCL's IB transport prints as "Got completion from peer ... with status=N".
_WC_STATUS = {1: "IBV_WC_LOC_LEN_ERR", 2: "IBV_WC_LOC_QP_OP_ERR", 4: "IBV_WC_LOC_PROT_ERR",
              5: "IBV_WC_WR_FLUSH_ERR: the queue pair was already in error",
              8: "IBV_WC_LOC_ACCESS_ERR", 10: "IBV_WC_REM_ACCESS_ERR",
              12: "IBV_WC_RETRY_EXC_ERR: transport retries exceeded, a link or the remote "
                  "side did not answer",
              13: "IBV_WC_RNR_RETRY_EXC_ERR: the remote side had no receive posted"}
_MAX_NOTES = 12
# A failed work completion: "with status=12 opcode=..." (later NCCL), "with error 12,
# opcode ..." (earlier NCCL).
_WC = re.compile(r"Got completion from peer (\S+) with (?:status=|error )(\d+)")
# The process that printed an NCCL line: "host:pid:tid [dev] ..." (NCCL's log prefix).
_NCCL_PREFIX = re.compile(r"(?:^|\s)([A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+ \[\d+\]")
# NCCL 2.29+ with port failover on (NCCL_IB_RESILIENCY_PORT_FAILOVER=1): a device of a
# merged NIC failed and its traffic moved to the others (transport/net_ib/p2p_resiliency).
_FAILED_OVER = re.compile(r"ncclIbResiliencyHandleDeviceFailure: Device (\d+) marked as failed")


def _add(notes: list[str], note: str) -> None:
    if note not in notes and len(notes) < _MAX_NOTES:
        notes.append(note)


def _status(wc: re.Match[str]) -> str:
    """A failed work completion's status as "status N (its ibv_wc_status name)"."""
    code = int(wc.group(2))
    return f"status {code} ({_WC_STATUS.get(code, 'see enum ibv_wc_status')})"


def _cause(level: str, body: str) -> str | None:
    """The root cause one NCCL line states, or None for a line that states none."""
    if re.match(r"NET/IB ?: No device found", body):
        return ("NCCL found no InfiniBand/RoCE device (\"NET/IB : No device found\"): check "
                "/dev/infiniband, the HCA driver and NCCL_IB_HCA")
    g = re.match(r"NET/\S+ ?: GPU Direct RDMA Disabled for HCA (\d+) '([^']*)'(.*)$", body)
    if g:
        why = g.group(3).strip()
        return (f"GPUDirect RDMA disabled for HCA {g.group(2)}" + (f" {why}" if why else "")
                + ": GPU buffers go through host memory (check nvidia-peermem or DMA-BUF "
                  "support)")
    wc = _WC.search(body)
    if wc:
        return f"the IB transport failed a transfer with peer {wc.group(1)}: {_status(wc)}"
    if "set by environment" in body:
        return None  # NCCL echoing a setting (e.g. NCCL_IB_TIMEOUT), not an event
    if re.search(r"timed out|timeout", body, re.IGNORECASE):
        return f"NCCL connection timed out: {body[:200]}"
    if re.search(r"Connection refused|No route to host|Network is unreachable", body):
        return f"NCCL could not connect: {body[:200]}"
    return f"NCCL WARN {body[:200]}" if level == "WARN" else None


def port_failures(text: str) -> list[str]:
    """The network ports NCCL lost during a run, each once, as "host[ hca]: what": a
    transfer the IB transport failed ("Got completion from peer ... with status=N",
    naming its HCA where NCCL does; a flush, status 5, is a queue pair already in error
    and still names its port), or a device NCCL failed over from. Either means a port
    failed under the collective's load: figures measured after a failover are the
    surviving ports', so the run cannot pass whatever its bandwidth."""
    out: list[str] = []
    for raw in text.splitlines():
        m = _NCCL_LINE.search(raw)
        if not m or m.group(1) != "WARN":
            continue
        body = m.group(2).strip()
        who = _NCCL_PREFIX.search(raw[:m.start()])
        host = who.group(1) if who else "a rank"
        wc = _WC.search(body)
        fo = _FAILED_OVER.search(body)
        if wc:
            hca = re.search(r"\bhca (\S+)", body)
            where = f"{host} {hca.group(1)}" if hca else host
            note = f"{where}: a transfer with peer {wc.group(1)} failed with {_status(wc)}"
            if not any(x.startswith(f"{where}: ") for x in out):
                out.append(note)
        elif fo:
            _add(out, f"{host}: NCCL marked device {fo.group(1)} of a merged NIC failed and "
                      "moved its traffic to the others (port failover)")
    return out[:_MAX_NOTES]


def nccl_notes(text: str) -> dict[str, Any]:
    """{"nccl_version": from "NCCL INFO NCCL version X" (None when not printed),
    "network": the transport NCCL chose ("IB", "Socket", a plugin's name; None when not
    printed), "gdrdma": True/False/None (whether any channel used GPUDirect RDMA),
    "notes": the root causes found, each once, in order}."""
    notes: list[str] = []
    version: str | None = None
    network: str | None = None
    channels_net = gdr = 0
    chosen: str | None = None
    for raw in text.splitlines():
        m = _NCCL_LINE.search(raw)
        if not m:
            continue
        body = m.group(2).strip()
        v = re.match(r"NCCL version (\S+)", body)
        n = re.match(r"Using network (\S+)", body)
        ch = re.search(r"\bvia NET/(\S+)", body)
        if v:
            version = version or v.group(1)
        elif n:
            network = n.group(1)
            if network == "Socket":
                _add(notes, "NCCL used TCP sockets between nodes, not InfiniBand/RoCE "
                            "(\"Using network Socket\")")
        elif ch:
            channels_net += 1
            gdr += "GDRDMA" in ch.group(1)
            # the transport is the channel's first word (NET/IB/0, NET/Socket/0) where
            # NCCL did not print its "Using network" line
            chosen = chosen or ch.group(1).split("/", 1)[0]
        else:
            cause = _cause(m.group(1), body)
            if cause:
                _add(notes, cause)
    gdrdma: bool | None = None
    network = network or chosen
    if channels_net:
        gdrdma = gdr > 0
        # said whether or not NCCL printed "Using network": the channels show it
        if not gdr and network != "Socket":
            _add(notes, "no NCCL network channel used GPUDirect RDMA (no \"/GDRDMA\" on any "
                        "\"via NET\" line): traffic was staged through host memory")
    return {"nccl_version": version, "network": network, "gdrdma": gdrdma, "notes": notes}


def perftest_notes(text: str) -> dict[str, Any]:
    """{"mtu": the MTU perftest ran with (bytes; None when not printed), "relax_order":
    True/False/None, "notes": its warnings, each once}."""
    notes: list[str] = []
    mtu: int | None = None
    relax: bool | None = None
    cpu_freq = 0
    lines = text.splitlines()
    for k, raw in enumerate(lines):
        line = raw.strip()
        m = re.match(r"^Mtu\s*:\s*(\d+)\s*\[B\]", line)
        if m:
            mtu = int(m.group(1))
            continue
        r = re.match(r"^PCIe relax order\s*:\s*(ON|OFF)\b", line)
        if r:
            relax = r.group(1) == "ON"
            if not relax:
                _add(notes, "PCIe relaxed ordering is off for this run (\"PCIe relax order: "
                            "OFF\"): GPUDirect RDMA bandwidth can suffer")
            continue
        if line.startswith("Requested mtu is higher than active mtu"):
            nxt = lines[k + 1].strip() if k + 1 < len(lines) else ""
            act = re.search(r"(\d+)\s*$", nxt)
            _add(notes, "the port's active MTU is lower than requested"
                        + (f" (perftest changed to active MTU enum {act.group(1)})"
                           if act else "") + ": check the switch and NIC MTU")
            continue
        if line.startswith("Conflicting CPU frequency values detected"):
            cpu_freq += 1
            continue
        w = re.match(r"^WARNING:\s*(.+)$", line)
        if w:
            _add(notes, f"perftest: {w.group(1)[:200]}")
    if cpu_freq:
        _add(notes, f"the CPU frequency was not at its maximum ({cpu_freq} \"Conflicting CPU "
                    "frequency values detected\" lines): check the CPU governor")
    return {"mtu": mtu, "relax_order": relax, "notes": notes}


__all__ = ["nccl_notes", "perftest_notes", "port_failures"]
