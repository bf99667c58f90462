"""The ``nodecert`` command line: thin wrappers over the library, one module per group.

Exit codes (all commands): 0 success (PASS/WARN), 1 a rule or check FAILed,
2 bad input (unknown name, malformed file).
"""

from __future__ import annotations

from pathlib import Path

import click

from nodecert import __version__
from nodecert.cli.certs import certify_cmd, revoke_cmd, verify_cmd
from nodecert.cli.cluster import cluster
from nodecert.cli.common import echo, handle_errors
from nodecert.cli.firmware import firmware
from nodecert.cli.fleet import fleet
from nodecert.cli.handover import handover_cmd, verify_bundle_cmd
from nodecert.cli.inventory import inventory
from nodecert.cli.lab import lab
from nodecert.cli.mirror import mirror
from nodecert.cli.parse import parse_cmd
from nodecert.cli.provenance import provenance
from nodecert.cli.provision import provision
from nodecert.cli.rack import rack
from nodecert.cli.revalidate import history_cmd, revalidate_cmd
from nodecert.cli.runs import runs
from nodecert.cli.signers import cosign_cmd, keys
from nodecert.cli.stack import stack
from nodecert.cli.validate import validate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=True)
@click.option("--version", "show_version", is_flag=True,
              help="Show the version and exit (with --verbose: what it is made of).")
@click.option("--verbose", is_flag=True,
              help="With --version: the Python, the install, its dependencies, the SBOM.")
@click.pass_context
def main(ctx: click.Context, show_version: bool, verbose: bool) -> None:
    """nodecert: provision, validate and certify NVIDIA GPU servers.

    \b
    Exit codes: 0 PASS/WARN, 1 FAIL, 2 bad input.
    """
    if show_version:
        echo(f"nodecert, version {__version__}")
        if verbose:
            from nodecert.certs.release import version_details

            for line in version_details():
                echo(line)
        ctx.exit(0)
    if ctx.invoked_subcommand is None:
        echo(ctx.get_help())
        ctx.exit(2)


@main.command("init")
@click.argument("directory", type=click.Path(path_type=Path))
@handle_errors
def init_cmd(directory: Path) -> None:
    """Create a site project in DIRECTORY: an inventory directory with the order spec
    commented, keys/ (0700), runs/ and a README with the commands.

    \b
    Example:
      nodecert init ~/sites/acme-h200 && cd ~/sites/acme-h200
    """
    from nodecert.inventory.scaffold import init_project

    init_project(directory)
    echo(f"created {directory}: edit inventory/hosts.ini and "
         "inventory/group_vars/all/nodecert.yml, then read README.txt")


for _command in (stack, inventory, lab, provision, validate_cmd, keys, certify_cmd, verify_cmd,
                 revoke_cmd, cosign_cmd, handover_cmd, verify_bundle_cmd,
                 revalidate_cmd, history_cmd, mirror, cluster, rack, firmware, fleet, parse_cmd,
                 provenance, runs):
    main.add_command(_command)


def provision_main() -> None:
    """Entry point of the `provision` console script (same as `nodecert provision`)."""
    provision(prog_name="provision")


__all__ = ["main", "provision", "provision_main"]
