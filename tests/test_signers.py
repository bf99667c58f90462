"""Keys an integrator can keep safe: two-party signing (cosign, --require-signers), key
rotation (a new key handed over by the old, chains followed) and withdrawal (a lost
key's signatures count no more), through the CLI and the library, on a certificate of
the recorded H200 run."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from nodecert.certs import keyring
from nodecert.certs.certify import certify
from nodecert.certs.signing import (
    add_signature,
    init_key,
    keyid,
    load_private_key,
    load_public_key,
    sign_envelope,
)
from nodecert.certs.verify import verify_report
from nodecert.cli import main
from support.runs import make_run, passing, recorded_results

NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)


def certificate(tmp_path: Path, key: Path) -> Path:
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results()),
                                     "started": 1795995981.4, "finished": 1795996129.9}})
    return certify(run, load_private_key(key), now=dt.datetime(2026, 11, 30,
                                                                tzinfo=dt.UTC)).nodes[0].envelope


def steps(v: object) -> dict[str, tuple[bool, str]]:
    return {n: (ok, d) for n, ok, d in v.steps}  # type: ignore[attr-defined]


def nodecert(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_two_parties_sign_and_verify_can_require_both(tmp_path: Path) -> None:
    integ, qa = init_key(tmp_path / "i", name="integrator"), init_key(tmp_path / "q", name="qa")
    cert = certificate(tmp_path, integ.private)
    pubs = [integ.public, qa.public]
    one = verify_report(cert, pubs, now=NOW, require_signers=2)
    assert not one.ok and "2 different signers required" in steps(one)["signature"][1]
    code, out = nodecert("cosign", str(cert), "--key", str(qa.private), "--pubkey",
                         str(integ.public))
    assert code == 0 and "(2 signatures)" in out, out
    both = verify_report(cert, pubs, now=NOW, require_signers=2)
    assert steps(both)["signature"] == (True, f"valid, signed by 2 trusted keys: "
                                              f"{integ.keyid[:16]}..., {qa.keyid[:16]}...")
    # Two signatures by the same party are one signer; one trusted key is not two.
    assert not verify_report(cert, [integ.public], now=NOW, require_signers=2).ok
    code, out = nodecert("cosign", str(cert), "--key", str(qa.private), "--pubkey",
                         str(integ.public))
    assert code == 2 and "has signed this already" in out
    # A changed byte of the statement breaks both signatures.
    env = json.loads(cert.read_text())
    payload = json.loads(base64.b64decode(env["payload"]))
    payload["predicate"]["host"] = "n2"
    env["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    cert.write_text(json.dumps(env))
    assert not verify_report(cert, pubs, now=NOW).ok


def test_cosign_refuses_what_no_trusted_key_signed_and_writes_nothing(tmp_path: Path) -> None:
    a, b, c = (init_key(tmp_path / k, name=k) for k in "abc")
    cert = certificate(tmp_path, a.private)
    before = cert.read_bytes()
    code, out = nodecert("cosign", str(cert), "--key", str(c.private), "--pubkey",
                         str(b.public))
    assert code == 2 and "not signed by a key given with --pubkey" in out
    assert cert.read_bytes() == before


def test_a_rotated_key_is_trusted_through_its_hand_over_and_chains_are_followed(
        tmp_path: Path) -> None:
    a = init_key(tmp_path / "k", name="a")
    code, out = nodecert("keys", "rotate", "--key", str(a.private), "--name", "b",
                         "--out", str(tmp_path / "k"))
    assert code == 0, out
    rot_ab = tmp_path / "k" / "b.rotation.dsse.json"
    _, _, rot_bc = keyring.rotate(load_private_key(tmp_path / "k" / "b.key"), tmp_path / "k",
                                  "c")
    cert = certificate(tmp_path, tmp_path / "k" / "c.key")
    alone = verify_report(cert, [a.public], now=NOW)
    assert not alone.ok and "not trusted" in steps(alone)["signature"][1]
    assert not verify_report(cert, [a.public], now=NOW, key_statements=[rot_bc]).ok
    chained = verify_report(cert, [a.public], now=NOW, key_statements=[rot_bc, rot_ab])
    assert steps(chained)["signature"][0], chained.steps
    code, out = nodecert("verify", str(cert), "--pubkey", str(a.public), "--key-statement",
                         str(rot_ab), "--key-statement", str(rot_bc), "--allow-simulated")
    assert "ok   signature" in out, out


def test_a_hand_over_not_signed_by_both_keys_or_naming_another_key_is_ignored(
        tmp_path: Path) -> None:
    a, b = init_key(tmp_path / "a", name="a"), init_key(tmp_path / "b", name="b")
    mallory = load_private_key(b.private)
    pem = load_public_key(b.public).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    body = {"schema": keyring.SCHEMA, "action": "rotate", "from": a.keyid, "to": b.keyid,
            "public_key": pem, "issued": "2026-12-01T00:00:00+00:00"}
    only_new = sign_envelope(json.dumps(body).encode(), keyring.KEY_PAYLOAD_TYPE, mallory)
    ring = keyring.resolve([load_public_key(a.public)], [("forged", only_new, body)])
    assert b.keyid not in ring.trusted
    assert ring.notes == ["forged: ignored, not signed by both the old and the new key"]
    wrong_id = {**body, "to": "0" * 64}
    ring = keyring.resolve([load_public_key(a.public)], [("w", only_new, wrong_id)])
    assert ring.notes == ["w: ignored, its new key does not match its key id"]


def test_a_withdrawn_key_signs_nothing_that_verifies_until_a_key_that_holds_cosigns(
        tmp_path: Path) -> None:
    a = init_key(tmp_path / "k", name="a")
    _, b_pub, rot = keyring.rotate(load_private_key(a.private), tmp_path / "k", "b",
                                   now="2026-11-01T00:00:00+00:00")
    cert = certificate(tmp_path, a.private)
    gone = tmp_path / "a.withdrawal.dsse.json"
    code, out = nodecert("keys", "withdraw", a.keyid, "--key", str(tmp_path / "k" / "b.key"),
                         "--reason", "laptop stolen", "--since", "2026-11-15T00:00:00",
                         "--out", str(gone))
    assert code == 0, out
    ok_before = verify_report(cert, [a.public], now=NOW, key_statements=[rot])
    assert steps(ok_before)["signature"][0]
    v = verify_report(cert, [a.public], now=NOW, key_statements=[rot, gone])
    assert not v.ok
    why = steps(v)["signature"][1]
    assert why.startswith(f"signed only by withdrawn keys: {a.keyid[:16]}... (laptop stolen, "
                          "since 2026-11-15T00:00:00+00:00)") and "nodecert cosign" in why
    code, _ = nodecert("cosign", str(cert), "--key", str(tmp_path / "k" / "b.key"),
                       "--pubkey", str(a.public))
    assert code == 0
    assert steps(verify_report(cert, [a.public], now=NOW,
                               key_statements=[rot, gone]))["signature"][0]
    # A hand-over the withdrawn key made after its withdrawal is not followed.
    _, _, late = keyring.rotate(load_private_key(a.private), tmp_path / "k", "evil",
                                now="2026-11-20T00:00:00+00:00")
    ring = keyring.load_keyring([a.public], [rot, gone, late])
    evil = keyid(load_public_key(tmp_path / "k" / "evil.pub"))
    assert evil not in ring.trusted and b_pub.exists()
    assert any("after it was withdrawn" in n for n in ring.notes)


def test_a_withdrawal_signed_by_a_stranger_changes_nothing(tmp_path: Path) -> None:
    a, x = init_key(tmp_path / "a", name="a"), init_key(tmp_path / "x", name="x")
    gone = keyring.withdraw(load_private_key(x.private), a.keyid, "spite",
                            tmp_path / "w.dsse.json")
    ring = keyring.load_keyring([a.public], [gone])
    assert ring.withdrawn == {} and [keyid(k) for k in ring.keys] == [a.keyid]


def test_bad_key_statements_are_clear_errors(tmp_path: Path) -> None:
    a = init_key(tmp_path / "a", name="a")
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    cert = certificate(tmp_path, a.private)
    code, out = nodecert("verify", str(cert), "--pubkey", str(a.public), "--key-statement",
                         str(junk))
    assert code == 2 and "junk.json: not a key statement" in out
    with pytest.raises(keyring.KeyStatementError, match="is not a key id"):
        keyring.withdraw(load_private_key(a.private), "abc", "r", tmp_path / "w")
    code, out = nodecert("verify", str(cert), "--pubkey", str(a.public),
                         "--require-signers", "0")
    assert code == 2


def test_add_signature_keeps_the_statement_bytes(tmp_path: Path) -> None:
    a, b = init_key(tmp_path / "a", name="a"), init_key(tmp_path / "b", name="b")
    env = sign_envelope(b"{}", "application/vnd.in-toto+json", load_private_key(a.private))
    two = add_signature(env, load_private_key(b.private))
    assert two["payload"] == env["payload"] and two["signatures"][0] == env["signatures"][0]
    assert [s["keyid"] for s in two["signatures"]] == [a.keyid, b.keyid]
