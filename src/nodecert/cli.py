"""The ``nodecert`` command line: thin wrappers over the library.

Exit codes (all commands): 0 success (PASS/WARN), 1 a rule or check FAILed,
2 bad input (unknown name, malformed file).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nodecert import __version__
from nodecert.compat import default_matrix
from nodecert.errors import ExitCode, NodecertError
from nodecert.gate import GateReport, evaluate
from nodecert.inventory import check_inventory
from nodecert.stacks import SUPPORTED_OS, Stack, find_stack, list_stacks
from nodecert.verdict import Verdict

F = TypeVar("F", bound=Callable[..., Any])

_COLOURS = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "red",
            Verdict.ERROR: "magenta"}


def _handle_errors(fn: F) -> F:
    """Turn a NodecertError into a clear message on stderr and its exit code."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NodecertError as exc:
            click.echo(f"error: {exc.render()}", err=True)
            sys.exit(int(exc.exit_code))
    return wrapper  # type: ignore[return-value]


def _emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def _verdict(v: Verdict) -> str:
    return click.style(f"{v!s:<5}", fg=_COLOURS[v], bold=v is not Verdict.PASS)


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON instead of text.")


def _parse_date(ctx: click.Context, param: click.Parameter, value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date like 2026-11-29") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodecert")
def main() -> None:
    """nodecert: provision, validate and certify NVIDIA GPU servers.

    \b
    Exit codes: 0 PASS/WARN, 1 FAIL, 2 bad input.
    """


# --- stack ---------------------------------------------------------------------------------

@main.group()
def stack() -> None:
    """Pinned NVIDIA stacks and the compatibility gate.

    \b
    Examples:
      nodecert stack list
      nodecert stack show r580-cuda13.0 --os ubuntu-24.04
      nodecert stack check r580-cuda13.0 --gpu H200-SXM --os ubuntu-24.04
      nodecert stack check r550-cuda12.4 --gpu B200 --json
    """


def _stack_summary(s: Stack) -> dict[str, Any]:
    return {"name": s.name, "title": s.title, "status": s.status,
            "driver_branch": s.driver_branch, "kernel_modules": s.kernel_modules,
            "components": s.components(), "os": list(s.os), "file": str(s.path)}


@stack.command("list")
@json_option
@_handle_errors
def stack_list(as_json: bool) -> None:
    """List the pinned stacks shipped in stacks/."""
    stacks = list_stacks()
    if as_json:
        _emit_json([_stack_summary(s) for s in stacks])
        return
    for s in stacks:
        click.echo(f"{s.name:<16} {s.status:<12} driver {s.driver} ({s.kernel_modules}), "
                   f"CUDA {s.cuda}, OS: {', '.join(s.os)}")
        click.echo(f"{'':<16} {s.title}")


@stack.command("show")
@click.argument("name")
@click.option("--os", "os_name", type=click.Choice(SUPPORTED_OS),
              help="Only the packages for this OS.")
@json_option
@_handle_errors
def stack_show(name: str, os_name: str | None, as_json: bool) -> None:
    """Show every pinned component and package of stack NAME.

    \b
    Example:
      nodecert stack show r570-cuda12.8 --os ubuntu-22.04
    """
    s = find_stack(name)
    oses = [os_name] if os_name else list(s.os)
    if os_name and os_name not in s.os:
        raise NodecertError(f"stack {s.name} pins no packages for {os_name}",
                            hint=f"it supports: {', '.join(s.os)}")
    if as_json:
        data = _stack_summary(s) | {
            "driver": str(s.driver),
            "framework": {"python": s.framework.python, "index_url": s.framework.index_url,
                          "pytorch": str(s.framework.pytorch) if s.framework.pytorch else None,
                          "tensorflow": s.framework.tensorflow},
            "repository": {"url": s.repository.url, "key_url": s.repository.key_url,
                           "key_fingerprint": s.repository.key_fingerprint},
            "artifacts": [a.__dict__ for a in s.artifacts],
            "packages": {o: [{"component": p.component, "name": p.name,
                              "version": str(p.version), "origin": p.origin,
                              "confirmed": p.confirmed, "sources": list(p.sources)}
                             for p in s.os[o].packages] for o in oses},
        }
        _emit_json(data)
        return
    click.echo(f"{s.name}: {s.title}  [{s.status}]")
    click.echo(f"  driver          {s.driver} (branch R{s.driver_branch}, "
               f"{s.kernel_modules} kernel modules)")
    for comp, ver in s.components().items():
        if comp != "driver":
            click.echo(f"  {comp:<15} {ver}")
    fw = s.framework
    click.echo(f"  framework       python {fw.python}"
               + (f", torch {fw.pytorch}" if fw.pytorch else "")
               + (f", tensorflow {fw.tensorflow}" if fw.tensorflow else "")
               + f" from {fw.index_url}")
    click.echo(f"  repository key  {s.repository.key_fingerprint}")
    for o in oses:
        click.echo(f"\n  {o} (NVIDIA repo: {s.os[o].os_repo})")
        for p in s.os[o].packages:
            mark = "" if p.confirmed else "  (unconfirmed)"
            click.echo(f"    {p.component:<15} {p.pin:<58} {p.origin:<6} "
                       f"[{', '.join(p.sources)}]{mark}")


def _print_gate(report: GateReport) -> None:
    m = default_matrix()
    scope = ", ".join(x for x in (report.gpu and f"GPU {report.gpu}",
                                  report.os and f"OS {report.os}") if x) or "no GPU/OS given"
    click.echo(f"stack {report.stack} ({scope}), as of {report.date}")
    for r in report.results:
        cite = f"  [{', '.join(r.sources)}]" if r.sources else ""
        click.echo(f"  {_verdict(r.verdict)} {r.rule:<34} {r.message}{cite}")
    for rule, why in report.not_evaluated:
        click.echo(f"  {'-':<5} {rule:<34} not evaluated: {why}")
    used = sorted({s for r in report.results for s in r.sources})
    if used:
        click.echo("  sources:")
        for key in used:
            src = m.sources[key]
            click.echo(f"    {key:<7} {src.title} <{src.url}>")
    click.echo(f"verdict: {_verdict(report.verdict)}")


@stack.command("check")
@click.argument("name")
@click.option("--gpu", help="GPU model to check against (e.g. H200-SXM, B200, L40S).")
@click.option("--os", "os_name", type=click.Choice(SUPPORTED_OS), help="Target OS.")
@click.option("--date", "on_date", callback=_parse_date, metavar="YYYY-MM-DD",
              help="Judge driver lifecycle as of this date (default: today).")
@json_option
@_handle_errors
def stack_check(name: str, gpu: str | None, os_name: str | None, on_date: dt.date | None,
                as_json: bool) -> None:
    """Run every compatibility rule for stack NAME and explain each verdict.

    NAME is a stack name from `nodecert stack list` or a path to a manifest.
    Exit 0 if every rule is PASS or WARN, 1 on any FAIL, 2 on bad input.

    \b
    Examples:
      nodecert stack check r580-cuda13.0 --gpu H200-SXM --os ubuntu-24.04
      nodecert stack check ./my-stack.yml --gpu B200 --json
    """
    report = evaluate(find_stack(name), gpu=gpu, os_name=os_name, today=on_date)
    if as_json:
        _emit_json(report.as_dict())
    else:
        _print_gate(report)
    sys.exit(int(ExitCode.FAILED if report.verdict >= Verdict.FAIL else ExitCode.OK))


@stack.command("gpus")
@json_option
@_handle_errors
def stack_gpus(as_json: bool) -> None:
    """List the GPU models the gate knows (names for --gpu and nodecert_gpu_model)."""
    m = default_matrix()
    if as_json:
        _emit_json([{"key": g.key, "name": g.name, "pci_device_ids": list(g.pci_device_ids),
                     "architecture": g.architecture, "nvswitch": g.nvswitch,
                     "open_modules": g.open_modules} for g in m.gpus.values()])
        return
    for g in m.gpus.values():
        click.echo(f"{g.key:<16} {g.name:<44} 10de:{'/'.join(g.pci_device_ids):<10} "
                   f"{g.architecture}{', NVSwitch' if g.nvswitch else ''}")


# --- inventory -----------------------------------------------------------------------------

@main.group()
def inventory() -> None:
    """Ansible inventories with each host's ordered hardware spec."""


@inventory.command("check")
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path),
              help="INI or YAML Ansible inventory.")
@json_option
@_handle_errors
def inventory_check(path: Path, as_json: bool) -> None:
    """Validate an inventory: hosts, order spec (nodecert_* vars), duplicates.

    Exit 0 if valid, 2 with every problem listed otherwise.

    \b
    Example:
      nodecert inventory check --inventory inventory/sample/lab.ini
    """
    report = check_inventory(path)
    if as_json:
        _emit_json(report.as_dict())
    else:
        for p in report.problems:
            click.echo(f"error: {p.render()}", err=True)
        for h in report.hosts.values():
            click.echo(f"{h.name:<16} {h.address}:{h.port}  {h.gpu_count}x {h.gpu_model}, "
                       f"{h.cpu_cores} cores, {h.ram_gb} GB RAM, {h.nvme_count} NVMe"
                       + (f", stack {h.stack}" if h.stack else ""))
        click.echo(f"{len(report.hosts)} host(s) valid, {len(report.problems)} problem(s)")
    sys.exit(int(ExitCode.OK if report.ok else ExitCode.BAD_INPUT))


# --- lab ---------------------------------------------------------------------------------

@main.group()
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
    return Lab(log=lambda m: click.echo(m, err=True))


@lab.command("up")
@click.option("--nodes", default=2, show_default=True, help="Number of hosts (h1..hN).")
@click.option("--profile", "profiles", multiple=True, default=("h200-sxm-8",), show_default=True,
              help="Hardware profile; repeat to alternate profiles across hosts "
                   "(h200-sxm-8, h100-sxm-8, a100-sxm-8, l40s-pcie-4).")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path, exists=True,
                                                          dir_okay=False),
              help="YAML fault file to inject (see README, 'Lab faults').")
@json_option
@_handle_errors
def lab_up(nodes: int, profiles: tuple[str, ...], faults_file: Path | None,
           as_json: bool) -> None:
    """Build (once) the base image and mirror, then boot NODES hosts."""
    result = _lab().up(nodes=nodes, profiles=profiles, faults_file=faults_file)
    if as_json:
        _emit_json(result)
        return
    for h in result["hosts"]:
        click.echo(f"{h['name']:<5} {h['ip']:<14} {h['profile']:<12} SIMULATED GPUs  up")
    t = result["timings"]
    click.echo(f"ready in {t['hosts_ready_s']:.1f} s (base {t['base_s']:.1f} s, "
               f"mirror {t['mirror_s']:.1f} s)")
    click.echo(f"inventory:   {result['inventory']}")
    click.echo(f"ssh config:  {result['ssh_config']}  (known_hosts checked strictly: "
               f"{result['known_hosts']})")
    click.echo(f"try:         ssh -F {result['ssh_config']} h1 lspci -nn")
    click.echo(f"             nodecert inventory check -i {result['inventory']}")


@lab.command("status")
@json_option
@_handle_errors
def lab_status(as_json: bool) -> None:
    """Show the lab's hosts, whether each is running and ssh-ready, and faults."""
    st = _lab().status()
    if as_json:
        _emit_json(st)
        return
    if not st["hosts"]:
        click.echo("the lab is down")
    for h in st["hosts"]:
        state = "ssh-ready" if h["ssh"] else ("running" if h["running"] else "STOPPED")
        click.echo(f"{h['name']:<5} {h['ip']:<14} {h['profile']:<12} {state}")
    for f in st["faults"]:
        click.echo(f"fault: {f['host']}: {f['kind']} {f['params']}")
    if st["stale_netns"]:
        click.echo(f"stale namespaces from an earlier run: {', '.join(st['stale_netns'])} "
                   "(`nodecert lab down` removes them)")
    sys.exit(int(ExitCode.OK if st["up"] or not st["hosts"] else ExitCode.FAILED))


@lab.command("reset")
@click.argument("host")
@_handle_errors
def lab_reset(host: str) -> None:
    """Make HOST pristine again: fresh filesystem, same identity and host key."""
    seconds = _lab().reset(host)
    click.echo(f"{host} reset in {seconds:.1f} s")


@lab.command("faults")
@click.argument("faults_file", required=False,
                type=click.Path(path_type=Path, exists=True, dir_okay=False))
@_handle_errors
def lab_faults(faults_file: Path | None) -> None:
    """Replace the injected faults on running hosts (none given: clear all faults)."""
    faults = _lab().apply_faults(faults_file)
    click.echo(f"{len(faults)} fault(s) active")


@lab.command("down")
@click.option("--drop-guard", is_flag=True,
              help="Also remove the blackhole guard route for the lab subnet.")
@_handle_errors
def lab_down(drop_guard: bool) -> None:
    """Stop every lab host and remove everything the lab created."""
    r = _lab().down(drop_guard=drop_guard)
    click.echo(f"lab down: {r['hosts']} host(s) stopped, {r['stale_netns']} stale namespace(s) "
               f"and {r['stale_mounts']} stale mount(s) removed")


# --- provision -----------------------------------------------------------------------------

_PROVISION_HELP = """Provision hosts with a pinned stack, then verify each one.

The compatibility gate runs first for every GPU model and OS in the inventory:
an incompatible stack stops here, before any SSH connection. Then Ansible
(playbooks/site.yml) runs on all hosts in parallel -- a failing or unreachable
host does not stop the others -- and every provisioned host is checked for
conformance (exact versions installed and held, services up, nvidia-smi reports
the pinned driver). The run is kept under runs/<timestamp>-<id>/.

Then, unless told not to, every host is validated (--suite, default quick) and
certified: a signed certificate, an HTML page and JUnit XML per node plus a
fleet index under runs/<validation run>/reports/ (the signing key is --key, or
~/.config/nodecert/keys/nodecert.key, created 0600 on first use).

\b
Exit codes: 0 every host provisioned, conformant, validated and READY, 1 a host
failed or is NOT READY (or the gate failed), 2 bad input.

\b
Examples:
  provision --inventory inventory/sample/lab.ini --stack r580-cuda13.0
  provision -i lab.ini --stack r580-cuda13.0 --suite standard --key keys/nodecert.key
  provision -i lab.ini --stack r580-cuda13.0 --no-certify
  provision -i /var/tmp/nodecert-lab/state/inventory.ini --stack r580-cuda13.0 --check
  nodecert provision -i lab.ini --stack r570-cuda12.8 --limit gpu-h200-01 --tags driver
  provision -i lab.ini --stack r580-cuda13.0 --mirror http://mirror.example/nodecert
"""


@main.command("provision", help=_PROVISION_HELP)
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path),
              help="INI or YAML Ansible inventory.")
@click.option("--stack", "stack_name", help="Stack to install (default: nodecert_stack).")
@click.option("--limit", multiple=True, help="Only these hosts (repeatable).")
@click.option("--check", "check_mode", is_flag=True, help="Dry run: change nothing.")
@click.option("--tags", multiple=True,
              help="Only these components (repo, driver, fabric_manager, cuda_toolkit, cudnn, "
                   "nccl, dcgm, framework, validators); repeatable.")
@click.option("--forks", default=10, show_default=True, help="Hosts provisioned in parallel.")
@click.option("--mirror", help="Base of an air-gapped mirror laid out like the lab's: "
                               "<mirror>/nvidia (apt) and <mirror>/simple (wheels).")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True, help="Where run artifacts are kept.")
@click.option("--no-validate", is_flag=True, help="Stop after provisioning and conformance.")
@click.option("--no-certify", is_flag=True, help="Validate but do not sign certificates.")
@click.option("--suite", default="quick", show_default=True, help="Validation suite.")
@click.option("--key", "key_path", type=click.Path(path_type=Path),
              help="Signing key (default: ~/.config/nodecert/keys/nodecert.key).")
@json_option
@_handle_errors
def provision(path: Path, stack_name: str | None, limit: tuple[str, ...], check_mode: bool,
              tags: tuple[str, ...], forks: int, mirror: str | None, runs_dir: Path,
              no_validate: bool, no_certify: bool, suite: str, key_path: Path | None,
              as_json: bool) -> None:
    from nodecert.provisioning import provision as run_provision

    limit = tuple(h for item in limit for h in item.split(",") if h)
    report = run_provision(path, stack_name, limit=limit, check=check_mode, tags=tags,
                           forks=forks, mirror=mirror, runs_dir=runs_dir,
                           progress=lambda line: click.echo(line, err=True))
    if as_json:
        _emit_json(report.as_dict())
        sys.exit(report.exit_code)
    if report.gate_failed:
        for hosts, gate in report.gates:
            click.echo(f"preflight for {', '.join(hosts)}:")
            _print_gate(gate)
        click.echo("preflight FAILED: no host was touched.", err=True)
        sys.exit(report.exit_code)
    click.echo(f"{'host':<14} {'result':<12} {'ok':>4} {'chg':>4} {'fail':>4}  detail")
    for h in report.hosts.values():
        result = h.status
        detail = h.first_error or ""
        if h.conformance is not None:
            result = "conformant" if h.conformance.ok else "NOT CONFORMANT"
            detail = "; ".join(h.conformance.problems) or (
                f"{h.conformance.checked} checks passed")
        if check_mode and h.status == "provisioned":
            result = "checked"
        click.echo(f"{h.host:<14} {result:<12} {h.ok:>4} {h.changed:>4} {h.failed:>4}  {detail}")
    click.echo(f"run: {report.run_dir}")
    if check_mode or no_validate:
        sys.exit(report.exit_code)
    from nodecert.validation import validate

    click.echo(f"validating (suite {suite}) ...", err=True)
    run = validate(path, suite=suite, limit=limit, stack=stack_name, runs_dir=runs_dir,
                   progress=lambda line: click.echo(line, err=True))
    code = max(int(report.exit_code), int(ExitCode.OK if run.verdict <= Verdict.WARN
                                          and not run.interrupted else ExitCode.FAILED))
    _print_validation(run)
    if not no_certify:
        cert = _certify(run.run_dir, key_path, None, None)
        code = max(code, int(ExitCode.OK if cert.all_ready else ExitCode.FAILED))
    sys.exit(code)


# --- validate ------------------------------------------------------------------------------

_VALIDATE_HELP = """Run the node-side checks on every host, in parallel, and record each verdict.

Each host runs its suite's checks (hardware inventory against the spec, PCIe
links, NVLink/NVSwitch topology, GPU health, Xid history, stack conformance,
storage with fio) over SSH with strict host-key checking. Progress streams per
host; every result (value, threshold and its source, evidence) lands in
runs/<timestamp>-<id>/<host>/results.json as it arrives. An unreachable host is
reported and the others go on; Ctrl-C keeps finished results and marks the
rest as not run. Results from simulated (lab) hosts are stamped SIMULATED.

\b
Exit codes: 0 every host PASS or WARN, 1 any FAIL or ERROR (or interrupted),
2 bad input (inventory, suite, threshold).

\b
Examples:
  nodecert validate -i /var/tmp/nodecert-lab/state/inventory.ini --suite quick
  nodecert validate -i lab.ini --suite standard --limit gpu-h200-01,gpu-h200-02
  nodecert validate -i lab.ini --check health.gpu --check health.xid
  nodecert validate -i lab.ini --threshold storage.seq_read_mbps_min=3000 --scratch-dir /data/tmp
"""


@main.command("validate", help=_VALIDATE_HELP)
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path),
              help="Ansible inventory with the hosts and their spec.")
@click.option("--suite", default="quick", show_default=True,
              help="quick | standard | full (validators/suites.yml).")
@click.option("--limit", multiple=True, help="Only these hosts (repeatable or comma-separated).")
@click.option("--check", "checks", multiple=True,
              help="Only these checks of the suite (repeatable).")
@click.option("--stack", "stack_name",
              help="Stack to check conformance against (default: the host's nodecert_stack).")
@click.option("--threshold", "threshold_items", multiple=True, metavar="KEY=VALUE",
              help="Override a threshold for every host (recorded as the command line's).")
@click.option("--scratch-dir", help="Directory the storage test may write to on every host "
              "(default: the host's nodecert_storage_targets, else /var/tmp/nodecert/scratch).")
@click.option("--forks", default=16, show_default=True, help="Hosts validated in parallel.")
@click.option("--host-timeout", type=click.FloatRange(min=1), metavar="SECONDS",
              help="Limit for a whole host (default: every check at its suite limit + 120 s).")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True, help="Where run directories are created.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@_handle_errors
def validate_cmd(path: Path, suite: str, limit: tuple[str, ...], checks: tuple[str, ...],
                 stack_name: str | None, threshold_items: tuple[str, ...],
                 scratch_dir: str | None, forks: int, host_timeout: float | None,
                 runs_dir: Path, as_json: bool) -> None:
    from nodecert.thresholds import parse_cli_thresholds
    from nodecert.validation import validate

    limit = tuple(h for item in limit for h in item.split(",") if h)
    run = validate(path, suite=suite, limit=limit, stack=stack_name, forks=forks,
                   runs_dir=runs_dir, cli_thresholds=parse_cli_thresholds(threshold_items),
                   scratch=scratch_dir, checks=checks, host_timeout_s=host_timeout,
                   progress=lambda line: click.echo(line, err=True))
    code = ExitCode.OK if run.verdict <= Verdict.WARN and not run.interrupted \
        else ExitCode.FAILED
    if as_json:
        _emit_json(run.summary())
        sys.exit(int(code))
    _print_validation(run)
    sys.exit(int(code))


def _print_validation(run: Any) -> None:
    click.echo(f"{'host':<14} {'verdict':<8} {'status':<12} detail")
    for name, h in sorted(run.hosts.items()):
        bad = [r for r in h.results if r.verdict.value >= Verdict.FAIL.value]
        detail = h.error or "; ".join(f"{r.check}: {r.summary}" for r in bad[:3]) or h.counts()
        sim = " SIMULATED" if h.simulated else ""
        click.echo(f"{name:<14} {h.verdict.name:<8} {h.status:<12} {detail}{sim}")
    click.echo(f"run: {run.run_dir}")


# --- keys, certify, verify -----------------------------------------------------------------

DEFAULT_KEY_DIR = Path("~/.config/nodecert/keys")

_KEYS_INIT_HELP = """Create a signing key pair: NAME.key (private, mode 0600) and NAME.pub.

ECDSA P-256 by default (what HSMs and cloud KMSs offer, so moving the key into
one later needs no rotation); Ed25519 on request. Never overwrites a key.
Give customers the .pub: it is what `nodecert verify --pubkey` trusts.

\b
Exit codes: 0 created, 2 refused (exists, bad type).

\b
Examples:
  nodecert keys init
  nodecert keys init --type ed25519 --out /etc/nodecert/keys
"""


@main.group()
def keys() -> None:
    """Signing keys for certificates."""


@keys.command("init", help=_KEYS_INIT_HELP)
@click.option("--type", "key_type", type=click.Choice(["ecdsa-p256", "ed25519"]),
              default="ecdsa-p256", show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_KEY_DIR,
              show_default=True, help="Directory for nodecert.key and nodecert.pub.")
@_handle_errors
def keys_init(key_type: str, out_dir: Path) -> None:
    from nodecert.signing import init_key

    kp = init_key(out_dir.expanduser(), key_type)
    click.echo(f"private key: {kp.private} (0600; keep it secret)")
    click.echo(f"public key:  {kp.public} (give this to whoever verifies)")
    click.echo(f"key id:      {kp.keyid}")


def _certify(run_dir: Path, key_path: Path | None, valid_days: int | None,
             out_dir: Path | None) -> Any:
    from nodecert.certify import DEFAULT_VALID_DAYS, certify
    from nodecert.signing import init_key, load_private_key

    if key_path is None:
        key_path = DEFAULT_KEY_DIR.expanduser() / "nodecert.key"
        if not key_path.exists():
            kp = init_key(key_path.parent)
            click.echo(f"created signing key {kp.private} (0600) and {kp.public}", err=True)
    run = certify(run_dir, load_private_key(key_path), out_dir=out_dir,
                  valid_days=valid_days or DEFAULT_VALID_DAYS)
    for n in run.nodes:
        sim = " (SIMULATED)" if n.simulated else ""
        why = f": {n.reasons[0]}" + (f" (+{len(n.reasons) - 1} more)" if len(n.reasons) > 1
                                     else "") if n.reasons else ""
        click.echo(f"{n.host:<14} {n.verdict}{sim}{why}")
    click.echo(f"certificates: {run.out_dir} (fleet page {run.index}, JUnit {run.junit})")
    return run


_CERTIFY_HELP = """Sign a certificate for every node of a validation run.

Per node: an in-toto Statement v1 in a DSSE envelope (NODE.intoto.dsse.json),
bound to the node's hardware identity (DMI/baseboard serials, GPU serials and
UUIDs, NIC MACs, NVMe serials) and holding the verdict, every result with its
threshold and source, the pinned stack and the software found; a self-contained
HTML page with plots (NODE.html) and JUnit XML; plus index.html and junit.xml for
the fleet. READY only if every planned check reported and none FAILed or
ERRORed; a node that is not ready still gets a signed report that says why.

\b
Exit codes: 0 every node READY, 1 a node NOT READY, 2 bad input (run dir, key).

\b
Examples:
  nodecert certify runs/20261129-101500-a1b2c3
  nodecert certify runs/20261129-101500-a1b2c3 --key /etc/nodecert/keys/nodecert.key --valid-days 30
"""


@main.command("certify", help=_CERTIFY_HELP)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--key", "key_path", type=click.Path(path_type=Path),
              help="Signing key (default: ~/.config/nodecert/keys/nodecert.key, created if "
                   "missing).")
@click.option("--valid-days", type=click.IntRange(min=1), default=90, show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Report directory (default: RUN_DIR/reports).")
@_handle_errors
def certify_cmd(run_dir: Path, key_path: Path | None, valid_days: int,
                out_dir: Path | None) -> None:
    run = _certify(run_dir, key_path, valid_days, out_dir)
    sys.exit(int(ExitCode.OK if run.all_ready else ExitCode.FAILED))


_VERIFY_HELP = """Verify a node certificate offline, and optionally against the live host.

Checks, in order: the DSSE signature against the trusted public key(s) given
with --pubkey (nothing else is trusted), the payload type and in-toto Statement
schema, the validity window, the subject digest against the certified hardware
identity, with --host the host's hardware now (read over SSH: a swapped GPU or
board fails), and the verdict. A SIMULATED certificate is refused unless
--allow-simulated. Every step is printed.

\b
Exit codes: 0 valid and READY, 1 invalid, expired, altered, for other hardware
or NOT READY, 2 bad input (unreadable report or key).

\b
Examples:
  nodecert verify gpu-h200-01.intoto.dsse.json --pubkey nodecert.pub
  nodecert verify h1.intoto.dsse.json --pubkey nodecert.pub --host h1 -i lab.ini --allow-simulated
"""


@main.command("verify", help=_VERIFY_HELP)
@click.argument("report", type=click.Path(path_type=Path))
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path), help="Trusted public key (repeatable).")
@click.option("--host", help="Also compare with this host's live hardware identity.")
@click.option("-i", "--inventory", type=click.Path(path_type=Path),
              help="Inventory to reach --host with.")
@click.option("--allow-simulated", is_flag=True,
              help="Accept a certificate of simulated hardware (lab, tests).")
@json_option
@_handle_errors
def verify_cmd(report: Path, pubkeys: tuple[Path, ...], host: str | None,
               inventory: Path | None, allow_simulated: bool, as_json: bool) -> None:
    from nodecert.verify import ReportError, live_identity, verify_report

    if host and inventory is None:
        raise ReportError("--host needs --inventory to reach the host",
                          hint=f"add -i INVENTORY (the inventory {host} is in)")
    live = live_identity(host, inventory) if host and inventory else None
    v = verify_report(report, list(pubkeys), allow_simulated=allow_simulated,
                      live_identity=live)
    if as_json:
        _emit_json({"report": str(report), "valid": v.ok,
                    "steps": [{"step": n, "ok": ok, "detail": d} for n, ok, d in v.steps]})
        sys.exit(int(v.exit_code))
    for name, ok, detail in v.steps:
        mark = click.style("ok  ", fg="green") if ok else click.style("FAIL", fg="red",
                                                                          bold=True)
        click.echo(f"{mark} {name:<14} {detail}")
    click.echo("VALID: the certificate holds and the node is READY" if v.ok else
               "NOT VALID: see the failed step(s) above")
    sys.exit(int(v.exit_code))


# --- revalidate, history -------------------------------------------------------------------

_REVALIDATE_HELP = """Validate again and compare each node with its certified baseline.

The baseline (--baseline: a reports directory of certificates, or a run
directory; default the newest runs/*/reports) is verified with the trusted keys
first (--pubkey, and the public half of --key). Each node then gets, in its new
results: drift.identity (a swapped GPU/board/NIC/drive), drift.stack (any pinned
package changed or no longer held, driver, kernel module, framework), one
drift.perf.<metric> per figure both runs measured (down more than 10%, or the
soak peak more than 5 C up, fails: drift.* thresholds), drift.health (new
hardware Xids or ECC errors). The new run is certified.

\b
Exit codes: 0 no regression and every node READY, 1 a regression, drift or NOT
READY node, 2 bad input (inventory, baseline that does not verify, key).

\b
Examples:
  nodecert revalidate -i lab.ini
  nodecert revalidate -i lab.ini --baseline runs/20261129-101500-a1b2c3/reports --suite standard
  nodecert revalidate -i lab.ini --key /etc/nodecert/keys/nodecert.key --pubkey old-signer.pub
"""


@main.command("revalidate", help=_REVALIDATE_HELP)
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path))
@click.option("--baseline", type=click.Path(path_type=Path),
              help="Reports or run directory to compare with (default: newest under "
                   "--runs-dir).")
@click.option("--suite", default="quick", show_default=True)
@click.option("--limit", multiple=True, help="Only these hosts (repeatable or comma-separated).")
@click.option("--check", "checks", multiple=True,
              help="Only these checks of the suite (repeatable).")
@click.option("--stack", "stack_name", help="Stack to check conformance against.")
@click.option("--threshold", "threshold_items", multiple=True, metavar="KEY=VALUE",
              help="Override a threshold (drift.perf_drop_max=0.05, ...).")
@click.option("--key", "key_path", type=click.Path(path_type=Path),
              help="Signing key (default: ~/.config/nodecert/keys/nodecert.key).")
@click.option("--pubkey", "pubkeys", multiple=True, type=click.Path(path_type=Path),
              help="Also trust this signer for the baseline (repeatable).")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True)
@_handle_errors
def revalidate_cmd(path: Path, baseline: Path | None, suite: str, limit: tuple[str, ...],
                   checks: tuple[str, ...], stack_name: str | None,
                   threshold_items: tuple[str, ...], key_path: Path | None,
                   pubkeys: tuple[Path, ...], runs_dir: Path) -> None:
    from nodecert.revalidate import revalidate
    from nodecert.signing import load_private_key, load_public_key
    from nodecert.thresholds import parse_cli_thresholds

    key_path = key_path or DEFAULT_KEY_DIR.expanduser() / "nodecert.key"
    key = load_private_key(key_path)
    trusted = [key.public_key(), *(load_public_key(p) for p in pubkeys)]
    limit = tuple(h for item in limit for h in item.split(",") if h)
    rv = revalidate(path, key=key, trusted=trusted, baseline=baseline, suite=suite,
                    runs_dir=runs_dir, limit=limit, stack=stack_name, checks=checks,
                    cli_thresholds=parse_cli_thresholds(threshold_items),
                    progress=lambda line: click.echo(line, err=True))
    click.echo(f"baseline: {rv.baseline or '(none found)'}")
    for host, results in sorted(rv.drift.items()):
        for r in results:
            click.echo(f"{host:<14} {_verdict(r.verdict)} {r.check:<34} {r.summary}")
    assert rv.cert is not None
    for n in rv.cert.nodes:
        click.echo(f"{n.host:<14} {n.verdict}{' (SIMULATED)' if n.simulated else ''}")
    click.echo(f"run: {rv.run.run_dir}\ncertificates: {rv.cert.out_dir}")
    sys.exit(int(ExitCode.FAILED if rv.regressed or not rv.cert.all_ready else ExitCode.OK))


_HISTORY_HELP = """A node's validation history: every run under --runs-dir, oldest first.

One line per run: when, suite, verdict, failing checks, and the key figures
(GEMM TFLOPS of the slowest GPU, all-reduce busbw, soak peak, storage read).

\b
Exit codes: 0 shown, 2 no run holds this host.

\b
Examples:
  nodecert history h1
  nodecert history gpu-h200-01 --runs-dir /srv/nodecert/runs --json
"""


@main.command("history", help=_HISTORY_HELP)
@click.argument("host")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"),
              show_default=True)
@json_option
@_handle_errors
def history_cmd(host: str, runs_dir: Path, as_json: bool) -> None:
    from nodecert.history import history

    rows = history(runs_dir, host)
    if as_json:
        _emit_json(rows)
        return
    click.echo(f"{'when':<20} {'run':<24} {'suite':<9} {'verdict':<8} figures / failing")
    for r in rows:
        figs = " ".join(f"{k}={v}" for k, v in r["figures"].items())
        bad = "; ".join(r["failing"][:3])
        click.echo(f"{r['when']:<20} {r['run_id']:<24} {r['suite']:<9} {r['verdict']:<8} "
                   f"{figs}{'  ' + bad if bad else ''}")


def provision_main() -> None:
    """Entry point of the `provision` console script (same as `nodecert provision`)."""
    provision(prog_name="provision")
