"""nodecert revalidate and history: drift against the certified baseline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nodecert.cli import common
from nodecert.cli.certs import certified_json
from nodecert.cli.fleet import baseline_limits
from nodecert.core.errors import ExitCode
from nodecert.core.textsafe import one_line

_REVALIDATE_HELP = """Validate again and compare each node with its certified baseline.

The baseline (--baseline: a reports directory of certificates, or a run
directory; default the newest runs/*/reports) is verified with the trusted keys
first (--pubkey, and the public half of --key). Each node then gets, in its new
results: drift.identity (a swapped GPU/board/NIC/drive), drift.stack (any pinned
package changed or no longer held, driver, kernel module, framework), one
drift.perf.<metric> per figure both runs measured (down more than 10%, or the
soak peak more than 5 C up, fails: drift.* thresholds), drift.health (new
hardware Xids or ECC errors). The new run is certified.

With --collect, nothing runs on the nodes: each node's newest scheduled run (the
timer's, or the one a package update queued: --collect after-update) is fetched
from /var/lib/nodecert/history, its stack.conformance judged against the stack,
compared with the baseline and certified like any other run.

Every node also gets fleet.trend (a figure worse at each of its last runs, from its
history under --runs-dir) and, with a fleet baseline file as --baseline, fleet.peers.

With --after-repair, each node re-runs the checks still open since its last acceptance
certificate (failed, and not passed since) plus a
loaded re-test (burn-in with its result comparison, NCCL inside the node, GPU
health; the standard suite unless --suite says otherwise): repair.retest passes only
when every one of them passes now. Only then is a node nodecert drained resumed in
Slurm (nodecert_cluster with engine slurm); otherwise it is drained, or kept drained,
with the reason, and its certificate says NOT READY.

With --via slurm, each node's own run is started as a Slurm job (one exclusive
job per node, from the launch host of nodecert_cluster: Slurm starts it when the
node is free, between users' jobs), then collected as with --collect. A node
Slurm cannot run it on (drained, down, unknown) or whose job fails is ERROR.

\b
Drift is judged against each node's newest acceptance certificate under the runs
directory (a health record, say of a quick run since, never replaces it as the
baseline; a node with none is compared with its newest certificate), or against
--baseline.

\b
Exit codes: 0 no regression and every node READY (or HEALTHY from a run that asked
no acceptance: a quick suite, an after-repair re-test), 1 a regression, drift, a
NOT READY node or one that fell short of its acceptance suite, 2 bad input
(inventory, baseline that does not verify, key).

\b
Examples:
  nodecert revalidate -i lab.ini
  nodecert revalidate -i lab.ini --baseline runs/20261129-101500-a1b2c3/reports --suite standard
  nodecert revalidate -i lab.ini --key /etc/nodecert/keys/nodecert.key --pubkey old-signer.pub
  nodecert revalidate -i lab.ini --collect after-update
  nodecert revalidate -i cluster.ini --via slurm --slurm-wait-s 7200
  nodecert revalidate -i lab.ini --baseline h200.baseline.json      # also against its peers
  nodecert revalidate -i lab.ini --after-repair --limit gpu-07     # after a GPU swap
  nodecert revalidate -i cluster.ini --via slurm --idle --slurm-partition nodecert-idle
  sbatch --array=1-8 --wrap "nodecert revalidate -i fleet.ini --slice auto --run-id $ID \
      --runs-dir /shared/runs"          # 8 controllers, one run (docs/fleet.md)
"""

if TYPE_CHECKING:  # the command imports it when it runs (a fast --help)
    from nodecert.revalidate.run import Revalidation


@click.command("revalidate", help=_REVALIDATE_HELP)
@common.inventory_option
@click.option("--baseline", "baselines", multiple=True, type=click.Path(path_type=Path),
              help="A reports or run directory to compare with (default: newest under "
                   "--runs-dir); and/or a fleet baseline file (nodecert fleet baseline) to "
                   "judge each node against its peers. Repeatable: one of each.")
@baseline_limits
@click.option("--after-repair", is_flag=True,
              help="Re-test, under load, what failed on each node since its last acceptance "
                   "certificate and has not passed since; resume it in "
                   "Slurm and certify it READY only if that passes (default suite: standard).")
@common.suite_option
@common.suite_file_option
@common.limit_option
@common.checks_option
@common.stack_option
@common.threshold_option
@common.signing_key_option
@click.option("--pubkey", "pubkeys", multiple=True, type=click.Path(path_type=Path),
              help="Also trust this signer for the baseline (repeatable).")
@common.runs_dir_option
@click.option("--collect", "collect_reason", is_flag=False, flag_value="any",
              type=click.Choice(["any", "after-update", "timer", "slurm"]),
              help="Collect the nodes' own newest scheduled run instead of validating "
                   "(bare --collect: whichever ran last).")
@click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True,
              help="Run the nodes' checks over SSH, or as Slurm jobs (nodecert_cluster).")
@click.option("--slurm-wait-s", type=click.FloatRange(min=1), default=1800.0,
              show_default=True,
              help="With --via slurm: how long each job may wait for its node to be free.")
@click.option("--idle", is_flag=True,
              help="With --via slurm: idle checks that give way within seconds to a job "
                   "(Slurm preemption, or a GPU process starting); run them in a "
                   "low-priority preemptible partition (--slurm-partition).")
@click.option("--slurm-partition", help="With --via slurm: the partition the jobs go to "
              "(default: nodecert_cluster's).")
@click.option("--slurm-reservation", help="With --via slurm: a reservation the site names.")
@common.slice_options
@common.json_option
@common.become_options
@common.handle_errors
def revalidate_cmd(path: Path, baselines: tuple[Path, ...], after_repair: bool, suite: str,
                   suite_file: Path | None,
                   limit: tuple[str, ...],
                   checks: tuple[str, ...], stack_name: str | None,
                   threshold_items: tuple[str, ...], key_path: Path | None,
                   pubkeys: tuple[Path, ...], runs_dir: Path,
                   collect_reason: str | None, via: str, slurm_wait_s: float,
                   idle: bool, slurm_partition: str | None, slurm_reservation: str | None,
                   as_json: bool, become_file: Path | None, vault_file: Path | None,
                   slice_text: str | None = None, run_id: str | None = None) -> None:
    from nodecert.certs.signing import load_private_key, load_public_key
    from nodecert.cli.fleet import read_fleet_baseline as fleet_read
    from nodecert.profiles.thresholds import parse_cli_thresholds
    from nodecert.revalidate.run import RevalidateRequest, revalidate
    from nodecert.validation.run import ValidateRequest

    _refuse_combinations(via=via, collect_reason=collect_reason, after_repair=after_repair,
                         slurm_options=bool(idle or slurm_partition or slurm_reservation))
    dirs = [b for b in baselines if b.is_dir()]
    files = [b for b in baselines if not b.is_dir()]
    if len(dirs) > 1 or len(files) > 1:
        raise click.UsageError("--baseline: at most one directory (certificates) and one "
                               "file (a fleet baseline)")
    baseline = dirs[0] if dirs else None
    ctx = click.get_current_context()
    if after_repair and ctx.get_parameter_source("suite") == click.core.ParameterSource.DEFAULT:
        suite = "standard"  # the loaded checks (burn-in, NCCL) are in the standard suite
    key_path = key_path or common.DEFAULT_KEY_DIR.expanduser() / "nodecert.key"
    key = load_private_key(key_path)
    trusted = [key.public_key(), *(load_public_key(p) for p in pubkeys)]
    # Verified with the same trusted keys as the certificates, before any node is touched.
    fleet_baseline = fleet_read(files[0], trusted) if files else None
    limit = tuple(h for item in limit for h in item.split(",") if h)
    validation = ValidateRequest(path, suite=suite, limit=limit, stack=stack_name,
                                 runs_dir=runs_dir, checks=checks, suite_file=suite_file,
                                 cli_thresholds=parse_cli_thresholds(threshold_items),
                                 become=common.become_source(become_file, vault_file),
                                 slice=common.slice_of(slice_text, run_id))
    rv = revalidate(RevalidateRequest(validation, key=key, trusted=trusted, baseline=baseline,
                                      collect_reason=collect_reason, via_slurm=via == "slurm",
                                      slurm_wait_s=slurm_wait_s, fleet_baseline=fleet_baseline,
                                      after_repair=after_repair, idle=idle,
                                      slurm_partition=slurm_partition,
                                      slurm_reservation=slurm_reservation),
                    progress=lambda line: common.echo(line, err=True))
    assert rv.cert is not None
    code = ExitCode.FAILED if rv.regressed or rv.repair_failed or not rv.cert.ok() \
        else ExitCode.OK
    if as_json:
        common.emit_json({"baseline": str(rv.baseline) if rv.baseline else None,
                   "fleet_baseline": fleet_baseline.version if fleet_baseline else None,
                   "run": str(rv.run.run_dir), "regressed": rv.regressed,
                   "drift": {h: [r.as_dict() for r in rs] for h, rs in sorted(rv.drift.items())},
                   "fleet": {h: [r.as_dict() for r in rs] for h, rs in sorted(rv.fleet.items())},
                   "repair": {h: r.as_dict() for h, r in sorted(rv.repair.items())},
                   "certificates": certified_json(rv.cert)})
        sys.exit(int(code))
    _print(rv)
    sys.exit(int(code))


def _refuse_combinations(*, via: str, collect_reason: str | None, after_repair: bool,
                         slurm_options: bool) -> None:
    """The options that do not go together, refused before anything runs."""
    if via == "slurm" and collect_reason:
        raise click.UsageError("--via slurm runs the nodes' checks; --collect runs none: "
                               "give one of them")
    if slurm_options and via != "slurm":
        raise click.UsageError("--idle, --slurm-partition and --slurm-reservation go with "
                               "--via slurm (without Slurm, the node's timer runs idle "
                               "checks: validators_schedule_idle)")
    if after_repair and (collect_reason or via == "slurm"):
        raise click.UsageError("--after-repair re-tests over SSH (a drained node runs no "
                               "Slurm job): drop --collect / --via slurm")


def _print(rv: Revalidation) -> None:
    """The re-validation for people: each host's drift, fleet and repair results, then
    each node's new certificate."""
    common.echo(f"baseline: {rv.baseline or '(none found)'}")
    shown = {h: [*rs, *rv.fleet.get(h, []), *([rv.repair[h]] if h in rv.repair else [])]
             for h, rs in rv.drift.items()}
    for host, results in sorted(shown.items()):
        for r in results:
            click.echo(f"{one_line(host):<14} {common.verdict_text(r.verdict)} {r.check:<34} "
                       f"{one_line(r.summary)}")
    assert rv.cert is not None
    for n in rv.cert.nodes:
        common.echo(f"{n.host:<14} {n.verdict}{' (SIMULATED)' if n.simulated else ''}")
    common.echo(f"run: {rv.run.run_dir}\ncertificates: {rv.cert.out_dir}")


_HISTORY_HELP = """A node's validation history: every run under --runs-dir, oldest first.

One line per run: when, suite, verdict, failing checks, and the key figures
(GEMM TFLOPS of the slowest GPU, all-reduce busbw, soak peak, storage read); then
the trend: each figure (per GPU) that got worse at each of the last three runs,
flagged before it crosses its floor (fleet.trend_* thresholds).

\b
Exit codes: 0 shown, 2 no run holds this host.

\b
Examples:
  nodecert history h1
  nodecert history gpu-h200-01 --runs-dir /srv/nodecert/runs --json
"""


@click.command("history", help=_HISTORY_HELP)
@click.argument("host")
@common.runs_dir_option
@common.json_option
@common.handle_errors
def history_cmd(host: str, runs_dir: Path, as_json: bool) -> None:
    from nodecert.fleet import trends
    from nodecert.fleet.judging import fleet_limits, history_of
    from nodecert.revalidate.history import history

    rows = history(runs_dir, host)
    if as_json:
        common.emit_json(rows)
        return
    common.echo(f"{'when':<20} {'run':<24} {'suite':<9} {'verdict':<8} {'certificate':<11} "
         "figures / failing")
    for r in rows:
        figs = " ".join(f"{k}={v}" for k, v in r["figures"].items())
        bad = "; ".join(r["failing"][:3])
        common.echo(f"{r['when']:<20} {r['run_id']:<24} {r['suite']:<9} {r['verdict']:<8} "
             f"{r['certificate_status'] or '-':<11} {figs}{'  ' + bad if bad else ''}")
    trend = trends.judge(history_of(runs_dir, host), fleet_limits(None))
    common.echo(f"trend: {trend.verdict} {one_line(trend.summary)}")
    for f in trend.findings[1:]:
        common.echo(f"       {one_line(f)}")
