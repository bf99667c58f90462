"""What a multi-node job must deliver, the scripts its tasks run, and how its output is
read: pure functions, no SSH (the engine runs what these describe).

Expectations come from the order's fabric spec (NICs per node, their rate) times the
sourced fractions in the common profile: all_reduce_perf's out-of-place bus bandwidth
at the largest size >= cluster.busbw_per_nic_fraction_min x NICs x line rate in GB/s,
and ib_write_bw's average on every rail >= cluster.rail_bw_fraction_min x the rate.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nodecert_node.contract import Threshold
from nodecert_node.parse import ParseError, marked_sections
from nodecert_node.parse.bench import parse_nccl
from nodecert_node.parse.perftest import parse_perftest
from nodecert_node.parse.toolnotes import perftest_notes, port_failures

# What a job's first rank prints (and exits 97 with) when a port the job was given is
# already taken on its node: the job did not measure anything (ERROR), nobody is blamed.
PORT_BUSY_MARK = "=== nodecert port in use "
PORT_BUSY_RC = 97


def port_busy(output: str) -> str | None:
    """The port a job's output says was taken, or None."""
    for line in output.splitlines():
        at = line.find(PORT_BUSY_MARK)
        if at >= 0:
            port = line[at + len(PORT_BUSY_MARK):].split()[:1]
            return port[0] if port and port[0].isdigit() else "?"
    return None


RANK = 'r="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}"'
# The acceptance collectives run with NCCL's port failover off. nodecert policy: a node
# must deliver its bandwidth on every port it was sold with, and a port that fails under
# load is a fault to name, not one to ride out.
PORT_FAILOVER = 0
RAIL_MARK = "=== nodecert rail "


@dataclass(frozen=True)
class Expectation:
    busbw: Threshold  # GB/s, all_reduce_perf out-of-place at the largest size
    rail: Threshold  # Gb/s, ib_write_bw average on one rail
    devices: tuple[str, ...]  # the rails (HCA names) paired
    gpus: int
    link_layer: str
    gpudirect: bool = True  # the order has GPUDirect RDMA: NCCL must use it across nodes

    def as_dict(self) -> dict[str, Any]:
        return {"busbw": self.busbw.as_dict(), "rail": self.rail.as_dict(),
                "devices": list(self.devices), "gpus": self.gpus,
                "link_layer": self.link_layer, "gpudirect": self.gpudirect}

    def transport_problem(self, reading: Reading) -> str:
        """Why the run's transport breaks the order ('' where it does not, or where NCCL's
        output does not show it): network channels without GPUDirect RDMA."""
        if self.gpudirect and reading.gdrdma is False:
            return (f"NCCL ran over {reading.network or 'the network'} without GPUDirect "
                    "RDMA (no \"/GDRDMA\" on any \"via NET\" channel): the order has it")
        return ""


def expectation(fabric: dict[str, Any], gpus: int,
                limits: dict[str, dict[str, Any]]) -> Expectation:
    """From the order's fabric spec and the resolved thresholds of the nodes' model."""
    ports, rate = int(fabric["ports"]), float(fabric["rate_gbps"])
    nic = limits["cluster.busbw_per_nic_fraction_min"]
    rail = limits["cluster.rail_bw_fraction_min"]
    devices = tuple(fabric.get("devices") or [f"mlx5_{n}" for n in range(ports)])
    busbw = round(float(nic["value"]) * ports * rate / 8, 1)
    return Expectation(
        Threshold(busbw, ">=", "GB/s", f"fabric spec {ports} x {rate:g} Gb/s x "
                  f"cluster.busbw_per_nic_fraction_min {nic['value']} "
                  f"({nic.get('origin', 'common profile')})", str(nic.get("source", ""))),
        Threshold(round(float(rail["value"]) * rate, 1), ">=", "Gb/s",
                  f"fabric spec {rate:g} Gb/s x cluster.rail_bw_fraction_min {rail['value']}",
                  str(rail.get("source", ""))),
        devices, gpus, str(fabric["link_layer"]), bool(fabric.get("gpudirect", True)))


def prelude(first: str, port: int, extra_ports: int = 0) -> str:
    # NCCL's bootstrap meets at rank 0's node: under srun the step's first node (block
    # distribution), under mpirun the hostfile's first line. Rank 0 first makes sure
    # nothing listens on the job's ports there (a program already bound to one would
    # take or refuse the job's connections): if one does, the job stops, saying which.
    ports = " ".join(str(port + k) for k in range(extra_ports + 1))
    return (f"{RANK}; if [ -n \"${{SLURM_STEP_NODELIST:-}}\" ]; then "
            f"first=$(scontrol show hostnames \"$SLURM_STEP_NODELIST\" | head -n1); "
            f"else first={shlex.quote(first)}; fi; "
            f"if [ \"$r\" = 0 ]; then for p in {ports}; do "
            "if (exec 3<>\"/dev/tcp/$first/$p\") 2>/dev/null; then "
            f"echo \"{PORT_BUSY_MARK}$p\"; exit {PORT_BUSY_RC}; fi; done; fi; "
            f"export NCCL_COMM_ID=\"$first:{port}\" "
            # NCCL's INIT and NET lines name the transport it chose and why a run hung.
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
            # Every port is measured: NCCL 2.29+ can fail over from a port lost mid-run
            # and pass on the others (NCCL v2.29.7 release notes: on with =1). Set here,
            # it wins over a site's /etc/nccl.conf; older NCCL ignores it.
            f"NCCL_IB_RESILIENCY_PORT_FAILOVER={PORT_FAILOVER}")


def allreduce_script(first: str, port: int, gpus: int, max_bytes: str,
                     test: str = "all_reduce") -> str:
    """One nccl-tests collective over the job's nodes (all_reduce, all_gather, alltoall)."""
    return (f"{prelude(first, port)}; exec {test}_perf -b 1M -e {max_bytes} -f 2 "
            f"-g {gpus}")


def pair_script(first: str, port: int, exp: Expectation, max_bytes: str,
                gpudirect: bool) -> str:
    """Two nodes: the all-reduce, then ib_write_bw on each rail (rank 0 serves, rank 1
    measures and prints, marked per rail)."""
    lines = [prelude(first, port, len(exp.devices)),
             f"all_reduce_perf -b 1M -e {max_bytes} -f 2 -g {exp.gpus}"]
    for k, dev in enumerate(exp.devices):
        cuda = f" --use_cuda={k}" if gpudirect and len(exp.devices) == exp.gpus else ""
        args = f"-d {shlex.quote(dev)} -p {port + 1 + k} -F --report_gbits -D 2{cuda}"
        lines.append(
            f'if [ "$r" = 0 ]; then ib_write_bw {args} >/dev/null 2>&1; else '
            f"echo {shlex.quote(RAIL_MARK + dev)}; n=0; while :; do "
            f"out=$(ib_write_bw {args} \"$first\" 2>&1); rc=$?; "
            # perftest's client does not retry while the server starts: nodecert does
            "case \"$out\" in *\"Couldn't connect\"*) n=$((n+1)); "
            "[ $n -lt 50 ] && { sleep 0.2; continue; };; esac; break; done; "
            # This node lacks the device: release the server waiting on that rail (a bare
            # connection to its port), or it would still wait when the next rail starts.
            "case \"$out\" in *\"Couldn't find device\"*|*\"No IB devices\"*) "
            f"for i in $(seq 1 50); do (exec 3<>/dev/tcp/\"$first\"/{port + 1 + k}) "
            "2>/dev/null && break; sleep 0.2; done;; esac; "
            "printf '%s\\n' \"$out\"; echo \"=== nodecert rc $rc\"; fi")
    return "; ".join(lines)


@dataclass
class Reading:
    busbw: float | None = None  # GB/s at the largest size, out of place
    oob: int | None = None
    rails: dict[str, float | None] | None = None  # device -> Gb/s average
    problem: str = ""  # why a figure is missing
    notes: list[str] = field(default_factory=list)  # what NCCL/perftest said beside it
    network: str | None = None  # the transport NCCL used (IB, Socket, ...), where shown
    gdrdma: bool | None = None  # whether its network channels used GPUDirect RDMA
    # ports NCCL lost during the run, "host[ hca]: what" (toolnotes.port_failures)
    port_failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def read_allreduce(rank0: str, others: Iterable[str] = ()) -> Reading:
    """The collective's figures from rank 0's output (nccl-tests prints them there) and
    the ports NCCL lost from every rank's (each process logs its own). A run that ended
    in nccl-tests' own failure gives no figure, whatever rows it printed before."""
    lost: list[str] = []
    for text in (rank0, *others):
        lost += [x for x in port_failures(text) if x not in lost]
    try:
        p = parse_nccl(rank0)
    except ParseError as exc:
        return Reading(problem=f"all_reduce_perf output unreadable: {exc}",
                       port_failures=lost)
    if not p["rows"] or p["failures"]:
        why = "; ".join(p["failures"][:3]) or "no result rows (hung or killed?)"
        return Reading(problem=f"all_reduce_perf gave no figures: {why}",
                       notes=list(p["notes"]), port_failures=lost)
    last = max(p["rows"], key=lambda r: r["size"])
    return Reading(busbw=float(last["busbw"]), oob=p["oob"], notes=list(p["notes"]),
                   network=p["network"], gdrdma=p["gdrdma"], port_failures=lost)


def rail_notes(rank1: str) -> list[str]:
    """perftest's warnings on each rail (relaxed ordering off, a lower MTU, the CPU not at
    its maximum frequency), named by rail."""
    return [f"rail {dev}: {note}" for dev, part in marked_sections(rank1, RAIL_MARK).items()
            for note in perftest_notes(part)["notes"]]


def read_rails(rank1: str, devices: tuple[str, ...]) -> dict[str, float | None]:
    """Each rail's ib_write_bw average (Gb/s) at its largest size; None where unreadable."""
    parts = marked_sections(rank1, RAIL_MARK)
    out: dict[str, float | None] = {}
    for dev in devices:
        try:
            reports = parse_perftest(parts.get(dev, ""))
            rows = reports[-1]["rows"]
            out[dev] = float(max(rows, key=lambda r: r["bytes"])["avg_gbps"]) if rows else None
        except ParseError:
            out[dev] = None
    return out


__all__ = ["PORT_BUSY_MARK", "PORT_BUSY_RC", "Expectation", "Reading", "allreduce_script",
           "expectation", "pair_script", "port_busy", "rail_notes", "read_allreduce", "read_rails"]
