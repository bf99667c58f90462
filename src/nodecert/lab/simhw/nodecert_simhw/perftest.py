"""ib_write_bw (perftest): a server waits on its TCP port, a client connects, both print
perftest's report; the bandwidth is what the two rails deliver together
(multinode's fabric model).

    ib_write_bw -d mlx5_3 -F --report_gbits -D 2 [-p PORT] [-q QPS] [--use_cuda=N]   # server
    ib_write_bw -d mlx5_3 -F --report_gbits -D 2 [-p PORT] ... SERVER                 # client

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import socket
import sys

from nodecert_simhw import multinode
from nodecert_simhw.ib import hca_ports
from nodecert_simhw.state import jitter, load_hw, take_options

DEFAULT_PORT = 18515
SERVER_WAIT_S = 60.0
_RULE = "-" * 87


def _args(argv):
    opts = {"-d": None, "-p": str(DEFAULT_PORT), "-q": "1", "-s": "65536", "-D": None}
    flags, server = set(), None
    for a in take_options(argv, opts):
        if a.startswith("--use_cuda="):
            opts["cuda"] = a.split("=", 1)[1]
        elif a.startswith("-"):
            flags.add(a)
        else:
            server = a
    return opts, flags, server


def _header(dev, qps, layer, cuda):
    out = []
    if cuda is not None:
        out += ["initializing CUDA", f"Picking device No. {cuda}",
                "cuMemAlloc() of a 16777216 bytes GPU buffer"]
    out += [_RULE, "                    RDMA_Write BW Test",
            f" Dual-port       : OFF\t\tDevice         : {dev}",
            f" Number of qps   : {qps}\t\tTransport type : IB",
            " Connection type : RC\t\tUsing SRQ      : OFF", " PCIe relax order: ON",
            " ibv_wr* API     : ON", " TX depth        : 128", " CQ Moderation   : 100",
            " Mtu             : 4096[B]", f" Link type       : {'Ethernet' if layer == 'Ethernet' else 'IB'}",
            " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet",
            _RULE]
    return out


def _exchange_server(port, mine):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("", port))
    srv.listen(1)
    srv.settimeout(SERVER_WAIT_S)
    try:
        conn, _ = srv.accept()
    finally:
        srv.close()
    with conn:
        conn.settimeout(10)
        theirs = json.loads(conn.makefile().readline())
        conn.sendall((json.dumps(mine) + "\n").encode())
    return theirs


def _exchange_client(server, port, mine):
    # Like perftest's client: one attempt; a server that is not listening yet is the
    # caller's to retry.
    try:
        conn = socket.create_connection((server, port), timeout=5)
    except OSError:
        return None
    with conn:
        conn.settimeout(10)
        conn.sendall((json.dumps(mine) + "\n").encode())
        return json.loads(conn.makefile().readline())


def cmd_ib_write_bw(argv):
    hw = load_hw()
    opts, flags, server = _args(argv)
    ports = {p["ca"]: p for p in hca_ports(hw)}
    dev = opts["-d"] or next(iter(sorted(ports)), None)
    if dev not in ports:
        print(f" Couldn't find device {dev}" if opts["-d"] else " No IB devices found")
        print(" Unable to find the Infiniband/RoCE device")
        return 1
    port, qps = int(opts["-p"]), int(opts["-q"])
    mine = {"gbps": multinode.rail_gbps(hw)[ports[dev]["n"]]}
    try:
        theirs = (_exchange_client(server, port, mine) if server
                  else _exchange_server(port, mine))
    except (OSError, ValueError) as exc:
        print(f" Couldn't exchange data with the peer: {exc}")
        return 1
    if theirs is None:
        print(f"Couldn't connect to {server}:{port}")
        print("Unable to open file descriptor for socket connection Unable to init the "
              "socket connection")
        return 1
    for line in _header(dev, qps, ports[dev]["layer"], opts.get("cuda")):
        print(line)
    bw = multinode.pair_gbps(mine["gbps"], theirs["gbps"])
    if bw <= 0:
        print(" Completion with error at client")
        print(" Failed status 12: wr_id 0 syndrom 0x81")
        return 1
    size = int(opts["-s"])
    peak = bw * (1 + jitter(dev, server, spread=0.003))
    avg = bw * (1 + jitter(dev, server, "avg", spread=0.003)) * 0.998
    rate = avg * 1e9 / 8 / size / 1e6
    unit = "Gb" if "--report_gbits" in flags else "MB"
    if unit == "MB":  # perftest's MB is 2^20 bytes
        peak, avg = peak * 1e9 / 8 / 2**20, avg * 1e9 / 8 / 2**20
    print(f" #bytes     #iterations    BW peak[{unit}/sec]    BW average[{unit}/sec]   "
          "MsgRate[Mpps]")
    print(f" {size:<10d} {5000:<10d}       {peak:<18.2f} {avg:<18.2f} {rate:.6f}")
    print(_RULE)
    sys.stdout.flush()
    return 0
