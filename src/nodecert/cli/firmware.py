"""nodecert firmware: each host's firmware against its recipe, and updates to it through
the BMC (opt-in, never a downgrade unless asked)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli import common
from nodecert.core.errors import ExitCode
from nodecert.core.textsafe import one_line
from nodecert.firmware.apply import FirmwareRequest, FirmwareRun, run_firmware


@click.group("firmware")
def firmware() -> None:
    """Firmware below the OS: each host's BMC against its recipe (stacks/firmware/).

    \b
    Examples:
      nodecert firmware plan -i site.ini
      nodecert firmware apply -i site.ini --mirror /srv/mirror --max-parallel 4
    """


def _print(run: FirmwareRun) -> None:
    for name, h in sorted(run.hosts.items()):
        common.echo(f"{name:<14} {h.status:<11} {h.recipe}" + (f": {one_line(h.error)}"
                                                      if h.error else ""))
        for s in h.steps:
            if s.action != "current":
                common.echo(f"  {s.component:<12} {s.member.rsplit('/', 1)[-1]:<16} "
                     f"{s.current or '-':<22} -> {s.wanted:<22} {s.action}"
                     + (f" ({s.why})" if s.why else ""))
    if run.run_dir:
        common.echo(f"steps recorded in {run.run_dir}")


@firmware.command("plan")
@common.inventory_option
@common.limit_option
@click.option("--max-parallel", default=8, show_default=True, type=click.IntRange(min=1),
              help="BMCs read at a time.")
@common.json_option
@common.handle_errors
def plan_cmd(path: Path, limit: tuple[str, ...], max_parallel: int, as_json: bool) -> None:
    """Show what bringing each host to its recipe would change: per component and BMC
    member, the version running, the one wanted and the action (update, or a downgrade
    that apply makes only with --allow-downgrade). Changes nothing.

    Exit codes: 0 every host at its recipe, 1 some host behind or unreadable, 2 bad input.

    \b
    Example:
      nodecert firmware plan -i /var/tmp/nodecert-lab/state/inventory.ini --json
    """
    run = run_firmware(FirmwareRequest(path, common.split_hosts(limit), None, max_parallel))
    if as_json:
        common.emit_json(run.as_dict())
    else:
        _print(run)
    sys.exit(int(ExitCode.OK if run.ok else ExitCode.FAILED))


@firmware.command("apply")
@common.inventory_option
@common.limit_option
@click.option("--mirror", type=click.Path(path_type=Path, file_okay=False, exists=True),
              required=True, help="The mirror whose firmware/manifest.json lists the images "
                                  "(each pushed only when its sha256 matches).")
@click.option("--max-parallel", default=4, show_default=True, type=click.IntRange(min=1),
              help="Hosts updated at a time.")
@click.option("--allow-downgrade", is_flag=True,
              help="Also move components that run a newer version than the recipe back "
                   "to it (pushed with ForceUpdate).")
@click.option("--bios", is_flag=True,
              help="Also set the BIOS attributes of each host's profile "
                   "(nodecert_bios_profile): written to the pending settings, the system "
                   "reset, the attributes read back until they hold.")
@click.option("--task-timeout", "task_timeout", default=600.0, show_default=True,
              type=click.FloatRange(min=1), help="Seconds one update task may run.")
@common.runs_dir_option
@common.json_option
@common.handle_errors
def apply_cmd(path: Path, limit: tuple[str, ...], mirror: Path, max_parallel: int,
              allow_downgrade: bool, bios: bool, task_timeout: float, runs_dir: Path,
              as_json: bool) -> None:
    """Bring each host's components to its recipe through its BMC's Redfish
    UpdateService: each image from the mirror (its sha256 checked), pushed to the member
    it updates, the BMC's task followed to its end (--task-timeout), the inventory read
    again after. A stuck or failed task is the host's error with the BMC's words; the
    other hosts go on. Every step is recorded under the runs directory.

    Exit codes: 0 every host at its recipe, 1 some host not, 2 bad input.

    \b
    Examples:
      nodecert firmware apply -i site.ini --mirror /srv/mirror
      nodecert firmware apply -i site.ini --mirror /srv/mirror --limit gpu-01 \\
          --allow-downgrade
      nodecert firmware apply -i site.ini --mirror /srv/mirror --bios
    """
    run = run_firmware(FirmwareRequest(path, common.split_hosts(limit), mirror, max_parallel,
                                       allow_downgrade, task_timeout, runs_dir=runs_dir,
                                       bios=bios),
                       progress=lambda line: common.echo(line, err=True))
    if as_json:
        common.emit_json(run.as_dict())
    else:
        _print(run)
    sys.exit(int(ExitCode.OK if run.ok else ExitCode.FAILED))
