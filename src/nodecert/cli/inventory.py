"""nodecert inventory: check an inventory and its order spec."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli.common import echo, emit_json, handle_errors, inventory_option, json_option
from nodecert.core.errors import ExitCode
from nodecert.inventory.reader import check_inventory


@click.group()
def inventory() -> None:
    """Ansible inventories with each host's ordered hardware spec."""


@inventory.command("check")
@inventory_option
@json_option
@handle_errors
def inventory_check(path: Path, as_json: bool) -> None:
    """Validate an inventory: hosts, order spec (nodecert_* vars), duplicates.

    Exit 0 if valid, 2 with every problem listed otherwise.

    \b
    Example:
      nodecert inventory check --inventory inventory/sample/lab.ini
    """
    report = check_inventory(path)
    if as_json:
        emit_json(report.as_dict())
    else:
        for p in report.problems:
            echo(f"error: {p.render()}", err=True)
        for h in report.hosts.values():
            echo(f"{h.name:<16} {h.address}:{h.port}  {h.gpu_count}x {h.gpu_model}, "
                       f"{h.cpu_cores} cores, {h.ram_gb} GB RAM, {h.nvme_count} NVMe"
                       + (f", stack {h.stack}" if h.stack else ""))
        echo(f"{len(report.hosts)} host(s) valid, {len(report.problems)} problem(s)")
    sys.exit(int(ExitCode.OK if report.ok else ExitCode.BAD_INPUT))
