"""An emulated fleet for scale tests: N nodes served over real SSH by one process.

In the spirit of Kubernetes' kwok: no node is started, yet the controller sees N
SSH servers, each at its own loopback address (127.42.0.0/16, port 2222) with its
own host key listed in a known_hosts file, accepting one client key. Each answers
the three things `nodecert validate` asks of a node -- install the node code (the
bundle is read to its end and checked to be gzip), the provisioned stack record,
and `python3 -m nodecert_node run` -- with recorded results at a realistic pace.

The results are a real H200's (hardware.inventory, hardware.pcie, health.gpu,
health.xid: recorded by nodecert's own runner, fleetdata/h200-results.jsonl) and a
real lab host's conformance facts (judged on the control side for real); the checks
with no recording answer PASS "emulated" (hardware.topology among them: its recording
predates a fix and ERRORed on the VM's empty NVLink output). Every result is stamped
SIMULATED. Nodes may be slow (four times the pace), failing (health.gpu FAIL),
dropped (the TCP connection aborted halfway) or unreachable (nothing listens at its
address). The load checks (burn-in, copy bandwidth, soak) answer seeded figures
(fleetfigures): every node spread as a real fleet is, and weak, wearing and repaired
nodes as their kind says.

Only loopback addresses are ever bound (127.NET.0.0/16, NET 42 unless told), or with
--listen one address of the network namespace the emulator is started in (a lab's own:
every node on its own port there, for controllers in the lab's hosts); the process writes
its keys, known_hosts and an inventory into a directory of its own and prints `ready N`
when all listen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from nodecert.lab.fleetfigures import FIGURE_KINDS, NodeFigures
from nodecert.validation.run import ensure_open_files

DATA = Path(__file__).with_name("fleetdata")
PORT = 2222
STACK = "r580-cuda13.0"
KINDS = ("ok", "slow", "failing", "dropped", "unreachable", *FIGURE_KINDS)
# A node's own time for the checks that have no recording: what they take on a lab host
# in the quick suite (three 3 s fio jobs; dpkg/apt queries; one nvidia-ctk call).
PACE_S = {"hardware.topology": 0.2, "storage.fio": 10.0, "stack.conformance": 1.5,
          "container.gpu_smoke": 0.8, "net.ib": 0.2, "net.roce": 0.2, "power.limit": 0.3}
SLOW_FACTOR = 4.0


def address(i: int, net: int = 42) -> str:
    """Node i's loopback address: 127.NET.x.y with y in 1..250 (never .0 or .255)."""
    if not 0 <= i < 250 * 256:
        raise ValueError(f"an emulated fleet holds at most {250 * 256} nodes, not {i + 1}")
    if not 1 <= net <= 254:
        raise ValueError(f"127.{net}.0.0/16 is not a loopback range the emulator uses")
    return f"127.{net}.{i // 250}.{i % 250 + 1}"


@dataclass(frozen=True)
class FleetSpec:
    nodes: int
    slow: int = 0
    failing: int = 0
    dropped: int = 0
    unreachable: int = 0
    weak: int = 0  # load figures 5% below the fleet's, above every floor (fleetfigures)
    wearing: int = 0  # worse at every run it serves
    repaired: int = 0  # passes at rest, fails under load
    time_scale: float = 1.0  # multiplies every check's pace (0.1: ten times faster)
    seed: int = 0
    net: int = 42  # the second octet: nodes listen on 127.NET.0.0/16
    port: int = PORT
    # Instead: every node at this one address, node i on port `port + i` (an address the
    # emulator's network namespace holds, for controllers in other namespaces)
    listen: str | None = None

    def endpoint(self, i: int) -> tuple[str, int]:
        """Node i's address and port."""
        if self.listen is None:
            return address(i, self.net), self.port
        if not 1024 <= self.port <= 65535 - self.nodes:
            raise ValueError(f"ports {self.port}..{self.port + self.nodes - 1} are not free "
                             "for an emulated fleet: pick another --port")
        return self.listen, self.port + i

    def kinds(self) -> list[str]:
        """Each node's kind, the faulty ones spread over the fleet by the seed."""
        counts = {"slow": self.slow, "failing": self.failing, "dropped": self.dropped,
                  "unreachable": self.unreachable, "weak": self.weak, "wearing": self.wearing,
                  "repaired": self.repaired}
        faulty = sum(counts.values())
        if faulty > self.nodes or self.nodes < 1:
            raise ValueError(f"{faulty} faulty nodes do not fit in a fleet of {self.nodes}")
        kinds = [k for k, n in counts.items() for _ in range(n)]
        kinds += ["ok"] * (self.nodes - len(kinds))
        random.Random(self.seed).shuffle(kinds)
        return kinds


def recorded_results() -> dict[str, dict[str, Any]]:
    """check -> the recorded result (a nodecert Result as a dict)."""
    out: dict[str, dict[str, Any]] = {}
    for line in (DATA / "h200-results.jsonl").read_text().splitlines():
        res = json.loads(line)["result"]
        out[str(res["check"])] = res
    out["stack.conformance"] = {
        "schema": "nodecert.result/v1", "check": "stack.conformance", "verdict": "ERROR",
        "summary": "gathered; awaiting the control-side judge", "fault_code": "NC-NOT-JUDGED",
        "facts": {"conformance_output": (DATA / f"conformance-{STACK}.txt").read_text(),
                  "stack": STACK}}
    # What the conformance output's driver is; no container toolkit or runc installed.
    out["stack.advisories"] = {
        "schema": "nodecert.result/v1", "check": "stack.advisories", "verdict": "ERROR",
        "summary": "gathered; awaiting the control-side judge", "fault_code": "NC-NOT-JUDGED",
        "facts": {"installed": {"driver": _driver(out["stack.conformance"]["facts"][
            "conformance_output"]), "container_toolkit": None, "runc": None}}}
    return out


def _driver(conformance_output: str) -> str:
    lines = conformance_output.splitlines()
    return lines[lines.index("##smi") + 1].strip()


def node_result(check: str, kind: str, recorded: dict[str, dict[str, Any]],
                duration: float, *, figures: NodeFigures | None = None,
                run: int = 1, load: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an emulated node of `kind` answers for `check` at its `run`-th run (always
    SIMULATED); with `figures`, the load checks carry the node's seeded figures."""
    base = recorded.get(check) or {
        "schema": "nodecert.result/v1", "check": check, "verdict": "PASS",
        "summary": "emulated node: no recording of this check, answered PASS"}
    if figures is not None:
        base = figures.result(check, run, base, load)
    res = dict(base, simulated=True, duration_s=round(duration, 3))
    if kind == "failing" and check == "health.gpu":
        res.update(verdict="FAIL", summary="emulated fault: GPU 0 fell off the bus (Xid 79)",
                   fault_code="NC-EMULATED-FAULT", remediation="An emulated node: no action.")
    return res


class EmulatedNode:
    def __init__(self, index: int, kind: str, spec: FleetSpec,
                 recorded: dict[str, dict[str, Any]]) -> None:
        self.name = f"n{index:05d}"
        self.address, self.port = spec.endpoint(index)
        self.kind = kind
        self.spec = spec
        self.recorded = recorded
        self.rng = random.Random(f"{spec.seed}-{index}")
        self.key = asyncssh.generate_private_key("ssh-ed25519")
        self.installed = False
        self.figures = NodeFigures(index, kind if kind in FIGURE_KINDS else "ok", spec.seed)
        self.runs = 0  # validation runs served: a wearing node gets worse with each

    def pace(self, check: str) -> float:
        recorded = self.recorded.get(check, {}).get("duration_s")
        base = float(recorded) if recorded is not None else PACE_S.get(check, 0.5)
        slow = SLOW_FACTOR if self.kind == "slow" else 1.0
        return base * slow * self.spec.time_scale * self.rng.uniform(0.9, 1.1)

    async def session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        try:
            if "-m nodecert_node run" in command:
                await self.run(process)
            elif command.startswith("head -c 65536 /etc/nodecert/provisioned.json"):
                process.stdout.write(json.dumps({"stack": STACK}).encode())
                process.exit(0)
            elif "sha256sum" in command and "tar " in command:
                data = await process.stdin.read()
                if data[:2] != b"\x1f\x8b":
                    process.stderr.write(b"tar: not a gzip bundle\n")
                    process.exit(2)
                    return
                process.stdout.write(b"" if self.installed else b"installed\nrelinked\n")
                self.installed = True
                process.exit(0)
            else:
                process.stderr.write(b"emulated node: command not emulated\n")
                process.exit(127)
        except (asyncssh.Error, OSError, ConnectionError):
            process.close()  # the controller hung up: nothing to answer

    async def run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        plan = json.loads(await process.stdin.readline())
        checks = [str(c) for c in plan["checks"]]
        load = (plan.get("options") or {}).get("load") or {}
        self.runs += 1

        def send(ev: dict[str, Any]) -> None:
            process.stdout.write((json.dumps(ev) + "\n").encode())

        send({"event": "hello", "version": "0.1.0", "python": "3.11.2", "host": self.name,
              "simulated": True, "checks": checks})
        for i, check in enumerate(checks):
            if self.kind == "dropped" and i == len(checks) // 2:
                conn = process.get_extra_info("connection")
                conn.abort()  # the node vanished: no FIN, no exit status
                return
            send({"event": "start", "check": check, "t": time.time()})
            took = self.pace(check)
            await asyncio.sleep(took)
            send({"event": "result", "result": node_result(check, self.kind, self.recorded,
                                                            took, figures=self.figures,
                                                            run=self.runs, load=load)})
        send({"event": "done"})
        process.exit(0)


def write_inventory(out: Path, nodes: list[EmulatedNode], port: int,
                    seen_as: Path | None = None) -> None:
    """The fleet's inventory in `out`; its key and known_hosts named as the controllers
    see `out` (`seen_as`: on shared storage mounted elsewhere)."""
    where = seen_as or out
    lines = ["# An emulated fleet (nodecert.lab.fleet): every node SIMULATED.", "[fleet]"]
    lines += [f"{n.name} ansible_host={n.address}"
              + (f" ansible_port={n.port}" if n.port != port else "") for n in nodes]
    lines += ["", "[fleet:vars]", f"ansible_port={port}", "ansible_user=root",
              f"ansible_ssh_private_key_file={where / 'client_key'}",
              f"ansible_ssh_common_args='-o UserKnownHostsFile={where / 'known_hosts'} "
              "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes'",
              "ansible_python_interpreter=/usr/bin/python3",
              "# The order the recorded node was: one H200 in a VM, 16 vCPUs, 128 GB.",
              "nodecert_gpu_model=H200-SXM",
              "nodecert_gpu_count=1", "nodecert_cpu_cores=16", "nodecert_ram_gb=128",
              "nodecert_nvme_count=0", "nodecert_os=debian-12", "nodecert_simulated=true", ""]
    (out / "inventory.ini").write_text("\n".join(lines))


async def serve(spec: FleetSpec, out: Path,
                seen_as: Path | None = None) -> list[asyncssh.SSHAcceptor]:
    """Write keys, known_hosts and inventory into `out`, then listen for every node."""
    out.mkdir(parents=True, exist_ok=True)
    ensure_open_files(4 * spec.nodes + 256)
    client = asyncssh.generate_private_key("ssh-ed25519")
    fd = os.open(out / "client_key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(client.export_private_key("openssh"))
    authorized = asyncssh.import_authorized_keys(
        client.export_public_key("openssh").decode())
    recorded = recorded_results()
    nodes = [EmulatedNode(i, kind, spec, recorded) for i, kind in enumerate(spec.kinds())]
    known = [f"[{n.address}]:{n.port} {n.key.export_public_key('openssh').decode().strip()}"
             for n in nodes]
    (out / "known_hosts").write_text("\n".join(known) + "\n")
    write_inventory(out, nodes, spec.port, seen_as)
    (out / "kinds.json").write_text(json.dumps({n.name: n.kind for n in nodes}, indent=0))
    acceptors = []
    for n in nodes:
        if n.kind == "unreachable":
            continue
        acceptors.append(await asyncssh.listen(
            n.address, n.port, server_host_keys=[n.key], authorized_client_keys=authorized,
            process_factory=n.session, encoding=None, reuse_address=True, backlog=128,
            keepalive_interval=0, login_timeout=120))  # OpenSSH's LoginGraceTime
    return acceptors


async def _main(spec: FleetSpec, out: Path, seen_as: Path | None) -> None:
    acceptors = await serve(spec, out, seen_as)
    print(f"ready {len(acceptors)}", flush=True)
    # Served until the parent closes our standard input (or kills us).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for a in acceptors:
        a.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m nodecert.lab.fleet",
                                 description="Serve an emulated fleet on loopback until "
                                             "standard input closes.")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--dir", type=Path, required=True, help="where keys and inventory go")
    for kind in KINDS[1:]:
        ap.add_argument(f"--{kind}", type=int, default=0, help=f"{kind} nodes")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--net", type=int, default=42, help="listen on 127.NET.0.0/16")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--listen", metavar="ADDRESS",
                    help="every node at this address (one its network namespace holds), "
                         "node i on port --port + i, instead of 127.NET.x.y")
    ap.add_argument("--seen-as", type=Path, metavar="DIR",
                    help="--dir as the controllers see it (shared storage mounted elsewhere)")
    a = ap.parse_args(argv)
    spec = FleetSpec(a.nodes, a.slow, a.failing, a.dropped, a.unreachable, a.weak, a.wearing,
                     a.repaired, a.time_scale, a.seed, a.net, a.port, a.listen)
    asyncio.run(_main(spec, a.dir, a.seen_as))


if __name__ == "__main__":
    main()


__all__ = ["KINDS", "PORT", "STACK", "EmulatedNode", "FleetSpec", "address", "node_result",
           "recorded_results", "serve"]
