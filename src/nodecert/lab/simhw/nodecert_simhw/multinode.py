"""What a lab host's fabric delivers to other hosts, and how the ranks of a multi-node
run meet: the lab-wide fabric model.

Each rail (HCA n) moves data at its port's rate (after width/speed faults; nothing when
the port is down or the HCA gone) times its rail_slow and node_fabric_slow factors.
A run over several hosts is as fast as its slowest rail: NCCL spreads its channels
evenly over the rails, so every channel waits for the slowest one, and a channel whose
HCA is gone shares another rail (half of it).

The ranks of a run (one process per host, started by mpirun or srun) find each other
the way NCCL's bootstrap does when NCCL_COMM_ID=<host>:<port> is set: rank 0 listens
there, the others connect (retrying while it is not up yet), each says what its host
delivers, and rank 0 answers when the run is over.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import os
import socket
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.ib import hca_ports

# Share of the line rate that data moves at: perftest's RDMA write on a healthy NDR link
# (~97%), NCCL's per-NIC bus bandwidth (46-48 GB/s of 50 GB/s at 400 Gb/s, ~94%).
PERFTEST_EFFICIENCY = 0.97
NCCL_EFFICIENCY = 0.94
BOOTSTRAP_TIMEOUT_S = 120.0


def rail_gbps(hw):
    """Gb/s each expected rail of this host moves (0 for a port down or an HCA gone)."""
    h = hw["profile"].get("hcas") or {}
    ports = {p["n"]: p for p in hca_ports(hw)}
    faults = Faults(hw)
    out = []
    for n in range(int(h.get("count", 0))):
        p = ports.get(n)
        up = p is not None and p["state"] == "Active"
        out.append(float(p["rate"]) * faults.rail_factor(n) if up else 0.0)
    return out


def channel_gbs(rails):
    """GB/s of the slowest NCCL channel of a host with these rails (Gb/s each)."""
    active = [r for r in rails if r > 0]
    if not active:
        return 0.0
    slowest = min(active) / 8 * NCCL_EFFICIENCY
    return slowest / 2 if len(active) < len(rails) else slowest


def world():
    """(rank, size) the launcher gave this process: OpenMPI's or Slurm's variables."""
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def _address(comm_id):
    host, _, port = comm_id.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(comm_id)
    return host.strip("[]"), int(port)


def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def _recv(sock):
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("peer closed the bootstrap connection")
        data += chunk
    return json.loads(data)


class Bootstrap:
    """Rank 0 gathers every rank's description; the others wait for rank 0's end."""

    def __init__(self, comm_id, rank, size):
        self.addr = _address(comm_id)
        self.rank, self.size = rank, size
        self.peers = []  # rank 0: the other ranks' sockets
        self.peer_ranks = []  # rank 0: the rank behind each of them

    def gather(self, mine):
        """Rank 0: every rank's description in rank order. Others: None, once sent."""
        if self.rank == 0:
            srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", self.addr[1]))
            srv.listen(self.size)
            srv.settimeout(BOOTSTRAP_TIMEOUT_S)
            infos = {0: dict(mine, addr=self.addr[0])}
            try:
                while len(infos) < self.size:
                    conn, _ = srv.accept()
                    conn.settimeout(None)
                    info = _recv(conn)
                    infos[int(info["rank"])] = info
                    self.peers.append(conn)
                    self.peer_ranks.append(int(info["rank"]))
            except OSError as exc:  # socket.timeout is no TimeoutError before 3.10
                raise TimeoutError(f"bootstrap: {self.size - len(infos)} of {self.size} "
                                   f"ranks never connected to {self.addr[0]}:{self.addr[1]}"
                                   f" ({exc})") from exc
            finally:
                srv.close()
            return [infos[r] for r in range(self.size)]
        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_S
        while True:
            try:
                sock = socket.create_connection(self.addr, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bootstrap: rank 0 at {self.addr[0]}:{self.addr[1]} "
                                       "never answered") from None
                time.sleep(0.1)  # NCCL retries a refused bootstrap connection likewise
        sock.settimeout(None)
        # the address this rank reaches the others from (NCCL's peers name it so)
        _send(sock, dict(mine, rank=self.rank, addr=sock.getsockname()[0]))
        self.peers = [sock]
        return None

    def finish(self, rc=0, say=None):
        """Rank 0 tells everyone the run is over (and, in `say`, rank -> the lines that
        rank's process logs of it: what it alone would see, a port of its own failing);
        others wait for it and print theirs. The exit code."""
        if self.rank == 0:
            for k, conn in enumerate(self.peers):
                try:
                    _send(conn, {"rc": rc, "say": (say or {}).get(self.peer_ranks[k], [])})
                finally:
                    conn.close()
            return rc
        try:
            end = _recv(self.peers[0])
        finally:
            self.peers[0].close()
        for line in end.get("say") or []:
            print(line)
        return int(end.get("rc", 0))


def pair_gbps(mine, theirs):
    """What perftest measures between two rails (Gb/s each)."""
    return min(mine, theirs) * PERFTEST_EFFICIENCY
