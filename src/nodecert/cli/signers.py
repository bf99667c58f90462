"""nodecert keys (init, rotate, withdraw) and cosign: the keys certificates are signed
with, handed over and withdrawn, and a second party's signature."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nodecert.cli.common import (
    DEFAULT_KEY_DIR,
    echo,
    emit_json,
    handle_errors,
    json_option,
    key_statement_option,
)

_KEYS_INIT_HELP = """Create a signing key pair: NAME.key (private, mode 0600) and NAME.pub.

ECDSA P-256 by default (what HSMs and cloud KMSs offer, so moving the key into
one later needs no rotation); Ed25519 on request. Never overwrites a key.
Give customers the .pub: it is what `nodecert verify --pubkey` trusts.

\b
Exit codes: 0 created, 2 refused (exists, bad type).

\b
Examples:
  nodecert keys init
  nodecert keys init --type ed25519 --out /etc/nodecert/keys
"""


@click.group()
def keys() -> None:
    """Signing keys for certificates."""


@keys.command("init", help=_KEYS_INIT_HELP)
@click.option("--type", "key_type", type=click.Choice(["ecdsa-p256", "ed25519"]),
              default="ecdsa-p256", show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_KEY_DIR,
              show_default=True, help="Directory for nodecert.key and nodecert.pub.")
@handle_errors
def keys_init(key_type: str, out_dir: Path) -> None:
    from nodecert.certs.signing import init_key

    kp = init_key(out_dir.expanduser(), key_type)
    echo(f"private key: {kp.private} (0600; keep it secret)")
    echo(f"public key:  {kp.public} (give this to whoever verifies)")
    echo(f"key id:      {kp.keyid}")



_KEYS_ROTATE_HELP = """Hand signing over to a new key: NAME.key/NAME.pub in --out, and
NAME.rotation.dsse.json, signed by the old key (the hand-over) and the new one (proof
it is held).

Verifiers who trust the old key's .pub then trust the new one when given the
rotation statement (`verify --key-statement`, and in every hand-over bundle); chains
are followed. Keep the old key until the customers have the statement.

\b
Exit codes: 0 created, 2 refused (a key of that name exists, unreadable old key).

\b
Examples:
  nodecert keys rotate --key ~/.config/nodecert/keys/nodecert.key --name nodecert-2027
"""


@keys.command("rotate", help=_KEYS_ROTATE_HELP)
@click.option("--key", "key_path", required=True, type=click.Path(path_type=Path,
              dir_okay=False), help="The private key in use now (the one handing over).")
@click.option("--name", required=True, help="The new key's file name stem.")
@click.option("--type", "key_type", type=click.Choice(["ecdsa-p256", "ed25519"]),
              default="ecdsa-p256", show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_KEY_DIR,
              show_default=True, help="Directory for the new key and the statement.")
@json_option
@handle_errors
def keys_rotate(key_path: Path, name: str, key_type: str, out_dir: Path,
                as_json: bool) -> None:
    from nodecert.certs.keyring import rotate
    from nodecert.certs.signing import keyid, load_private_key, load_public_key

    old = load_private_key(key_path)
    priv, pub, statement = rotate(old, out_dir.expanduser(), name, key_type)
    new_id = keyid(load_public_key(pub))
    if as_json:
        emit_json({"private": str(priv), "public": str(pub), "statement": str(statement),
                   "from": keyid(old.public_key()), "to": new_id})
        return
    echo(f"new private key: {priv} (0600; keep it secret)")
    echo(f"new public key:  {pub}")
    echo(f"hand-over:       {statement} (give it to verifiers with the certificates)")
    echo(f"key id:          {keyid(old.public_key())[:16]}... -> {new_id}")


_KEYS_WITHDRAW_HELP = """Withdraw a signing key (lost, leaked, or retired): a statement,
signed by a key verifiers trust, that KEYID's signatures count no more.

A certificate signed only by a withdrawn key no longer verifies; have a key that
holds sign it again (`nodecert cosign`). Of the hand-overs the withdrawn key made,
verifiers follow only those to the keys --keep names and to the signing key itself:
whoever holds a stolen key can write a hand-over with any date. Give the statement to
verifiers (`verify --key-statement`; a hand-over bundle carries it). A key that the
statements given with --key-statement withdraw cannot sign a withdrawal.

\b
Exit codes: 0 written, 2 refused (not a key id, no reason, unreadable key, the
signing key withdrawn).

\b
Examples:
  nodecert keys withdraw 3f2a...e9 --key nodecert-2027.key --reason "laptop stolen" \\
      --since 2026-11-30T00:00:00+00:00 --out old.withdrawal.dsse.json
  nodecert keys withdraw 3f2a...e9 --key 3f2a.key --reason retired --keep 9c01...4d \\
      --out old.withdrawal.dsse.json
"""


@keys.command("withdraw", help=_KEYS_WITHDRAW_HELP)
@click.argument("target")
@click.option("--key", "key_path", required=True, type=click.Path(path_type=Path,
              dir_okay=False), help="A private key verifiers trust (the withdrawn key itself, "
                                    "or another of the chain).")
@click.option("--reason", required=True, help="Why the key is withdrawn.")
@click.option("--since", help="From when its hand-overs are not followed (ISO 8601; "
                              "default: now).")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the statement (*.withdrawal.dsse.json).")
@click.option("--keep", multiple=True, metavar="KEYID",
              help="A key the withdrawn key handed over to that still stands (repeatable; "
                   "the signing key always does).")
@key_statement_option
@handle_errors
def keys_withdraw(target: str, key_path: Path, reason: str, since: str | None,
                  out: Path, keep: tuple[str, ...], key_statements: tuple[Path, ...]) -> None:
    from nodecert.certs.keyring import KeyStatementError, read_statement, resolve, withdraw
    from nodecert.certs.signing import keyid, load_private_key

    key = load_private_key(key_path)
    own = keyid(key.public_key())
    ring = resolve([key.public_key()], [(str(p), *read_statement(p)) for p in key_statements])
    if own in ring.withdrawn:
        raise KeyStatementError(f"key {own[:16]}... is withdrawn ({ring.withdrawn[own][1]}): "
                                "it withdraws nothing", hint="sign with a key that holds")
    withdraw(key, target.strip().lower(), reason, out, since=since,
             keep=tuple(k.strip().lower() for k in keep))
    echo(f"withdrawal of key {target[:16]}... written to {out}: give it to verifiers")


@keys.command("public")
@click.argument("key", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the public key (PEM).")
@handle_errors
def keys_public(key: Path, out: Path) -> None:
    """Write the public key of a signing key -- a key file, or a key on an HSM named by a
    pkcs11: URI -- for verifiers (`verify --pubkey`).

    \b
    Examples:
      nodecert keys public 'pkcs11:token=nodecert;object=signing-key' --out nodecert.pub
    """
    from cryptography.hazmat.primitives import serialization

    from nodecert.certs.signing import keyid, load_private_key
    from nodecert_node.contract import write_atomic

    pub = load_private_key(key).public_key()
    write_atomic(str(out), pub.public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo))
    echo(f"public key: {out} (key id {keyid(pub)})")


@keys.command("id")
@click.argument("pubkey", type=click.Path(path_type=Path, dir_okay=False))
@handle_errors
def keys_id(pubkey: Path) -> None:
    """Print a public key's id (the sha256 of its DER form), as certificates name it."""
    from nodecert.certs.signing import keyid, load_public_key

    echo(keyid(load_public_key(pubkey)))


_COSIGN_HELP = """Add a signature to certificates already signed: a second party's (QA
after the integrator, the customer's acceptance), or a key that holds after another
was withdrawn.

The signed statement is not changed: the new signature is over the same bytes, so the
first signature still verifies. Each file is checked to be a certificate signed by
a key you trust (--pubkey) before it is signed, and rewritten whole.
`nodecert verify --require-signers 2` then insists on both.

\b
Exit codes: 0 signed, 2 refused (not signed by a trusted key, signed by this key
already, unreadable).

\b
Examples:
  nodecert cosign runs/RUN/reports/*.intoto.dsse.json --key qa.key --pubkey integrator.pub
"""


@click.command("cosign", help=_COSIGN_HELP)
@click.argument("certificates", nargs=-1, required=True,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--key", "key_path", required=True, type=click.Path(path_type=Path,
              dir_okay=False), help="Your private key.")
@click.option("--pubkey", "pubkeys", multiple=True, required=True,
              type=click.Path(path_type=Path), help="A key whose signature the certificate "
                                                    "must already carry (repeatable).")
@handle_errors
def cosign_cmd(certificates: tuple[Path, ...], key_path: Path,
               pubkeys: tuple[Path, ...]) -> None:
    from nodecert.certs.signing import (
        SignatureError,
        add_signature,
        keyid,
        load_private_key,
        load_public_key,
        verify_envelope,
    )
    from nodecert.certs.verify import ReportError, read_envelope
    from nodecert_node.contract import write_atomic

    key = load_private_key(key_path)
    trusted = [load_public_key(p) for p in pubkeys]
    signed = []
    for cert in certificates:  # every file checked before any is written
        env = read_envelope(cert)
        try:
            verify_envelope(env, trusted)
        except SignatureError as exc:
            raise ReportError(f"{cert}: not signed by a key given with --pubkey ({exc})",
                              hint="sign only what the first party signed") from exc
        signed.append((cert, add_signature(env, key)))
    for cert, env in signed:
        write_atomic(str(cert), json.dumps(env, indent=1).encode() + b"\n")
        echo(f"{cert}: signed by {keyid(key.public_key())[:16]}... "
             f"({len(env['signatures'])} signatures)")
