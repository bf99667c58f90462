"""all_reduce_perf, all_gather_perf, alltoall_perf (nccl-tests): the bus-bandwidth table
from the fabric model.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import os
import re
import signal
import sys

from nodecert_simhw import multinode
from nodecert_simhw.faults import Faults
from nodecert_simhw.state import (
    bus_id,
    cuda_devices,
    driver_version,
    installed,
    jitter,
    load_hw,
    nvlink_ok,
    take_options,
)


def _size(text):
    m = re.match(r"^(\d+)([KMG]?)$", text.upper())
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def _nccl_version(inst):
    if "nccl" not in inst:
        return None
    full = inst["nccl"][1]  # e.g. 2.27.7-1+cuda13.0
    m = re.match(r"^(\d+\.\d+\.\d+)-\d+\+(cuda\d+\.\d+)", full)
    return f"{m.group(1)}+{m.group(2)}" if m else full


def busbw_peak(hw, gpus):
    """Large-message bus bandwidth the simulated fabric delivers for these GPUs."""
    fab = hw["profile"]["fabric"]
    peak = fab["allreduce_busbw_gbs"] if len(gpus) > 1 else 0.0
    if hw["profile"]["gpu"].get("nvlink_links") and not all(nvlink_ok(hw, i) for i in gpus):
        peak = fab["pcie_allreduce_busbw_gbs"]  # NVLink gone: traffic falls back to PCIe
    return peak * Faults(hw).busbw_factor()


def mnnvl(hw, gpus):
    """What NCCL learns of a rack tray's GPUs for a multi-node NVLink (MNNVL) run: the
    fabric's cluster and clique, and the bandwidth the GPUs' NVLinks carry (the slowest
    GPU's); None off a rack, with NCCL_MNNVL_ENABLE=0, or with a GPU's NVLinks all down."""
    rack = hw.get("rack")
    if not rack or os.environ.get("NCCL_MNNVL_ENABLE") == "0" or not gpus:
        return None
    if not all(nvlink_ok(hw, i) for i in gpus):
        return None
    faults = Faults(hw)
    peak = hw["profile"]["fabric"].get("mnnvl_busbw_gbs", 0.0)
    return {"uuid": rack["cluster_uuid"].replace("-", ""),
            "clique": int(faults.clique(str(rack["clique_id"]))),
            "peak": peak * min(faults.nvlink_factor(i) for i in gpus),
            "health": 0x0 if not any(faults.fabric_degraded(i) for i in gpus) else 0xaa}


def over_mnnvl(ranks):
    """Whether NCCL runs this job over the NVLink domain: several processes, each on a
    rack tray, all in one clique of one cluster."""
    m = [r.get("mnnvl") for r in ranks]
    return (len(ranks) > 1 and all(m)
            and len({(x["uuid"], x["clique"]) for x in m}) == 1)


# test -> (redop, bus bandwidth factor of nccl-tests: 2(n-1)/n for all-reduce, (n-1)/n for
# the others; share of the all-reduce peak the lab's fabric model gives the collective).
COLLECTIVES = {"all_reduce_perf": ("sum", 2.0, 1.0), "all_gather_perf": ("none", 1.0, 0.78),
               "alltoall_perf": ("none", 1.0, 0.55)}


def cmd_all_gather_perf(argv):
    return cmd_all_reduce_perf(argv, test="all_gather_perf")


def cmd_alltoall_perf(argv):
    return cmd_all_reduce_perf(argv, test="alltoall_perf")


def cmd_all_reduce_perf(argv, test="all_reduce_perf"):
    hw = load_hw()
    inst = installed()
    nccl = _nccl_version(inst)
    if nccl is None:
        sys.stderr.write(f"{test}: error while loading shared libraries: libnccl.so.2: "
                         "cannot open shared object file: No such file or directory\n")
        return 127
    if driver_version(inst) is None:
        print(f"{os.uname().nodename}: Test CUDA failure common.cu:892 'CUDA driver version is "
              "insufficient for CUDA runtime version'")
        return 2
    opts = {"-b": "8", "-e": "128M", "-f": "2", "-g": "1", "-n": "20", "-w": "5", "-c": "1"}
    take_options(argv, opts)
    ngpus = int(opts["-g"])
    vis = cuda_devices(hw)
    host = os.uname().nodename
    rank, size = multinode.world()
    if ngpus > len(vis):
        if rank == 0:
            _banner(nccl, ngpus, opts, test)
        print(f"{host}: Test CUDA failure common.cu:1304 'invalid device ordinal'")
        print(f" .. {host} pid {os.getpid()}: Test failure common.cu:1189")
        return 2
    gpus = vis[:ngpus]
    faults = Faults(hw)
    rails = multinode.rail_gbps(hw)
    mine = {"rank": rank, "host": host, "pid": os.getpid(),
            "buses": [bus_id(hw, i, width=4)[:-2].lower() for i in gpus],
            "product": hw["profile"]["gpu"]["product_name"],
            "peak": busbw_peak(hw, gpus), "factor": faults.busbw_factor(), "rails": rails,
            # ports that read Active and drop under the collective's load
            "lose": [k for k in faults.ports_failing_under_load()
                     if k < len(rails) and rails[k] > 0],
            "hang": faults.nccl_hangs(), "wrong": faults.nccl_wrong(),
            # no nvidia_peermem: no GPUDirect RDMA, NCCL stages through host memory
            "gdr": faults.setting("peermem_missing") is None,
            "mnnvl": mnnvl(hw, gpus)}
    boot = None
    if size > 1:
        comm_id = os.environ.get("NCCL_COMM_ID", "")
        try:
            boot = multinode.Bootstrap(comm_id, rank, size)
        except ValueError:
            print(f"{host}: SIMULATED {test}: a run of {size} processes needs "
                  "NCCL_COMM_ID=<host>:<port> in the lab (its ranks meet there, as NCCL's "
                  f"bootstrap does); got {comm_id!r}")
            return 1
        try:
            ranks = boot.gather(mine)
        except (OSError, TimeoutError) as exc:
            print(f"{host}: NCCL WARN {exc}")
            return 1
        if ranks is None:  # not rank 0: nccl-tests prints on rank 0 only
            return boot.finish()
    else:
        ranks = [mine]
    say = {}
    ranks, fail = lost_ports(ranks, nccl, say)
    rc = _report(ranks, nccl, ngpus, opts, test, fail=fail, say=say)
    return boot.finish(rc, say) if boot else rc


def _failover_on(nccl):
    """NCCL's port failover: NCCL 2.29.7 and later, with NCCL_IB_RESILIENCY_PORT_FAILOVER=1
    (off by default; NCCL v2.29.7 release notes)."""
    version = tuple(int(x) for x in re.findall(r"\d+", nccl.split("+")[0])[:3])
    return (version >= (2, 29, 7)
            and os.environ.get("NCCL_IB_RESILIENCY_PORT_FAILOVER", "0").strip() == "1")


def lost_ports(ranks, nccl, say):
    """A port lost under load across nodes (not over the NVLink domain): with port
    failover on, its rank logs the failover and the run goes on without that rail (the
    ranks returned have it removed); with it off, the run fails: the ports lost,
    [(rank, hca)], are returned for the report to fail on. `say` gets each rank's lines."""
    lost = [(i, k) for i, r in enumerate(ranks) for k in r.get("lose") or ()]
    if len(ranks) < 2 or over_mnnvl(ranks) or not lost:
        return ranks, []
    if not _failover_on(nccl):
        return ranks, lost
    recovery = "Yes" if os.environ.get("NCCL_IB_RESILIENCY_PORT_RECOVERY") == "1" else "No"
    for i, k in lost:
        r = ranks[i]
        say.setdefault(i, []).append(
            f"{r['host']}:{r['pid']}:{r['pid'] + 9} [0] transport/net_ib/p2p_resiliency.cc:325"
            f" NCCL WARN NET/IB: ncclIbResiliencyHandleDeviceFailure: Device {k % 2} marked "
            f"as failed. Initiating recovery? {recovery} (send comm=0x7f03e8{k:06x}, "
            "outstandingRecovery=0)")
    gone = {i: {k for j, k in lost if j == i} for i, _ in lost}
    return [dict(r, rails=[g for k, g in enumerate(r["rails"]) if k not in gone[i]])
            if i in gone else r for i, r in enumerate(ranks)], []


def _network_failure(ranks, fail, say):
    """NCCL's IB transport on the rank whose port dropped (a transfer retried until it
    gave up: IBV_WC_RETRY_EXC_ERR), then nccl-tests' own failure on every rank."""
    for i, k in fail:
        r = ranks[i]
        peer = ranks[1 if i == 0 else 0]
        say.setdefault(i, []).append(
            f"{r['host']}:{r['pid']}:{r['pid'] + 7} [0] transport/net_ib.cc:2244 NCCL WARN "
            f"NET/IB: Got completion from peer {peer.get('addr', '?')}<{40000 + k}> with "
            f"status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:"
            f"{r.get('addr', '?')} remoteGids::ffff:{peer.get('addr', '?')} hca mlx5_{k}")
    for i, r in enumerate(ranks):
        say.setdefault(i, []).extend([
            f"{r['host']}: Test NCCL failure common.cu:1148 'remote process exited or there "
            "was a network error / '",
            f" .. {r['host']} pid {r['pid']}: Test failure common.cu:1189"])


def _banner(nccl, ngpus, opts, test="all_reduce_perf"):
    lo, hi, factor = _size(opts["-b"]), _size(opts["-e"]), int(opts["-f"])
    a, b, c = (int(x) for x in nccl.split("+")[0].split("."))
    code = a * 10000 + b * 100 + c  # NCCL_VERSION_CODE
    print(f"# nccl-tests version 2.17.8 nccl-headers={code} nccl-library={code}")
    print(f"# Collective test starting: {test}")
    print(f"# nThread 1 nGpus {ngpus} minBytes {lo} maxBytes {hi} step: {factor}(factor) "
          f"warmup iters: {opts['-w']} iters: {opts['-n']} agg iters: 1 validation: "
          f"{opts['-c']} graph: 0")
    print("#")
    print("# Using devices")


def _info_lines(ranks, nccl):
    """NCCL's own INFO lines (NCCL_DEBUG=INFO) on rank 0: its version and, across nodes,
    the network it chose; a rank without an HCA makes NCCL fall back to sockets."""
    me = ranks[0]
    tag = f"{me['host']}:{me['pid']}:{me['pid']} [0] NCCL INFO"
    print(f"{tag} NCCL version {nccl}")
    if len(ranks) == 1:
        return
    m = me.get("mnnvl")
    if m:
        print(f"{tag} MNNVL busId 0x{me['buses'][0].split(':')[1]}000 fabric UUID "
              f"{m['uuid'][:16]}.{m['uuid'][16:]} cliqueId 0x{m['clique']:x} state 3 "
              f"healthMask 0x{m['health']:x}")
    if over_mnnvl(ranks):
        n = sum(len(r["buses"]) for r in ranks)
        print(f"{tag} MNNVL 1 cliqueId {m['clique']:x} cliqueSize {n} cliqueRank 0 "
              f"nvlDomainSize {n}")
        print(f"{tag} comm 0x{id(ranks) % (1 << 32):x} rank 0 nRanks {n} nNodes "
              f"{len({r['host'] for r in ranks})} localRanks {len(me['buses'])} localRank 0 "
              "MNNVL 1")
        return
    up = [k for k, g in enumerate(me["rails"]) if g > 0]
    if all(any(g > 0 for g in r["rails"]) for r in ranks):
        devs = " ".join(f"[{k}]mlx5_{k}:1/IB" for k in up)
        print(f"{tag} NET/IB : Using {devs} ; OOB eth0")
        print(f"{tag} Using network IB")
        gdr = "/GDRDMA" if all(r.get("gdr", True) for r in ranks) else ""
        for c, k in enumerate(up):
            print(f"{tag} Channel {c:02d}/0 : 0[0] -> {len(me['buses'])}[0] [send] via "
                  f"NET/IB/{k}{gdr}")
    else:
        print(f"{tag} NET/IB : No device found.")
        print(f"{tag} NET/Socket : Using [0]eth0")
        print(f"{tag} Using network Socket")


def combined_peak(ranks):
    """Large-message bus bandwidth of a run over these hosts: the slowest host's GPUs, or
    across hosts the slowest channel on every rail (multinode's fabric model)."""
    if over_mnnvl(ranks):  # the NVLink domain: no NIC in the path
        return min(r["mnnvl"]["peak"] for r in ranks) * min(r["factor"] for r in ranks)
    # a process's own GPUs bound it only where it has several (one GPU: no local ring)
    peak = min((r["peak"] for r in ranks if len(r.get("buses") or r.get("tflops") or ()) != 1),
               default=float("inf"))
    if len(ranks) > 1:
        rails = min(len(r["rails"]) for r in ranks)
        peak = min(peak, rails * min(multinode.channel_gbs(r["rails"]) for r in ranks))
    return peak


def _report(ranks, nccl, ngpus, opts, test="all_reduce_perf", *, fail=(), say=None):
    """The report rank 0 prints (rank 0's own lines in `say` included); `fail`: ports
    lost under load with no failover, so the run stops halfway through its sizes."""
    say = {} if say is None else say
    _banner(nccl, ngpus, opts, test)
    redop, bus_factor, share = COLLECTIVES[test]
    lo, hi, factor = _size(opts["-b"]), _size(opts["-e"]), int(opts["-f"])
    n = 0
    for r in ranks:
        for d, bus in enumerate(r["buses"]):
            print(f"#  Rank {n:2d} Group  0 Pid {r['pid']:6d} on {r['host']:>10} device {d:2d} "
                  f"[{bus}] {r['product']}")
            n += 1
    print(f"NCCL version {nccl}")
    if os.environ.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        _info_lines(ranks, nccl)
    print("#")
    for line in [ln for ln in say.get(0, []) if "NCCL WARN" in ln]:
        print(line)
    sys.stdout.flush()
    if any(r["hang"] for r in ranks):
        # A hung collective: no output, no exit, until the caller's timeout kills it.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        while True:
            signal.pause()
    print("#                                                              out-of-place     "
          "                  in-place          ")
    print("#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong")
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
          "          (us)  (GB/s)  (GB/s)       ")
    peak = combined_peak(ranks) * share
    ratio = bus_factor * (n - 1) / n if n > 1 else 1.0
    wrong = 1 if any(r["wrong"] for r in ranks) else 0
    base_us = 12.0 if len(ranks) == 1 else 25.0  # a hop over the fabric costs latency
    size, total, rows = lo, 0.0, 0
    # the port drops halfway through the sizes (geometrically), before a lone size
    stop = ((lo * hi) ** 0.5 if hi > lo else lo / 2) if fail else None
    while size <= hi:
        if stop is not None and size > stop:
            say.pop(0, None)
            _network_failure(ranks, fail, say)
            for line in say.pop(0, []):
                print(line)
            sys.stdout.flush()
            return 3  # testNcclError
        count = max(size // 4 // (n if redop == "none" else 1), 0)  # per rank
        cells = []
        for place in (0, 1):
            bw = peak * size / (size + (32 << 20)) * (1 + jitter(size, place, spread=0.004))
            t_us = base_us + (size / (bw / ratio * 1e9) * 1e6 if bw > 0 else 0.0)
            algbw = size / (t_us * 1e-6) / 1e9
            busbw = algbw * ratio if n > 1 else 0.0
            tstr = f"{t_us:.1f}" if t_us < 10000 else f"{t_us:.0f}"
            cells.append(f"{tstr:>8} {algbw:7.2f} {busbw:7.2f} {wrong if size == hi else 0:6d}")
            if place == 0:
                total += busbw
        print(f"{size:12d} {count:13d}     float {redop:>7}      -1 " + " ".join(cells))
        rows += 1
        size *= factor
        if factor <= 1:
            break
    oob = wrong
    print(f"# Out of bounds values : {oob} {'OK' if not oob else 'FAILED'}")
    print(f"# Avg bus bandwidth    : {total / max(rows, 1):.4g}")
    print("#")
    print()
    sys.stdout.flush()
    return 1 if oob else 0
