"""nodecert rack: a rack-scale NVLink domain (GB200/GB300 NVL72, NVL36) validated as one
unit, and the rack certificate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nodecert.cli import common
from nodecert.core.textsafe import one_line


@click.group("rack")
def rack() -> None:
    """Prove a rack-scale NVLink domain: its trays together, switch trays, power, cooling."""


_VALIDATE_HELP = """Validate a rack (an NVLink domain) as one unit: every compute tray's
place in the domain (domain.fabric: each GPU registered, healthy, in the rack's clique;
domain.imex where the rack expects IMEX), every tray in the same clique of the same
cluster, the NVLink switch trays (health, every NVLink port up), the power shelves
(supplies, input, redundancy) and the CDU (leaks, pumps, coolant temperatures, flow and
pressure against the unit's own thresholds over consecutive samples) read over
Redfish, and one firmware version per component across the domain (the rack's recipe
where it gives one). Where the trays name a job engine (nodecert_cluster: Slurm or
mpirun), the NVLink domain is measured under load: all_reduce_perf over every GPU of the
rack (NCCL over MNNVL, against the GPU model's floor) and a bandwidth sweep of GPU pairs
across trays that names a slow GPU in two rounds and one confirmation. The rack comes
from the inventory's nodecert_rack (docs/rack.md). With --key, the run is signed as a
rack certificate.

\b
Exit codes: 0 rack PASS/WARN, 1 FAIL or ERROR (the tray, GPU or component named),
2 bad input (no rack in the inventory, unknown --rack, unreadable password file).

\b
Examples:
  nodecert rack validate -i site.ini --rack rack-a1 --key keys/nodecert.key
  nodecert rack validate -i /var/tmp/nodecert-lab/state/inventory.ini --json
  nodecert rack validate -i site.ini --no-load    # the domain's state only, no jobs
"""


@rack.command("validate", help=_VALIDATE_HELP)
@common.inventory_option
@click.option("--rack", "rack_name", metavar="NAME",
              help="The rack to validate (default: the inventory's only rack).")
@click.option("--key", "key_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Sign the run as a rack certificate with this private key.")
@click.option("--load/--no-load", default=True, show_default=True,
              help="Measure the NVLink domain under load (all-reduce and sweep) where the "
                   "trays name a job engine.")
@common.runs_dir_option
@common.json_option
@common.become_options
@common.handle_errors
def rack_validate_cmd(path: Path, rack_name: str | None, key_path: Path | None,
                      load: bool, runs_dir: Path, as_json: bool, become_file: Path | None,
                      vault_file: Path | None) -> None:
    from nodecert.certs.rack import certify_rack
    from nodecert.certs.revocations import DEFAULT_NAME
    from nodecert.certs.signing import load_private_key
    from nodecert.rack.validate import RackRequest, rack_validate

    key = load_private_key(key_path) if key_path else None  # a bad key fails before work
    request = RackRequest(path, rack=rack_name, runs_dir=runs_dir,
                          become=common.become_source(become_file, vault_file), load=load)
    rec = rack_validate(request, progress=lambda line: common.echo(line, err=True))
    run_dir = rec.run_dir
    cert: dict[str, Any] = {}
    if key is not None:
        env, html, verdict = certify_rack(run_dir, key, revocations=run_dir.parent / DEFAULT_NAME)
        cert = {"certificate": str(env), "html": str(html), "certificate_verdict": verdict}
    common.end_group_run(rec, cert, as_json=as_json, what=f"rack {rec.rack_name}",
                         fields={"rack": rec.rack_name, "not_judged": rec.not_judged,
                                 "seconds": rec.seconds},
                         notes=[f"not judged: {one_line(n)}" for n in rec.not_judged],
                         findings_max=20)


@rack.command("certify")
@common.certify_options
@common.handle_errors
def rack_certify_cmd(run_dir: Path, key_path: Path, valid_days: int, max_age_days: float,
                     revocations: Path | None, lang: str | None, pdf: bool) -> None:
    """Sign a rack run as a rack certificate (and render its page): its subjects are
    every compute tray's and switch tray's identity; it is entered on the signer's
    revocation list, where it supersedes older certificates of the same rack.

    \b
    Example:
      nodecert rack certify runs/rack-20261202-210000-ab12cd --key keys/nodecert.key
    """
    from nodecert.certs.html import Rendering
    from nodecert.certs.i18n import choose
    from nodecert.certs.rack import certify_rack
    from nodecert.certs.revocations import DEFAULT_NAME
    from nodecert.certs.signing import load_private_key

    env, html, verdict = certify_rack(run_dir, load_private_key(key_path),
                                      valid_days=valid_days, max_age_days=max_age_days,
                                      revocations=revocations or run_dir.parent / DEFAULT_NAME,
                                      rendering=Rendering(choose(lang), pdf))
    common.echo(f"certificate: {env} ({verdict}), page: {html}")


__all__ = ["rack"]
