"""nodecert lab: the built-in lab of SSH hosts with simulated GPUs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from nodecert.cli.common import echo, emit_json, handle_errors, json_option
from nodecert.core.errors import ExitCode


@click.group()
def lab() -> None:
    """The built-in lab: SSH hosts with real systemd/apt and SIMULATED GPUs.

    Hosts are systemd-nspawn containers on a private bridge (10.78.0.0/24 by
    default, NODECERT_LAB_SUBNET to change), in network namespaces with no
    default route and no DNS. Needs root and: systemd-container mmdebstrap
    iproute2 openssh-client dpkg apt-utils.

    \b
    Examples:
      nodecert lab up --nodes 2 --profile h200-sxm-8
      nodecert lab up --nodes 4 --profile h200-sxm-8 --profile l40s-pcie-4 --faults f.yml
      ssh -F /var/tmp/nodecert-lab/state/ssh_config h1 nvidia-smi
      nodecert lab faults f.yml        # change injected faults on running hosts
      nodecert lab reset h1
      nodecert lab down
    """


def _lab() -> Any:
    from nodecert.lab.hosts import Lab  # imported lazily: only lab commands need it
    return Lab(log=lambda m: echo(m, err=True))


@lab.command("up")
@click.option("--nodes", default=2, show_default=True, help="Number of hosts (h1..hN).")
@click.option("--profile", "profiles", multiple=True,
              help="Hardware profile; repeat to alternate profiles across hosts "
                   "(h200-sxm-8, h100-sxm-8, a100-sxm-8, l40s-pcie-4, b200-hgx-8, "
                   "gb200-nvl-4, gb300-nvl-4).  [default: h200-sxm-8; gb200-nvl-4 with "
                   "--rack]")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path, exists=True,
                                                          dir_okay=False),
              help="YAML fault file to inject (see README, 'Lab faults').")
@click.option("--cluster", "as_cluster", is_flag=True,
              help="Run the hosts as a cluster: real Slurm (munge, slurmctld on h1, slurmd on "
                   "every host) and host-to-host SSH for mpirun.")
@click.option("--controllers", is_flag=True,
              help="With --cluster: bind this machine's nodecert (its Python, virtual "
                   "environment and source) read-only into every host, so that Slurm jobs "
                   "run controller slices (validate --slice auto; docs/fleet.md).")
@click.option("--bmc", "with_bmc", is_flag=True,
              help="Give every host a BMC on the lab bridge (.210+N): Redfish over HTTPS "
                   "(sushy-tools) and IPMI (OpenIPMI's ipmi_sim), readings SIMULATED from "
                   "the hardware model; the inventory names them (nodecert_bmc).")
@click.option("--rack", "with_rack", is_flag=True,
              help="Run the hosts as the compute trays (at most 18) of one GB200 (or, with "
                   "--profile gb300-nvl-4, GB300) NVL72 rack: "
                   "their GPUs in one NVLink clique, IMEX running, the rack's 9 switch "
                   "trays, 2 power shelves and CDU as Redfish endpoints (.190+k); the "
                   "inventory names the rack (nodecert_rack).")
@click.option("--provision/--no-provision", "provision_trays", default=None,
              help="With --rack: provision the trays with the whole stack (r580-cuda13.0, "
                   "over Ansible, as any host; about 14 minutes for 18 trays on 2 cores), "
                   "not only the driver and IMEX the rack's own checks need.  [default: "
                   "provision with --rack]")
@json_option
@handle_errors
def lab_up(nodes: int, profiles: tuple[str, ...], faults_file: Path | None,
           as_cluster: bool, controllers: bool, with_bmc: bool, with_rack: bool,
           provision_trays: bool | None, as_json: bool) -> None:
    """Build (once) the base image and mirror, then boot NODES hosts; on a running lab,
    grow or shrink it to NODES hosts (new hosts take --profile, the others run on).

    \b
    Example (a 16-host Slurm cluster):
      nodecert lab up --nodes 16 --cluster
      ssh -F /var/tmp/nodecert-lab/state/ssh_config h1 sinfo

    \b
    Example (2 hosts with BMCs, then their BMC checks):
      nodecert lab up --nodes 2 --bmc
      nodecert validate -i /var/tmp/nodecert-lab/state/inventory.ini

    \b
    Example (a full GB200 NVL72 rack, its trays provisioned with the whole stack, then
    validated as one unit; --no-provision: only the driver and IMEX, in seconds):
      nodecert lab up --nodes 18 --rack
      nodecert rack validate -i /var/tmp/nodecert-lab/state/inventory.ini
      nodecert lab up --nodes 18 --rack --profile gb300-nvl-4   # a GB300 NVL72
    """
    profiles = profiles or (("gb200-nvl-4",) if with_rack else ("h200-sxm-8",))
    if provision_trays and not with_rack:
        raise click.UsageError("--provision is for --rack (other lab hosts are provisioned "
                               "with `provision`, as the README's main job does)")
    if controllers and not as_cluster:
        raise click.UsageError("--controllers is for --cluster (Slurm runs the slices)")
    result = _lab().up(nodes=nodes, profiles=profiles, faults_file=faults_file,
                       as_cluster=as_cluster, with_bmc=with_bmc, with_rack=with_rack,
                       controllers=controllers)
    if with_rack and provision_trays is not False:
        result["provision"] = _provision_trays(Path(result["inventory"]), nodes)
    if as_json:
        emit_json(result)
        sys.exit(0 if result.get("provision", {}).get("ok", True) else 1)
    for h in result["hosts"]:
        echo(f"{h['name']:<5} {h['ip']:<14} {h['profile']:<12} SIMULATED GPUs  up")
    t = result["timings"]
    echo(lab_timing_line(t))
    echo(f"inventory:   {result['inventory']}")
    echo(f"ssh config:  {result['ssh_config']}  (known_hosts checked strictly: "
               f"{result['known_hosts']})")
    echo(f"try:         ssh -F {result['ssh_config']} h1 lspci -nn")
    echo(f"             nodecert inventory check -i {result['inventory']}")
    prov = result.get("provision")
    if prov is not None:
        echo(f"trays provisioned with the whole stack: {'yes' if prov['ok'] else 'NO'} "
             f"(run {prov['run']})")
        for host, why in sorted(prov["failed"].items()):
            echo(f"  {host}: {why}", err=True)
        if not prov["ok"]:
            sys.exit(1)


def _provision_trays(inventory: Path, trays: int) -> dict[str, Any]:
    """The rack's trays provisioned with the whole stack as any host is (the gate, the
    site play over Ansible, conformance), so that they carry what a real tray does; no
    validation (`rack validate` or `validate` is the next step)."""
    from nodecert.lab.cluster import JOB_STACK
    from nodecert.provision.run import ProvisionRequest, provision

    echo(f"provisioning the {trays} trays with {JOB_STACK} (Ansible, as any host) ...",
         err=True)
    report = provision(ProvisionRequest(inventory, JOB_STACK, forks=trays,
                                        runs_dir=inventory.parent / "provision-runs"),
                       progress=lambda line: None)
    bad = {h.host: h.first_error or "; ".join(h.conformance.problems if h.conformance
                                               else []) or h.status
           for h in report.hosts.values()
           if h.status != "provisioned" or h.conformance is None or not h.conformance.ok}
    return {"ok": not bad and not report.gate_failed, "run": str(report.run_dir),
            "failed": bad}


def lab_timing_line(t: dict[str, float]) -> str:
    """The whole `lab up` first, then its steps (the hosts' boot alone can be a second
    while building the base took minutes)."""
    return (f"ready in {t.get('total_s', t['hosts_ready_s']):.1f} s (base image "
            f"{t['base_s']:.1f} s, mirror {t['mirror_s']:.1f} s, hosts "
            f"{t['hosts_ready_s']:.1f} s)")


@lab.command("status")
@json_option
@handle_errors
def lab_status(as_json: bool) -> None:
    """Show the lab's hosts, whether each is running and ssh-ready, and faults."""
    st = _lab().status()
    if as_json:
        emit_json(st)
        return
    if not st["hosts"]:
        echo("the lab is down")
    for h in st["hosts"]:
        state = "ssh-ready" if h["ssh"] else ("running" if h["running"] else "STOPPED")
        echo(f"{h['name']:<5} {h['ip']:<14} {h['profile']:<12} {state}")
    for f in st["faults"]:
        echo(f"fault: {f['host']}: {f['kind']} {f['params']}")
    if st["stale_netns"]:
        echo(f"stale namespaces from an earlier run: {', '.join(st['stale_netns'])} "
                   "(`nodecert lab down` removes them)")
    sys.exit(int(ExitCode.OK if st["up"] or not st["hosts"] else ExitCode.FAILED))


@lab.command("reset")
@click.argument("host")
@handle_errors
def lab_reset(host: str) -> None:
    """Make HOST pristine again: fresh filesystem, same identity and host key."""
    seconds = _lab().reset(host)
    echo(f"{host} reset in {seconds:.1f} s")


@lab.command("faults")
@click.argument("faults_file", required=False,
                type=click.Path(path_type=Path, exists=True, dir_okay=False))
@handle_errors
def lab_faults(faults_file: Path | None) -> None:
    """Replace the injected faults on running hosts (none given: clear all faults)."""
    faults = _lab().apply_faults(faults_file)
    echo(f"{len(faults)} fault(s) active")


@lab.command("down")
@click.option("--drop-guard", is_flag=True,
              help="Also remove the blackhole guard route for the lab subnet.")
@handle_errors
def lab_down(drop_guard: bool) -> None:
    """Stop every lab host and remove everything the lab created."""
    r = _lab().down(drop_guard=drop_guard)
    echo(f"lab down: {r['hosts']} host(s) stopped, {r['stale_netns']} stale namespace(s) "
               f"and {r['stale_mounts']} stale mount(s) removed")
