"""nodecert handover, verify-bundle: what the customer receives, and its check."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli import common
from nodecert.core.textsafe import one_line

_HANDOVER_HELP = """Put a delivery's certificates into one bundle the customer verifies
offline with one command and opens in a browser.

Every node, cluster and rack certificate under the runs' reports/ goes in (where a
subject was certified more than once, the one on the newest evidence; the others are
named), with its page, the signers' public keys, the key statements and the
revocation list given, an index.html, a README.txt, and a manifest of every file's
sha256 signed by each --key (integrator and QA: give --key twice). Each certificate
must carry a signature of a key of the hand-over (--key, --pubkey, or a key they
handed over to). A node whose certificate is only a health record (HEALTHY: not an
acceptance run) is refused unless --allow-health-records, which the manifest
records. The bundle is written whole into a new directory, or not at all.

\b
Exit codes: 0 written, 1 refused because a signing key is withdrawn (by a
--key-statement: the key and its withdrawal are named), 2 refused (no certificate, one
not signed by a key of the hand-over, a health record without --allow-health-records,
the directory exists, unreadable input).

\b
Examples:
  nodecert handover runs/20261201-* runs/cluster-* --out acme-rack-07 \\
      --key nodecert.key --revocations runs/revocations.intoto.dsse.json
  nodecert handover runs/RUN --out acme --key integrator.key --key qa.key
"""


@click.command("handover", help=_HANDOVER_HELP)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="The bundle's directory (must not exist).")
@click.option("--key", "key_paths", multiple=True, required=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="A private key that signs the manifest (repeatable: every party).")
@click.option("--pubkey", "pubkeys", multiple=True, type=click.Path(path_type=Path),
              help="Another signer whose certificates go in (repeatable).")
@common.key_statement_option
@click.option("--revocations", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="The signer's revocation list, handed over with the certificates.")
@click.option("--allow-health-records", is_flag=True,
              help="Hand over nodes that hold only a health record (HEALTHY), not an "
                   "acceptance certificate; recorded in the manifest.")
@common.lang_option
@common.pdf_option
@common.json_option
@common.handle_errors
def handover_cmd(runs: tuple[Path, ...], out: Path, key_paths: tuple[Path, ...],
                 pubkeys: tuple[Path, ...], key_statements: tuple[Path, ...],
                 revocations: Path | None, allow_health_records: bool, lang: str | None,
                 pdf: bool, as_json: bool) -> None:
    from nodecert.certs.handover import build
    from nodecert.certs.i18n import choose
    from nodecert.certs.signing import load_private_key

    keys = [load_private_key(p) for p in key_paths]
    h = build(list(runs), out, keys, pubkeys=list(pubkeys),
              key_statements=list(key_statements), revocations=revocations,
              lang=choose(lang), pdf=pdf, allow_health_records=allow_health_records)
    if as_json:
        common.emit_json({"bundle": str(h.out), "signers": h.signers, "superseded": h.superseded,
                   "certificates": [{"kind": c.kind, "name": c.name, "source": str(c.source),
                                     "verdict": c.statement["predicate"].get("verdict")}
                                    for c in h.certificates]})
        return
    for c in h.certificates:
        common.echo(f"{c.kind:<8} {c.name:<24} {c.statement['predicate'].get('verdict')}")
    for old in h.superseded:
        common.echo(f"not handed over (newer evidence): {old}")
    common.echo(f"bundle: {h.out} ({len(h.certificates)} certificates); open {h.out}/index.html; "
         f"verify with `nodecert verify-bundle {h.out} --pubkey SIGNER.pub`")


_VERIFY_BUNDLE_HELP = """Check a hand-over bundle offline, everything, in one command.

The manifest's signature against the keys you trust (--pubkey: the signer's key you
received separately, never the bundle's copy; the bundle's key hand-overs and
withdrawals apply, and those given with --key-statement), with --require-signers N
different parties; every file byte for byte against the manifest; nothing unlisted,
no link; then every certificate as `nodecert verify` checks it (signature,
statement, validity, revocation, subjects, verdict, scope, SIMULATED refused unless
--allow-simulated). Revocation applies the bundle's list and the signer's current
one given with --revocations (a bundle built before a revocation fails then); the
revocations step names each list applied and its date, or says none was. A node
certificate that is only a health record (HEALTHY) fails unless
--allow-health-records.

\b
Exit codes: 0 the bundle holds and every certificate is valid and READY, 1 a step
failed (a changed byte, a missing signer, a withdrawn key, a revoked or NOT READY
certificate, a health record without --allow-health-records), 2 bad input.

\b
Examples:
  nodecert verify-bundle acme-rack-07 --pubkey integrator.pub
  nodecert verify-bundle acme --pubkey integrator.pub --pubkey qa.pub --require-signers 2
  nodecert verify-bundle acme --pubkey integrator.pub --revocations revocations.intoto.dsse.json \\
      --key-statement old.withdrawal.dsse.json --max-list-age-days 7
"""


@click.command("verify-bundle", help=_VERIFY_BUNDLE_HELP)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path), help="Trusted public key (repeatable).")
@click.option("--require-signers", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many different trusted keys must have signed.")
@click.option("--allow-simulated", is_flag=True,
              help="Accept certificates of simulated hardware (lab, tests).")
@click.option("--allow-health-records", is_flag=True,
              help="Accept node certificates that are health records (HEALTHY), not "
                   "acceptance certificates.")
@click.option("--revocations", type=click.Path(path_type=Path, dir_okay=False),
              help="The signer's current revocation list, applied with the bundle's own: a "
                   "certificate revoked after the bundle was built fails.")
@common.freshness_options
@common.key_statement_option
@common.lang_option
@common.json_option
@common.handle_errors
def verify_bundle_cmd(bundle: Path, pubkeys: tuple[Path, ...], require_signers: int,
                      allow_simulated: bool, allow_health_records: bool,
                      revocations: Path | None, max_list_age_days: float | None,
                      seen_lists: Path | None, key_statements: tuple[Path, ...],
                      lang: str | None, as_json: bool) -> None:
    from nodecert.certs.bundlecheck import check
    from nodecert.certs.i18n import choose, gettext_for

    b = check(bundle, list(pubkeys), require_signers=require_signers,
              allow_simulated=allow_simulated, allow_health_records=allow_health_records,
              revocations=revocations, key_statements=list(key_statements),
              freshness=common.freshness(max_list_age_days, seen_lists))
    if as_json:
        common.emit_json({"bundle": str(bundle), "valid": b.ok,
                   "steps": [{"step": n, "ok": ok, "detail": d} for n, ok, d in b.steps],
                   "listed": b.listed, "not_checked": b.unchecked,
                   "certificates": {f: {"valid": v.ok, "steps": [
                       {"step": n, "ok": ok, "detail": d} for n, ok, d in v.steps]}
                       for f, v in b.certificates.items()}})
        sys.exit(int(b.exit_code))

    def mark(ok: bool) -> str:
        return common.style("ok  ", fg="green") if ok else common.style("FAIL", fg="red", bold=True)

    tr = gettext_for(choose(lang)).gettext
    for name, ok, detail in b.steps:
        click.echo(f"{mark(ok)} {common.step_name(name, tr):<14} {one_line(detail)}")
    for f, v in b.certificates.items():
        click.echo(f"{mark(v.ok)} {f}")
        for name, ok, detail in v.steps:
            if not ok:
                click.echo(f"       {common.step_name(name, tr):<14} {one_line(detail)}")
    # a valid health record (--allow-health-records) is counted as one, never as READY
    health = sum(v.ok and v.verdict == "HEALTHY" for v in b.certificates.values())
    good = sum(v.ok for v in b.certificates.values()) - health
    if b.ok and health:
        common.echo(tr("VALID: the bundle holds; %(good)d certificates valid and READY, %(health)d "
                "valid health records (HEALTHY)") % {"good": good, "health": health})
    elif b.ok:
        common.echo(tr("VALID: the bundle holds and all %(num)d certificates are valid and READY")
             % {"num": good})
    else:
        # Counted against what the manifest lists: a bundle refused before its
        # certificates were read says how many it holds and names them, never "0 of 0".
        unread = tr("not checked: the bundle was refused before it")
        for f in b.unchecked:
            click.echo(f"{mark(False)} {one_line(f)}")
            click.echo(f"       {unread}")
        common.echo(tr("NOT VALID: %(good)d of %(num)d certificates valid and READY; see the "
                "failed step(s) above") % {"good": good,
                                            "num": max(len(b.listed), len(b.certificates))})
    sys.exit(int(b.exit_code))
