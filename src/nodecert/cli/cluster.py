"""nodecert cluster: multi-node acceptance (fabric, pairings, all-reduce, bisection) and
the cluster certificate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nodecert.cli import common
from nodecert.cli.fleet import judged_run_options, read_baseline


@click.group("cluster")
def cluster() -> None:
    """Prove the nodes together: the fabric between them and multi-node NCCL."""


_VALIDATE_HELP = """Validate the cluster: every node's fabric, every node paired with at
least two partners (two-node all_reduce_perf and ib_write_bw on each rail), the
all-reduce over all nodes against the fabric's sourced expectation, and on its
failure a bisection that names the culprit node(s); then the reference training job
on every node and over all nodes (scaling efficiency, docs/scaling.md) and, where the
order names a shared file system, every node reading it at once (docs/datapath.md).

Jobs run on the site's engine from the launch host: Slurm (srun, exclusive, the
partition/account/reservation given) or OpenMPI's mpirun over SSH with a hostfile.
Every job is named and time-bounded; a hang is ERROR with its logs, and nothing a
job started is left running. Settings come from the inventory's nodecert_cluster
mapping (docs/cluster.md); the options below win. With --key, the run is signed
as a cluster certificate (reports/cluster.intoto.dsse.json and cluster.html).

\b
Exit codes: 0 cluster PASS/WARN, 1 FAIL or ERROR (culprits named), 2 bad input
(inventory without a fabric spec, engine unusable, nodes absent from Slurm).

\b
Examples:
  nodecert cluster validate -i /var/tmp/nodecert-lab/state/inventory.ini --key keys/nodecert.key
  nodecert cluster validate -i site.ini --engine slurm --partition gpu --reservation accept
  nodecert cluster validate -i site.ini --engine mpirun --launch-host login01 --json
  nodecert cluster validate -i site.ini --no-scaling --no-storage   # the fabric only
"""


@cluster.command("validate", help=_VALIDATE_HELP)
@common.inventory_option
@common.limit_option
@click.option("--engine", type=click.Choice(["slurm", "mpirun"]),
              help="Where jobs run (default: the inventory's, else mpirun).")
@click.option("--launch-host", help="Inventory host srun/mpirun run on (default: the "
              "inventory's, else the first node).")
@click.option("--partition", help="Slurm partition.")
@click.option("--account", help="Slurm account.")
@click.option("--reservation", help="Slurm reservation.")
@click.option("--job-timeout", "job_timeout_s", type=click.FloatRange(min=10),
              metavar="SECONDS", help="Limit of each job (default 300).")
@click.option("--max-bytes", help="all_reduce_perf's largest size (default 8G).")
@click.option("--collective", "collectives", multiple=True,
              type=click.Choice(["all_gather", "alltoall"]),
              help="Also run this collective over all nodes (reported, not judged).")
@click.option("--scaling/--no-scaling", default=None,
              help="Run the training job per node and over all nodes (default: on).")
@click.option("--storage/--no-storage", default=None,
              help="Read the order's shared file system from every node at once "
                   "(default: on where the order names one).")
@click.option("--key", "key_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Sign the run as a cluster certificate with this private key.")
@judged_run_options
@common.handle_errors
def cluster_validate_cmd(path: Path, limit: tuple[str, ...], engine: str | None,
                         launch_host: str | None, partition: str | None,
                         account: str | None, reservation: str | None,
                         job_timeout_s: float | None, max_bytes: str | None,
                         collectives: tuple[str, ...], scaling: bool | None,
                         storage: bool | None, key_path: Path | None,
                         fleet_baseline: Path | None, pubkeys: tuple[Path, ...],
                         runs_dir: Path, as_json: bool,
                         become_file: Path | None, vault_file: Path | None) -> None:
    from nodecert.certs.cluster import certify_cluster
    from nodecert.certs.revocations import DEFAULT_NAME
    from nodecert.certs.signing import load_private_key
    from nodecert.cluster.validate import ClusterRequest, cluster_validate
    from nodecert.core.errors import InventoryError
    from nodecert.inventory.cluster import parse_cluster

    given = {k: v for k, v in (("engine", engine), ("launch_host", launch_host),
                               ("partition", partition), ("account", account),
                               ("reservation", reservation), ("job_timeout_s", job_timeout_s),
                               ("max_bytes", max_bytes),
                               ("collectives", list(collectives) or None),
                               ("scaling", scaling), ("storage", storage)) if v is not None}
    parsed, why = parse_cluster(given)
    if parsed is None:
        raise InventoryError(f"command line: {why}")
    given = {k: getattr(parsed, k) for k in given}  # as the settings hold them
    key = load_private_key(key_path) if key_path else None  # a bad key fails before jobs
    baseline = read_baseline(fleet_baseline, pubkeys)  # so does a bad fleet baseline
    request = ClusterRequest(path, limit=common.split_hosts(limit), overrides=given,
                             runs_dir=runs_dir,
                             become=common.become_source(become_file, vault_file))
    rec = cluster_validate(request, progress=lambda line: common.echo(line, err=True))
    if baseline is not None:
        from nodecert.fleet.judging import add_to_cluster_run
        rec = add_to_cluster_run(rec, baseline)
    run_dir = rec.run_dir
    cert: dict[str, Any] = {}
    if key is not None:
        env, html, verdict = certify_cluster(run_dir, key,
                                             revocations=run_dir.parent / DEFAULT_NAME)
        cert = {"certificate": str(env), "html": str(html), "certificate_verdict": verdict}
    common.end_group_run(rec, cert, as_json=as_json, what="cluster",
                         fields={"culprits": rec.culprits}, named=", ".join(rec.culprits))


@cluster.command("certify")
@common.certify_options
@common.handle_errors
def cluster_certify_cmd(run_dir: Path, key_path: Path, valid_days: int,
                        max_age_days: float, revocations: Path | None, lang: str | None,
                        pdf: bool) -> None:
    """Sign a cluster run as a cluster certificate (and render its page), entered on
    the signer's revocation list, where it supersedes older certificates of the same
    nodes.

    \b
    Example:
      nodecert cluster certify runs/cluster-20261130-210000-ab12cd --key keys/nodecert.key
    """
    from nodecert.certs.cluster import certify_cluster
    from nodecert.certs.html import Rendering
    from nodecert.certs.i18n import choose
    from nodecert.certs.revocations import DEFAULT_NAME
    from nodecert.certs.signing import load_private_key

    env, html, verdict = certify_cluster(run_dir, load_private_key(key_path),
                                         valid_days=valid_days, max_age_days=max_age_days,
                                         revocations=revocations
                                         or run_dir.parent / DEFAULT_NAME,
                                         rendering=Rendering(choose(lang), pdf))
    common.echo(f"certificate: {env} ({verdict}), page: {html}")


__all__ = ["cluster"]
