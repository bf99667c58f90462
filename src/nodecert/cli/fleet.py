"""nodecert fleet: baselines of a fleet's figures, a node judged against its peers and its
own past, the fleet page, and the verdict files the cluster's tools read."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from nodecert.cli.common import (
    DEFAULT_KEY_DIR,
    become_options,
    echo,
    emit_json,
    handle_errors,
    json_option,
    runs_dir_option,
    signing_key_option,
    verdict_text,
)
from nodecert.core.errors import ExitCode
from nodecert.core.textsafe import one_line


def trusted_keys(pubkeys: tuple[Path, ...]) -> list[Any]:
    """The keys a fleet baseline may be signed with: those given, else the default
    signing key's public half (the key `nodecert fleet baseline` signs with)."""
    from nodecert.certs.signing import load_public_key

    if pubkeys:
        return [load_public_key(p) for p in pubkeys]
    default = DEFAULT_KEY_DIR.expanduser() / "nodecert.pub"
    if not default.is_file():
        from nodecert.core.errors import NodecertError
        raise NodecertError(f"no key to verify the fleet baseline with: {default} is absent",
                            hint="give the baseline signer's public key with --pubkey")
    return [load_public_key(default)]


def read_baseline(path: Path | None, pubkeys: tuple[Path, ...]) -> Any:
    """The verified fleet baseline, or None when none was asked for."""
    if path is None:
        return None
    return read_fleet_baseline(path, trusted_keys(pubkeys))


def read_fleet_baseline(path: Path, trusted: list[Any]) -> Any:
    """The baseline verified with these keys and held to --baseline-fleet and
    --baseline-max-age-days (where the command has them)."""
    from nodecert.fleet import baseline as fleet_baseline
    meta = click.get_current_context(silent=True)
    got = meta.meta if meta is not None else {}
    days = got.get("baseline_max_age_days")
    return fleet_baseline.read(path, trusted, fleet_baseline.Expect(
        got.get("baseline_fleet"), dt.timedelta(days=days) if days else None))


def _keep(name: str) -> Any:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta[name] = value
        return value
    return store


def baseline_limits(f: Any) -> Any:
    """--baseline-fleet and --baseline-max-age-days: what a fleet baseline must be."""
    f = click.option("--baseline-fleet", metavar="NAME", expose_value=False,
                     callback=_keep("baseline_fleet"),
                     help="Refuse a fleet baseline not built for this fleet (fleet "
                          "baseline --fleet).")(f)
    return click.option("--baseline-max-age-days", type=click.FloatRange(min=0, min_open=True),
                        expose_value=False, callback=_keep("baseline_max_age_days"),
                        help="Refuse a fleet baseline built longer ago than this.")(f)


def baseline_file_option(f: Any) -> Any:
    f = baseline_limits(f)
    return click.option("--baseline", "fleet_baseline", type=click.Path(
        path_type=Path, dir_okay=False), help="A fleet baseline (nodecert fleet baseline): "
        "also judge each node against its peers (fleet.peers).")(f)


def pubkey_option(f: Any) -> Any:
    return click.option("--pubkey", "pubkeys", multiple=True, type=click.Path(
        path_type=Path, dir_okay=False), help="Trust this signer for the fleet baseline "
        "(repeatable; default: the public half of the default signing key).")(f)


def judged_run_options(f: Any) -> Any:
    """What a command that runs the nodes and may judge them against the fleet takes
    (validate, cluster validate): --baseline and its trusted --pubkey, --runs-dir, --json,
    the become options."""
    return baseline_file_option(pubkey_option(runs_dir_option(json_option(
        become_options(f)))))


def _records(runs: tuple[Path, ...]) -> tuple[list[Any], dict[str, Any]]:
    from nodecert.fleet.judging import load_runs
    return load_runs(runs)


@click.group("fleet")
def fleet() -> None:
    """Fleet baselines, peers, trends, the fleet page and exports for cluster tools.

    \b
    Examples:
      nodecert fleet baseline runs/20261201-* --out fleet-h200.baseline.json
      nodecert fleet judge runs/20261203-101500-a1b2c3 --baseline fleet-h200.baseline.json
      nodecert fleet page runs/20261203-101500-a1b2c3 --out fleet.html
      nodecert fleet export runs/20261203-101500-a1b2c3 --out /srv/nodecert/export
    """


_BASELINE_HELP = """Build a fleet baseline from validation runs and sign it.

Per GPU model and per figure (GEMM TFLOPS per GPU, all-reduce busbw, host<->GPU and
GPU<->GPU copy bandwidth, the soak's plateau clocks, power and peak temperature,
scaling, storage; from cluster runs also each node's pairings: two-node all-reduce
and RDMA bandwidth per rail): the median and the robust spread (1.4826 x MAD) of the
newest record of every host in the runs given (validation or cluster runs). Hosts
that FAILed or ERRORed are left out and listed. The file is a DSSE envelope signed
with --key; its version is the digest of its figures. It names the fleet (--fleet)
and when it was built; whoever uses it can refuse another fleet's (--baseline-fleet)
or one older than they allow (--baseline-max-age-days). Nodes are judged only
against peers of their own GPU model.

\b
Exit codes: 0 written, 2 bad input (no finished run, no figures, key).

\b
Examples:
  nodecert fleet baseline runs/20261201-093000-a1b2c3 --out h200.baseline.json --fleet dc1-h200
  nodecert fleet baseline runs/2026112* --out h200.baseline.json --key /etc/nodecert/n.key
"""


@fleet.command("baseline", help=_BASELINE_HELP)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--fleet", "fleet_name", metavar="NAME",
              help="The fleet the baseline is for, signed with it: verifiers can refuse "
                   "another fleet's (--baseline-fleet).")
@signing_key_option
@json_option
@handle_errors
def baseline_cmd(runs: tuple[Path, ...], out: Path, key_path: Path | None,
                 fleet_name: str | None, as_json: bool) -> None:
    from nodecert.fleet import baseline as fleet_baseline
    from nodecert.provision.chain import signing_key

    records, extra = _records(runs)
    b = fleet_baseline.build(records, extra=extra, fleet=fleet_name)
    key, created = signing_key(key_path)
    if created is not None:
        echo(f"created signing key {created.private} (0600) and {created.public}", err=True)
    fleet_baseline.write(b, out, key)
    if as_json:
        emit_json({"file": str(out), **b.as_dict()})
        return
    echo(f"fleet baseline {b.version}: {b.hosts} hosts from {len(b.runs)} run(s)"
         f"{' (SIMULATED)' if b.simulated else ''} -> {out}")
    for model, group in sorted(b.groups.items()):
        for metric, st in sorted(group.items()):
            echo(f"  {one_line(model):<14} {one_line(metric):<36} median {st.median:g} "
                 f"{st.unit}, spread {st.sigma:.3g} ({st.nodes} nodes, {st.samples} figures)")
    for host, why in sorted(b.excluded.items()):
        echo(f"  left out {one_line(host)}: {why}")


def _print_judged(judged: dict[str, list[Any]]) -> None:
    for host, results in sorted(judged.items()):
        for r in results:
            click.echo(f"{one_line(host):<14} {verdict_text(r.verdict)} {r.check:<12} "
                       f"{one_line(r.summary)}")
            for f in r.findings[1:]:
                click.echo(f"{'':<14} {'':<4} {'':<12} {one_line(f)}")


_JUDGE_HELP = """Judge the nodes of validation runs against a fleet baseline (fleet.peers)
and, with their history under --runs-dir, against their own past runs (fleet.trend).

Read-only: the runs are not changed (`validate --baseline` records the same results
in a new run). A figure is an outlier beyond fleet.robust_deviations_max robust
deviations AND fleet.shortfall_fraction_max on the worse side of the peers' median.

\b
Exit codes: 0 no node FAILs, 1 a node FAILs (an outlier), 2 bad input.

\b
Examples:
  nodecert fleet judge runs/20261203-101500-a1b2c3 --baseline h200.baseline.json
  nodecert fleet judge runs/20261203-101500-a1b2c3 --baseline h200.baseline.json --json
"""


@fleet.command("judge", help=_JUDGE_HELP)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@baseline_file_option
@pubkey_option
@runs_dir_option
@click.option("--no-trends", is_flag=True, help="Judge against the baseline only.")
@json_option
@handle_errors
def judge_cmd(runs: tuple[Path, ...], fleet_baseline: Path | None, pubkeys: tuple[Path, ...],
              runs_dir: Path, no_trends: bool, as_json: bool) -> None:
    from nodecert.fleet.judging import judge_records
    from nodecert_node.contract import Verdict

    if fleet_baseline is None and no_trends:
        raise click.UsageError("nothing to judge: give --baseline, or drop --no-trends")
    b = read_baseline(fleet_baseline, pubkeys)
    records, extra = _records(runs)
    judged = judge_records(records, baseline=b, runs_dir=None if no_trends else runs_dir,
                           extra=extra)
    failed = any(r.verdict >= Verdict.FAIL for rs in judged.values() for r in rs)
    if as_json:
        emit_json({"baseline": b.version if b else None,
                   "hosts": {h: [r.as_dict() for r in rs] for h, rs in sorted(judged.items())}})
    else:
        _print_judged({h: [r for r in rs if r.verdict > Verdict.PASS]
                       for h, rs in judged.items()})
        n = sum(1 for rs in judged.values() if any(r.verdict > Verdict.PASS for r in rs))
        echo(f"{len(judged)} node(s) judged, {n} flagged"
             + (f" against baseline {b.version}" if b else ""))
    sys.exit(int(ExitCode.FAILED if failed else ExitCode.OK))


_PAGE_HELP = """Write the fleet page: each figure's distribution across the nodes of the runs
(outliers marked), the outliers against the baseline, and the trends over each node's
runs (from --runs-dir). Self-contained HTML: no script, no network asset.

Without --baseline the page judges against a baseline built from these runs (said on
the page; unsigned).

\b
Examples:
  nodecert fleet page runs/20261203-101500-a1b2c3 --baseline h200.baseline.json --out fleet.html
"""


@fleet.command("page", help=_PAGE_HELP)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@baseline_file_option
@pubkey_option
@runs_dir_option
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@json_option
@handle_errors
def page_cmd(runs: tuple[Path, ...], fleet_baseline: Path | None, pubkeys: tuple[Path, ...],
             runs_dir: Path, out: Path, as_json: bool) -> None:
    from nodecert.fleet import baseline as fb
    from nodecert.fleet.judging import judge_records
    from nodecert.fleet.page import FleetPage, render, summary
    from nodecert_node.contract import write_atomic

    records, extra = _records(runs)
    b = read_baseline(fleet_baseline, pubkeys)
    note = f"signed file {fleet_baseline}" if b else "built from these runs, unsigned"
    b = b or fb.build(records, extra=extra)
    page = FleetPage(records, b, note, judge_records(records, baseline=b, runs_dir=runs_dir,
                                                     extra=extra), extra)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(out), render(page).encode())
    s = summary(page)
    if as_json:
        emit_json({"file": str(out), **s})
        return
    echo(f"fleet page: {s['nodes']} nodes, {len(s['outliers'])} outlier figure(s), "
         f"{len(s['trends'])} trend(s) -> {out}")


_EXPORT_HELP = """Write each node's verdict for the cluster's own tools.

k8s/<node>.json: a Node patch with nodecert.io/* labels and NodeCondition entries
(NodecertValidated, NodecertFleetOutlier, NodecertWorseningTrend);
nvsentinel/<node>.json: NVIDIA NVSentinel HealthEvents (recommendedAction from the
fault code's action chain); npd/<node>.json with node-problem-detector's custom plugin
(npd/nodecert-npd-check) and its monitor config; prometheus/fleet.prom and
nodecert-rules.yml (alerting rules); grafana/nodecert-fleet.json (dashboard).

With --baseline, each node is judged against it first (and against its own runs
under --runs-dir); otherwise the fleet results already in the records are used.

\b
Examples:
  nodecert fleet export runs/20261203-101500-a1b2c3 --out /srv/nodecert/export
  kubectl patch node gpu-01 --subresource=status --patch-file export/k8s/gpu-01.json
"""


@fleet.command("export", help=_EXPORT_HELP)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@baseline_file_option
@pubkey_option
@runs_dir_option
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False))
@json_option
@handle_errors
def export_cmd(runs: tuple[Path, ...], fleet_baseline: Path | None, pubkeys: tuple[Path, ...],
               runs_dir: Path, out: Path, as_json: bool) -> None:
    from nodecert.fleet.export import export
    from nodecert.fleet.judging import judge_records, with_results

    records, extra = _records(runs)
    b = read_baseline(fleet_baseline, pubkeys)
    if b is not None:
        judged = judge_records(records, baseline=b, runs_dir=runs_dir, extra=extra)
        records = [with_results(r, judged.get(r.host, [])) for r in records]
    files = export(records, out)
    if as_json:
        emit_json({"out": str(out), "files": [str(f) for f in files]})
        return
    echo(f"{len(records)} node(s): {len(files)} file(s) under {out}")


_RMA_HELP = """Write the RMA evidence bundle of a failed node: one signed tar.gz.

It holds the failing record (every result with its evidence and each fault code's
action chain), the kernel log lines the checks read, the BMC's event log and sensors
(bmc.* results), the serial numbers, the node's run and certificate history, and the
files given with --add (nvidia-bug-report.log.gz: run `sudo nvidia-bug-report.sh` on
the node first). A manifest of every file's sha256 is signed with --key;
`nodecert fleet rma-verify` checks it offline.

\b
Exit codes: 0 written, 2 bad input (no failing run, a file to add that is not one).

\b
Examples:
  nodecert fleet rma gpu-07 --out rma-gpu-07.tar.gz --add nvidia-bug-report.log.gz
  nodecert fleet rma gpu-07 --run 20261203-101500-a1b2c3 --out rma-gpu-07.tar.gz
"""


@fleet.command("rma", help=_RMA_HELP)
@click.argument("host")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--run", "run_id", help="The run to bundle (default: the newest that failed).")
@click.option("--add", "added", multiple=True, type=click.Path(path_type=Path),
              help="Another file to include (repeatable).")
@signing_key_option
@runs_dir_option
@json_option
@handle_errors
def rma_cmd(host: str, out: Path, run_id: str | None, added: tuple[Path, ...],
            key_path: Path | None, runs_dir: Path, as_json: bool) -> None:
    from nodecert.fleet import rma
    from nodecert.provision.chain import signing_key

    key, created = signing_key(key_path)
    if created is not None:
        echo(f"created signing key {created.private} (0600) and {created.public}", err=True)
    b = rma.build(runs_dir, host, out, key, run=run_id, added=added)
    if as_json:
        emit_json({"file": str(b.path), "host": b.host, "run_id": b.run_id, "files": b.files})
        return
    echo(f"RMA bundle of {one_line(host)} (run {b.run_id}): {len(b.files)} file(s), signed "
         f"-> {b.path}")


_RMA_VERIFY_HELP = """Verify an RMA bundle offline: the manifest's signature and every file's
sha256.

\b
Exit codes: 0 verified, 1 it does not verify (a changed, missing or extra file, a
signature from a key not trusted), 2 bad input.

\b
Examples:
  nodecert fleet rma-verify rma-gpu-07.tar.gz --pubkey integrator.pub
"""


@fleet.command("rma-verify", help=_RMA_VERIFY_HELP)
@click.argument("bundle", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="A trusted signer's public key (repeatable).")
@json_option
@handle_errors
def rma_verify_cmd(bundle: Path, pubkeys: tuple[Path, ...], as_json: bool) -> None:
    from nodecert.fleet import rma

    try:
        manifest = rma.verify(bundle, trusted_keys(pubkeys))
    except rma.RmaError as exc:
        if as_json:
            emit_json({"verified": False, "error": exc.render()})
        else:
            echo(f"NOT VERIFIED: {exc.render()}", err=True)
        sys.exit(int(ExitCode.FAILED))
    if as_json:
        emit_json({"verified": True, **manifest})
        return
    echo(f"verified: RMA bundle of {one_line(str(manifest['host']))}, run "
         f"{manifest['run_id']}, {len(manifest['files'])} file(s); failing: "
         + ", ".join(manifest["failing"]) + (" (SIMULATED)" if manifest.get("simulated")
                                              else ""))
