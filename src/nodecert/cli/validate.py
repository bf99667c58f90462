"""nodecert validate: the node-side checks on every host."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from nodecert.cli import common, liveview
from nodecert.cli.fleet import judged_run_options, read_baseline
from nodecert.cli.liveview import live_view
from nodecert.core.errors import ExitCode
from nodecert.core.verdict import Verdict

_VALIDATE_HELP = """Run the node-side checks on every host, in parallel, and record each verdict.

Each host runs its suite's checks (hardware inventory against the spec, PCIe
links, NVLink/NVSwitch topology, GPU health, Xid history, stack conformance,
storage with fio) over SSH with strict host-key checking, every host at once.
Progress streams per host on small runs; on large ones (more than 16 hosts), failures
as they happen plus a summary (a live view on a terminal); each host's lines are in
runs/<run>/<host>/progress.log. Every result (value, threshold and its source, evidence) lands in
runs/<timestamp>-<id>/<host>/results.json as it arrives. An unreachable host is
reported and the others go on; Ctrl-C keeps finished results and marks the
rest as not run. Results from simulated (lab) hosts are stamped SIMULATED.
With --baseline (a signed fleet baseline: nodecert fleet baseline), each host that
finished is also judged against its peers (fleet.peers): a figure clearly below
its fleet's median FAILs even above its absolute floor.
Only a run of an acceptance suite (standard, full; lab on `nodecert lab` hosts
only) can be certified READY; the others give health records (nodecert certify).

\b
Exit codes: 0 every host PASS or WARN, 1 any FAIL or ERROR (or interrupted),
2 bad input (inventory, suite, threshold, the lab suite on a host that is not a lab
host).

\b
Examples:
  nodecert validate -i /var/tmp/nodecert-lab/state/inventory.ini --suite quick
  nodecert validate -i /var/tmp/nodecert-lab/state/inventory.ini --suite lab
  nodecert validate -i lab.ini --suite standard --limit gpu-h200-01,gpu-h200-02
  nodecert validate -i lab.ini --only health.gpu --only health.xid
  nodecert validate -i lab.ini --suite standard --set load.burnin_s=300 --set load.soak_s=1800
  nodecert validate -i lab.ini --threshold storage.seq_read_mbps_min=3000 --scratch-dir /data/tmp
  nodecert validate -i fleet.ini --progress summary 2> validate.log   # a thousand hosts
  nodecert validate -i fleet.ini --suite standard --baseline h200.baseline.json
  nodecert validate -i cluster.ini --suite standard --runner slurm   # as Slurm jobs
  sbatch --array=1-8 --wrap "nodecert validate -i fleet.ini --slice auto --run-id $ID \\
      --runs-dir /shared/runs"          # 8 controllers, one run (docs/fleet.md)
"""


@click.command("validate", help=_VALIDATE_HELP)
@common.inventory_option
@common.suite_option
@common.limit_option
@common.checks_option
@common.stack_option
@common.threshold_option
@common.suite_file_option
@click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Change a suite setting for this run: load.burnin_s=300, "
                   "load.soak_s=1800, fabric.nccl_iters=50, storage.size_mb=2048, ... "
                   "(recorded in the run's plans and certificates).")
@click.option("--scratch-dir", help="Directory the storage test may write to on every host "
              "(default: the host's nodecert_storage_targets, else /var/lib/nodecert/scratch).")
@click.option("--forks", default=0, show_default=True, type=click.IntRange(min=0),
              help="Hosts validated at once; 0: every host of the run (SSH handshakes and "
                   "the node code's shipping are bounded on their own).")
@click.option("--progress", "progress_mode", default="auto", show_default=True,
              type=click.Choice(["auto", "lines", "summary", "live"]),
              help="lines: every host's every line; summary: failures as they happen and a "
                   "line of counts every 10 s; live: a live view (rich) on the terminal; "
                   "auto: lines up to 16 hosts, else live on a terminal, else summary. "
                   "Each host's lines are always in <run>/<host>/progress.log.")
@click.option("--host-timeout", type=click.FloatRange(min=1), metavar="SECONDS",
              help="Limit for a whole host (default: every check at its suite limit + 120 s).")
@click.option("--runner", default="ssh", show_default=True, metavar="NAME",
              help="How each host's run is started: ssh (a session per host), or slurm (a "
                   "Slurm job on each node from the cluster's launch host, run when Slurm "
                   "has the node free; needs nodecert_cluster with engine slurm).")
@common.slice_options
@judged_run_options
@common.handle_errors
def validate_cmd(path: Path, suite: str, limit: tuple[str, ...], checks: tuple[str, ...],
                 stack_name: str | None, threshold_items: tuple[str, ...],
                 suite_file: Path | None, settings: tuple[str, ...],
                 scratch_dir: str | None, forks: int, progress_mode: str,
                 host_timeout: float | None, runner: str, fleet_baseline: Path | None,
                 pubkeys: tuple[Path, ...], runs_dir: Path, as_json: bool,
                 become_file: Path | None, vault_file: Path | None,
                 slice_text: str | None = None, run_id: str | None = None) -> None:
    from nodecert.fleet.judging import add_to_run
    from nodecert.profiles.thresholds import parse_cli_thresholds, parse_suite_settings
    from nodecert.validation.run import ValidateRequest, validate

    the_slice = common.slice_of(slice_text, run_id)
    # Read and verified before any host is contacted: a bad baseline is bad input.
    baseline = read_baseline(fleet_baseline, pubkeys)
    limit = tuple(h for item in limit for h in item.split(",") if h)
    detail = {"lines": True, "summary": False, "live": False}.get(progress_mode)
    with contextlib.ExitStack() as stack:
        live = stack.enter_context(live_view()) if progress_mode != "lines" and \
            liveview.wanted(progress_mode) and detail is not True else None
        request = ValidateRequest(
            path, suite=suite, limit=limit, stack=stack_name, forks=forks, runs_dir=runs_dir,
            cli_thresholds=parse_cli_thresholds(threshold_items), scratch=scratch_dir,
            checks=checks, host_timeout_s=host_timeout,
            option_overrides=parse_suite_settings(settings), suite_file=suite_file,
            become=common.become_source(become_file, vault_file), detail=detail,
            runner=runner,
            slice=the_slice)
        run = validate(request,
                       progress=live.say if live else (lambda line: common.echo(line, err=True)),
                       status=live.status if live else None)
    if baseline is not None:
        add_to_run(run, baseline=baseline)
    code = ExitCode.OK if run.verdict <= Verdict.WARN and not run.interrupted \
        else ExitCode.FAILED
    if as_json:
        common.emit_json(run.summary())
        sys.exit(int(code))
    common.print_validation(run)
    sys.exit(int(code))
