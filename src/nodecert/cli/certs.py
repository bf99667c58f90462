"""nodecert certify, verify, revoke: certificates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from nodecert.cli import common
from nodecert.core.errors import ExitCode
from nodecert.core.textsafe import one_line


def print_certified(run: Any) -> None:
    for n in run.nodes:
        sim = " (SIMULATED)" if n.simulated else ""
        if n.verdict == "HEALTHY":
            # a health record: say what it is not, and what it lacks
            why = ": a health record, not an acceptance certificate" + (
                f"; lacks {', '.join(n.missing)}" if n.missing else f"; {n.reasons[0]}"
                if n.reasons else "")
        else:
            why = f": {n.reasons[0]}" + (f" (+{len(n.reasons) - 1} more)"
                                         if len(n.reasons) > 1 else "") if n.reasons else ""
        common.echo(f"{n.host:<14} {n.verdict}{sim}{why}")
    for host, why in run.failed.items():
        common.echo(f"{host:<14} NOT CERTIFIED: {why}", err=True)
    if run.index is None:
        common.echo(f"certificates: {run.out_dir} (the fleet page and JUnit file are written "
                    "when the last slice ends)")
    else:
        common.echo(f"certificates: {run.out_dir} (fleet page {run.index}, JUnit {run.junit})")
    if run.revocations is not None:
        common.echo(f"revocation list: {run.revocations} (older certificates of these nodes are "
             "superseded there)")


def certified_json(run: Any) -> dict[str, Any]:
    return {"out_dir": str(run.out_dir), "keyid": run.keyid, "all_ready": run.all_ready,
            "index": str(run.index) if run.index else None,
            "junit": str(run.junit) if run.junit else None,
            "revocations": str(run.revocations) if run.revocations else None,
            "nodes": [{"host": n.host, "verdict": n.verdict, "simulated": n.simulated,
                       "reasons": list(n.reasons), "missing": list(n.missing),
                       "certificate": str(n.envelope),
                       "html": str(n.html)} for n in run.nodes],
            "not_certified": dict(run.failed)}


def _certify(run_dir: Path, key_path: Path | None, valid_days: int | None,
             out_dir: Path | None, max_age_days: float | None = None,
             quiet: bool = False, cluster_cert: Path | None = None,
             revocations: Path | None = None, rendering: Any = None,
             attestation_verifier: str | None = None, slice_text: str | None = None) -> Any:
    from nodecert.certs.certify import DEFAULT_MAX_AGE_DAYS, DEFAULT_VALID_DAYS, certify
    from nodecert.certs.html import PLAIN
    from nodecert.certs.revocations import DEFAULT_NAME
    from nodecert.provision.chain import signing_key

    key, created = signing_key(key_path)
    if created is not None:
        common.echo(f"created signing key {created.private} (0600) and {created.public}",
                   err=True)
    options: dict[str, Any] = {
        "out_dir": out_dir, "valid_days": valid_days or DEFAULT_VALID_DAYS,
        "max_age_days": max_age_days or DEFAULT_MAX_AGE_DAYS, "cluster_cert": cluster_cert,
        "revocations": revocations or run_dir.parent / DEFAULT_NAME,
        "rendering": rendering or PLAIN, "attestation_verifier": attestation_verifier}
    if slice_text is None:
        run = certify(run_dir, key, **options)
    else:
        from nodecert.certs.sliced import certify_slice
        from nodecert.runs.layout import RUN_ID
        from nodecert.validation.slices import Slice
        if not RUN_ID.match(run_dir.resolve().name):
            raise click.UsageError("--slice certifies a validation run's directory "
                                   "(runs/<run id>), as `nodecert validate` printed it")
        sliced = certify_slice(run_dir, key, Slice.parse(slice_text, run_dir.resolve().name),
                               **options)
        run = sliced.run
        if not quiet:
            common.echo(f"slice {sliced.slice.k} of {sliced.slice.n}: {len(run.nodes)} "
                        f"certified, {len(run.failed)} not (listed in {sliced.summary})")
    if not quiet:
        print_certified(run)
    return run


_CERTIFY_HELP = """Sign a certificate for every node of a validation run.

Per node: an in-toto Statement v1 in a DSSE envelope (NODE.intoto.dsse.json),
bound to the node's hardware identity (DMI/baseboard serials, GPU serials and
UUIDs, NIC MACs, NVMe serials) and holding the verdict, every result with its
threshold and source, the pinned stack and the software found; a self-contained
HTML page with plots (NODE.html) and JUnit XML; plus index.html and junit.xml for
the fleet. READY only from an acceptance run (a suite with an acceptance profile,
standard or full; lab on the built-in lab) that ran whole, every stage measured at
or above its minimum, nothing FAILed or ERRORed. A run that was not one (quick,
--only, a --set under a minimum) gives a health record: HEALTHY when nothing
failed, with the acceptance stages it lacks; NOT READY when something failed.
Every new certificate is entered on the signer's revocation list (by default
revocations.intoto.dsse.json next to the run directory), where it supersedes
the older certificates of its node: give that list to verifiers (`verify
--revocations`).

\b
Exit codes: 0 every node READY, or HEALTHY from a run that was not an acceptance
run (quick, --only); 1 a node NOT READY, HEALTHY from an acceptance suite's run
(a stage missing or under its minimum) or with --require acceptance, or not
certified (results older than --max-result-age-days, a host whose report could not
be built); 2 bad input.

\b
Examples:
  nodecert certify runs/20261129-101500-a1b2c3
  nodecert certify runs/20261129-101500-a1b2c3 --key /etc/nodecert/keys/nodecert.key --valid-days 30
  nodecert certify runs/20261129-101500-a1b2c3 --lang pt-BR --pdf
  sbatch --array=1-8 --wrap "nodecert certify runs/20261129-101500-a1b2c3 --slice auto"
"""


@click.command("certify", help=_CERTIFY_HELP)
@click.argument("run_dir", type=click.Path(path_type=Path))
@common.signing_key_option
@click.option("--valid-days", type=click.IntRange(min=1), default=90, show_default=True,
              help="Days the certificate is valid, counted from the end of the validation.")
@click.option("--max-result-age-days", "max_age_days", type=click.FloatRange(min=0.01),
              default=7.0, show_default=True,
              help="Refuse results older than this (recorded in the certificate).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Report directory (default: RUN_DIR/reports).")
@click.option("--cluster-cert", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The cluster or rack certificate (same key) the nodes were proven in "
                   "together: each node's certificate references it.")
@common.revocations_option
@click.option("--attestation-verifier", metavar="PYTHON",
              help="The Python of NVIDIA's local GPU verifier on this machine: the GPUs' "
                   "evidence is verified here, not taken from the node (default: "
                   "NODECERT_ATTESTATION_VERIFIER; without either it is stated as "
                   "node-reported).")
@click.option("--slice", "slice_text", metavar="K/N|auto",
              help="Certify slice K of N of the run's hosts (every N-th in name order); "
                   "`auto` in a task of a Slurm job array. The last slice to end writes "
                   "the fleet page and JUnit file over every slice's certificates.")
@common.require_option
@common.lang_option
@common.pdf_option
@common.json_option
@common.handle_errors
def certify_cmd(run_dir: Path, key_path: Path | None, valid_days: int, max_age_days: float,
                out_dir: Path | None, cluster_cert: Path | None, revocations: Path | None,
                attestation_verifier: str | None, slice_text: str | None, require: str | None,
                lang: str | None, pdf: bool, as_json: bool) -> None:
    from nodecert.certs.html import Rendering
    from nodecert.certs.i18n import choose

    run = _certify(run_dir, key_path, valid_days, out_dir, max_age_days, quiet=as_json,
                   cluster_cert=cluster_cert, revocations=revocations,
                   rendering=Rendering(choose(lang), pdf),
                   attestation_verifier=attestation_verifier, slice_text=slice_text)
    if as_json:
        common.emit_json(certified_json(run))
    sys.exit(int(ExitCode.OK if run.ok(require_acceptance=require == "acceptance")
                 else ExitCode.FAILED))


_REVOKE_HELP = """Revoke a certificate on the signer's revocation list.

For a node sent back, repaired without re-validation, or a certificate issued in
error: the list (signed again with --key, the key that signed the certificate)
then names it REVOKED with the reason, and `verify --revocations` fails it.
A newer certificate of the same node supersedes older ones without this.

\b
Exit codes: 0 revoked, 2 bad input (a certificate or list this key did not sign,
a certificate not on the list, no reason).

\b
Example:
  nodecert revoke runs/20261129-101500-a1b2c3/reports/h1.intoto.dsse.json \\
      --revocations runs/revocations.intoto.dsse.json --key keys/nodecert.key \\
      --reason "GPU 3 replaced (RMA 4711)"
"""


@click.command("revoke", help=_REVOKE_HELP)
@click.argument("certificate", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--revocations", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The revocation list the certificate is on.")
@click.option("--key", "key_path", required=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="The private key that signed the certificate and the list.")
@click.option("--reason", required=True, help="Why the certificate no longer holds.")
@common.json_option
@common.handle_errors
def revoke_cmd(certificate: Path, revocations: Path, key_path: Path, reason: str,
               as_json: bool) -> None:
    import datetime as dt

    from nodecert.certs.revocations import payload_digest, revoke_file
    from nodecert.certs.signing import SignatureError, load_private_key, verify_envelope
    from nodecert.certs.verify import ReportError, read_envelope

    key = load_private_key(key_path)
    try:
        _, payload, _ = verify_envelope(read_envelope(certificate), [key.public_key()])
    except SignatureError as exc:
        raise ReportError(f"{certificate}: not a certificate this key signed ({exc})",
                          hint="pass the certificate and the key that signed it") from exc
    digest = payload_digest(payload)
    reg = revoke_file(revocations, key, digest, reason, dt.datetime.now(dt.UTC))
    if as_json:
        common.emit_json({"certificate": str(certificate), "statement_sha256": digest,
                   "revocations": str(revocations), "sequence": reg.sequence})
        return
    common.echo(f"revoked sha256:{digest} on {revocations} (list #{reg.sequence}): give verifiers "
         "the new list")


_VERIFY_HELP = """Verify a node, cluster or rack certificate offline, and optionally
against the live host.

Checks, in order: the DSSE signature against the trusted public key(s) given
with --pubkey (nothing else is trusted), the payload type and in-toto Statement
schema, the validity window, --expect-host/--expect-serial/--expect-identity against what
the certificate names, the subject digest against the certified hardware
identity, with --host the host's hardware now (read over SSH: a swapped GPU or
board fails), and the verdict. A cluster certificate is about each of its nodes:
--expect-host must be one of them, --expect-serial/--expect-identity that node's
(any node's without --expect-host), and --host is compared with its own subject. A
rack certificate is read the same way, its compute trays as the nodes; its switch
trays' subjects are checked against their identities.
Trusted keys are those given with --pubkey, the keys they handed over to
(--key-statement with a rotation statement, chains followed), less the keys
withdrawn (--key-statement with a withdrawal). With --require-signers N, N
different parties must have signed (integrator and QA, say; a key and its hand-over
are one party). With --revocations, the signer's revocation list (signed with a
trusted key) must not name the certificate revoked or superseded, nor hold a
certificate on newer evidence for the same node; a list older than one of the same
signer seen before (--seen-lists remembers them) or than --max-list-age-days is
refused. A SIMULATED certificate is refused unless
--allow-simulated. Every step is printed.

\b
The scope step says what the certificate is: an acceptance certificate (its suite
and acceptance profile, the burn-in and soak durations measured, and whether a
cluster or rack certificate proves the node with its neighbours) or a health record
(HEALTHY: nothing failed, but no acceptance run) with the stages it lacks.
--require acceptance refuses a health record.

\b
Exit codes: 0 valid and READY, or a valid health record (HEALTHY) without --require
acceptance; 1 invalid, expired, altered, for other hardware, NOT READY, a health
record under --require acceptance, or lab minimums claimed for real hardware; 2 bad
input (unreadable report or key).

\b
Examples:
  nodecert verify gpu-h200-01.intoto.dsse.json --pubkey nodecert.pub
  nodecert verify h1.intoto.dsse.json --pubkey nodecert.pub --host h1 -i lab.ini --allow-simulated
  nodecert verify h1.intoto.dsse.json --pubkey nodecert.pub --expect-host gpu-h200-01 \\
      --expect-serial 1653724059030
  nodecert verify h1.intoto.dsse.json --pubkey nodecert.pub \\
      --revocations revocations.intoto.dsse.json --max-list-age-days 7 --require acceptance
  nodecert verify h1.intoto.dsse.json --pubkey integrator.pub --pubkey qa.pub \\
      --require-signers 2 --key-statement integrator-2027.rotation.dsse.json
"""


@click.command("verify", help=_VERIFY_HELP)
@click.argument("report", type=click.Path(path_type=Path))
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path), help="Trusted public key (repeatable).")
@click.option("--host", help="Also compare with this host's live hardware identity.")
@click.option("-i", "--inventory", type=click.Path(path_type=Path),
              help="Inventory to reach --host with.")
@click.option("--allow-simulated", is_flag=True,
              help="Accept a certificate of simulated hardware (lab, tests).")
@click.option("--expect-host", help="Fail unless the certificate is for this node name.")
@click.option("--expect-serial",
              help="Fail unless this serial (system, baseboard, chassis or a GPU's) is in "
                   "the certified identity.")
@click.option("--expect-identity", metavar="DIGEST",
              help="Fail unless the identity digest (the subject's sha256) is this one.")
@click.option("--revocations", type=click.Path(path_type=Path, dir_okay=False),
              help="The signer's revocation list: fail if it revokes or supersedes the "
                   "certificate.")
@common.freshness_options
@common.key_statement_option
@click.option("--require-signers", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many different parties must have signed (two-party signing; a key "
                   "and the keys it handed over to are one party).")
@common.require_option
@common.lang_option
@common.json_option
@common.become_options
@common.handle_errors
def verify_cmd(report: Path, pubkeys: tuple[Path, ...], host: str | None,
               inventory: Path | None, allow_simulated: bool, expect_host: str | None,
               expect_serial: str | None, expect_identity: str | None,
               revocations: Path | None, max_list_age_days: float | None,
               seen_lists: Path | None, key_statements: tuple[Path, ...],
               require_signers: int, require: str | None, lang: str | None, as_json: bool,
               become_file: Path | None, vault_file: Path | None) -> None:
    from nodecert.certs.i18n import choose, gettext_for
    from nodecert.certs.verify import ReportError, live_identity, subject_line, verify_report

    if host and inventory is None:
        raise ReportError("--host needs --inventory to reach the host",
                          hint=f"add -i INVENTORY (the inventory {host} is in)")
    live = live_identity(host, inventory, become=common.become_source(become_file, vault_file)) \
        if host and inventory else None
    v = verify_report(report, list(pubkeys), allow_simulated=allow_simulated,
                      live_identity=live, live_host=host,
                      expect={"host": expect_host, "serial": expect_serial,
                              "identity": expect_identity}, revocations=revocations,
                      key_statements=list(key_statements), require_signers=require_signers,
                      require_acceptance=require == "acceptance",
                      freshness=common.freshness(max_list_age_days, seen_lists))
    subject = subject_line(v.statement)
    if as_json:
        common.emit_json({"report": str(report), "valid": v.ok, "kind": v.kind, "subject": subject,
                   "verdict": v.verdict or None,
                    "steps": [{"step": n, "ok": ok, "detail": d} for n, ok, d in v.steps]})
        sys.exit(int(v.exit_code))
    tr = gettext_for(choose(lang)).gettext
    common.echo(tr("subject:") + " " + subject)  # first: whom this certificate is about
    for name, ok, detail in v.steps:
        mark = common.style("ok  ", fg="green") if ok else common.style("FAIL", fg="red",
                                                                          bold=True)
        # the mark keeps its colour; a step's detail is the evidence, as found
        click.echo(f"{mark} {common.step_name(name, tr):<14} {one_line(detail)}")
    if not v.ok:
        common.echo(tr("NOT VALID: see the failed step(s) above"))
    elif v.verdict == "HEALTHY":
        common.echo(tr("VALID as a health record: the node is HEALTHY, not READY (no acceptance "
                "run); see the scope step"))
    else:
        common.echo(tr("VALID: the certificate holds and the %(kind)s is READY")
                    % {"kind": tr(v.kind)})
    sys.exit(int(v.exit_code))
