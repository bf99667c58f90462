"""nodecert provision: gate, Ansible, conformance, then validate and certify."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert import __version__
from nodecert.cli import common
from nodecert.cli.certs import print_certified
from nodecert.cli.stack import print_gate

_PROVISION_HELP = """Provision hosts with a pinned stack, then verify each one.

The compatibility gate runs first for every GPU model and OS in the inventory:
an incompatible stack stops here, before any SSH connection. Then Ansible
(playbooks/site.yml) runs on all hosts in parallel -- a failing or unreachable
host does not stop the others -- and every provisioned host is checked for
conformance (exact versions installed and held, services up, nvidia-smi reports
the pinned driver). The run is kept under runs/<timestamp>-<id>/.

Then, unless told not to, every host is validated with an acceptance suite
(--suite; default: standard, or lab when every host is a `nodecert lab` host,
whose simulated GPUs are accepted on the lab profile's short durations) and
certified: a signed certificate, an HTML page and JUnit XML per node plus a
fleet index under runs/<validation run>/reports/ (the signing key is --key, or
~/.config/nodecert/keys/nodecert.key, created 0600 on first use). READY only
from the acceptance run; --suite quick gives health records (HEALTHY).

\b
Exit codes: 0 every host provisioned, conformant, validated and READY (or
HEALTHY under a suite that is not an acceptance suite), 1 a host failed, is NOT
READY, or fell short of its acceptance suite (or the gate failed), 2 bad input
(an inventory mixing lab and real hosts without --suite, the lab suite on a real
host).

\b
Examples:
  provision --inventory inventory/sample/lab.ini --stack r580-cuda13.0
  provision -i lab.ini --stack r580-cuda13.0 --suite full --key keys/nodecert.key
  provision -i lab.ini --stack r580-cuda13.0 --suite quick       # health records only
  provision -i lab.ini --stack r580-cuda13.0 --no-certify
  provision -i /var/tmp/nodecert-lab/state/inventory.ini --stack r580-cuda13.0 --check
  nodecert provision -i lab.ini --stack r570-cuda12.8 --limit gpu-h200-01 --tags driver
  provision -i lab.ini --stack r580-cuda13.0 --mirror http://mirror.example/nodecert
  provision -i hall.ini --forks 100 --strategy free
  provision -i hall.ini --serial 10% --max-fail-percentage 5    # rolling re-provisioning
  provision -i lab.ini --stack r570-cuda12.8 --allow-advisory NVIDIA-DRIVER-2026-05
"""


@click.command("provision", help=_PROVISION_HELP,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
@common.inventory_option
@common.stack_option
@common.limit_option
@click.option("--check", "check_mode", is_flag=True, help="Dry run: change nothing.")
@click.option("--tags", multiple=True,
              help="Only these components (repo, driver, fabric_manager, imex, cuda_toolkit, "
                   "cudnn, nccl, dcgm, framework, validators); repeatable.")
@click.option("--forks", default=10, show_default=True, type=click.IntRange(min=1),
              help="Hosts provisioned in parallel (a large site: 50-200, as the controller's "
                   "CPU allows; docs/fleet.md).")
@click.option("--strategy", type=click.Choice(["linear", "free", "mitogen_linear",
                                                "mitogen_free"]), default="linear",
              show_default=True, help="free: every host goes through the roles at its own "
                                      "pace instead of task by task in step; mitogen_*: the "
                                      "same through Mitogen for Ansible (pip install "
                                      "'nodecert[fleet]'; fewer round trips per task).")
@click.option("--serial", metavar="N|N%",
              help="Rolling re-provisioning: hosts in batches of N (or N%% of them), batch "
                   "after batch.")
@click.option("--max-fail-percentage", type=click.IntRange(0, 100), metavar="P",
              help="With --serial: stop before the next batch when more than P%% of a "
                   "batch failed.")
# Kept so that existing command lines still run: provisioning gathers no facts any more.
@click.option("--fact-cache", type=click.Path(path_type=Path, file_okay=False), hidden=True)
@click.option("--mirror", help="Base of an air-gapped mirror laid out like the lab's: "
                               "<mirror>/nvidia (apt) and <mirror>/simple (wheels).")
@common.runs_dir_option
@click.option("--no-validate", is_flag=True, help="Stop after provisioning and conformance.")
@click.option("--no-certify", is_flag=True, help="Validate but do not sign certificates.")
@click.option("--allow-advisory", "allow_advisories", multiple=True, metavar="ID",
              help="Accept this security advisory (`nodecert stack advisories`) for every "
                   "host: the gate WARNs instead of refusing, and says so. Repeatable.")
@click.option("--suite", default=None,
              help="The validation suite (validators/suites.yml) [default: the acceptance "
                   "suite: standard, or lab for lab hosts].")
@common.signing_key_option
@common.json_option
@common.become_options
@common.handle_errors
def provision(path: Path, stack_name: str | None, limit: tuple[str, ...], check_mode: bool,
              tags: tuple[str, ...], forks: int, strategy: str, serial: str | None,
              max_fail_percentage: int | None, fact_cache: Path | None,
              mirror: str | None, runs_dir: Path,
              no_validate: bool, no_certify: bool, allow_advisories: tuple[str, ...],
              suite: str | None, key_path: Path | None,
              as_json: bool, become_file: Path | None, vault_file: Path | None) -> None:
    from nodecert.provision.chain import ChainRequest, run_chain
    from nodecert.provision.run import FleetSettings, ProvisionRequest

    if fact_cache is not None:
        common.echo("note: --fact-cache has no effect and will be removed: provisioning gathers no "
             "Ansible facts (the roles read the OS from /etc/os-release)", err=True)
    fleet = FleetSettings(strategy, serial, max_fail_percentage)
    request = ChainRequest(
        ProvisionRequest(path, stack_name, limit=common.split_hosts(limit), check=check_mode,
                         tags=tags, forks=forks, mirror=mirror, runs_dir=runs_dir,
                         become=common.become_source(become_file, vault_file), fleet=fleet,
                         allow_advisories=frozenset(allow_advisories)),
        validate=not no_validate, certify=not no_certify, suite=suite, key_path=key_path)
    res = run_chain(request, progress=lambda line: common.echo(line, err=True))
    report = res.provision
    if as_json:
        common.emit_json(report.as_dict())
        sys.exit(report.exit_code)
    if report.gate_failed:
        for hosts, gate in report.gates:
            common.echo(f"preflight for {', '.join(hosts)}:")
            print_gate(gate)
        common.echo("preflight FAILED: no host was touched.", err=True)
        sys.exit(report.exit_code)
    common.echo(f"{'host':<14} {'result':<12} {'ok':>4} {'chg':>4} {'fail':>4}  detail")
    for h in report.hosts.values():
        result = h.status
        detail = h.first_error or ""
        if h.conformance is not None:
            result = "conformant" if h.conformance.ok else "NOT CONFORMANT"
            detail = "; ".join(h.conformance.problems) or (
                f"{h.conformance.checked} checks passed")
        if check_mode and h.status == "provisioned":
            result = "checked"
        common.echo(f"{h.host:<14} {result:<12} {h.ok:>4} {h.changed:>4} {h.failed:>4}  {detail}")
    common.echo(f"run: {report.run_dir}")
    if res.validation is not None:
        common.print_validation(res.validation)
    if res.created_key is not None:
        common.echo(f"created signing key {res.created_key.private} (0600) and "
                   f"{res.created_key.public}", err=True)
    if res.certification is not None:
        print_certified(res.certification)
    sys.exit(res.exit_code)
