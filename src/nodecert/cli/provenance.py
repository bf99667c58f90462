"""nodecert provenance: nodecert's own SBOM and a release's signed checksums."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodecert.cli.common import echo, handle_errors


@click.group()
def provenance() -> None:
    """nodecert's own provenance: its SBOM, a release's signed checksums (docs/releases.md)."""


@provenance.command("sbom")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the CycloneDX JSON.")
@click.option("--package", "into_package", is_flag=True,
              help="Also write it into the nodecert package itself, where a wheel built "
                   "from this checkout carries it (an editable install).")
@handle_errors
def sbom_cmd(out: Path, into_package: bool) -> None:
    """Write the CycloneDX SBOM of this nodecert and its run-time dependencies, as
    installed here.

    \b
    Examples:
      nodecert provenance sbom --out dist/nodecert-0.1.0.cdx.json
      nodecert provenance sbom --out dist/nodecert-0.1.0.cdx.json --package
    """
    from nodecert.certs.release import SBOM_IN_PACKAGE, sbom
    from nodecert_node.contract import write_atomic

    text = sbom().encode()
    write_atomic(str(out), text)
    echo(f"SBOM: {out}")
    if into_package:
        SBOM_IN_PACKAGE.parent.mkdir(exist_ok=True)
        write_atomic(str(SBOM_IN_PACKAGE), text)
        echo(f"and in the package: {SBOM_IN_PACKAGE}")


@provenance.command("sign")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--key", "key_path", required=True, type=click.Path(path_type=Path,
              dir_okay=False), help="The project's signing key (a file or a pkcs11: URI).")
@handle_errors
def sign_cmd(directory: Path, key_path: Path) -> None:
    """Write SHA256SUMS for every file of a release directory, and its signed in-toto
    Statement (SHA256SUMS.intoto.dsse.json).

    \b
    Examples:
      nodecert provenance sign dist/ --key project.key
    """
    from nodecert.certs.release import sign_release
    from nodecert.certs.signing import load_private_key

    sums, signed = sign_release(directory, load_private_key(key_path))
    echo(f"checksums: {sums}; signed: {signed}")


@provenance.command("verify")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path), help="The project's public key.")
@handle_errors
def verify_cmd(directory: Path, pubkeys: tuple[Path, ...]) -> None:
    """Check a release directory against its signed checksums before installing it.

    \b
    Exit codes: 0 every file is the one signed, 1 not, 2 bad input.

    \b
    Examples:
      nodecert provenance verify dist/ --pubkey nodecert-project.pub
    """
    from nodecert.certs.release import verify_release
    from nodecert.certs.signing import load_public_key

    problems = verify_release(directory, [load_public_key(p) for p in pubkeys])
    for p in problems:
        echo(f"FAIL {p}")
    echo("NOT VALID" if problems else "VALID: every file is the one signed")
    sys.exit(1 if problems else 0)
