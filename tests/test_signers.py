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
    assert any("its withdrawal does not keep this hand-over" in n for n in ring.notes)


@pytest.mark.parametrize("issued", ["2026-10-01T00:00:00+00:00", "", "0"])
def test_a_stolen_withdrawn_key_cannot_backdate_a_hand_over(tmp_path: Path,
                                                            issued: str) -> None:
    """The thief holds the withdrawn key A and writes a hand-over A -> EVIL dated before
    the withdrawal (or with no date): no verifier follows it, and a certificate EVIL
    signs does not verify. Only the hand-over the withdrawal keeps (A -> B) stands."""
    a = init_key(tmp_path / "k", name="a")
    _, _, rot = keyring.rotate(load_private_key(a.private), tmp_path / "k", "b",
                               now="2026-11-01T00:00:00+00:00")
    b_id = keyid(load_public_key(tmp_path / "k" / "b.pub"))
    gone = tmp_path / "a.withdrawal.dsse.json"
    code, out = nodecert("keys", "withdraw", a.keyid, "--key", str(a.private), "--reason",
                         "stolen", "--since", "2026-11-15T00:00:00", "--keep", b_id,
                         "--out", str(gone))
    assert code == 0, out
    _, _, late = keyring.rotate(load_private_key(a.private), tmp_path / "t", "evil",
                                now=issued or None)
    if issued == "":  # no date at all
        env, body = keyring.read_statement(late)
        body.pop("issued")
        late.write_text(json.dumps(sign_both(env, body, a.private, tmp_path / "t" / "evil.key")))
    cert = certificate(tmp_path, tmp_path / "t" / "evil.key")
    v = verify_report(cert, [a.public], now=NOW, key_statements=[rot, gone, late])
    assert not v.ok and "not trusted" in steps(v)["signature"][1], v.steps
    ring = keyring.load_keyring([a.public], [rot, gone, late])
    assert b_id in ring.trusted and b_id not in ring.withdrawn
    # The thief's own withdrawal of A keeping EVIL does not widen what is kept.
    evil = keyid(load_public_key(tmp_path / "t" / "evil.pub"))
    own = keyring.withdraw(load_private_key(a.private), a.keyid, "mine", tmp_path / "o.json",
                           keep=(evil,))
    assert evil not in keyring.load_keyring([a.public], [rot, gone, late, own]).trusted
    # Before the fix the self-stated date decided: a 2026-10 hand-over was followed.
    # A hand-over a third key that holds countersigned is followed.
    c = init_key(tmp_path / "c", name="c")
    env, body = keyring.read_statement(late)
    env["signatures"] += sign_envelope(base64.b64decode(env["payload"]),
                                       keyring.KEY_PAYLOAD_TYPE,
                                       load_private_key(c.private))["signatures"]
    late.write_text(json.dumps(env))
    ring = keyring.load_keyring([a.public, c.public], [rot, gone, late])
    assert evil in ring.trusted


def sign_both(env: dict[str, object], body: dict[str, object], old: Path,
              new: Path) -> dict[str, object]:
    raw = json.dumps(body).encode()
    out = sign_envelope(raw, keyring.KEY_PAYLOAD_TYPE, load_private_key(old))
    out["signatures"] += sign_envelope(raw, keyring.KEY_PAYLOAD_TYPE,  # type: ignore[operator]
                                       load_private_key(new))["signatures"]
    return out


def test_a_withdrawn_key_withdraws_nothing_and_signs_no_bundle(tmp_path: Path) -> None:
    """A thief holding key A, which its owner withdrew, cannot withdraw the owner's new
    key B: the verifier ignores it, and `keys withdraw` and `handover` refuse to sign
    with a key the statements withdraw."""
    a = init_key(tmp_path / "k", name="a")
    _, _, rot = keyring.rotate(load_private_key(a.private), tmp_path / "k", "b")
    b_id = keyid(load_public_key(tmp_path / "k" / "b.pub"))
    gone = keyring.withdraw(load_private_key(a.private), a.keyid, "stolen",
                            tmp_path / "a.w.json", keep=(b_id,))
    spite = keyring.withdraw(load_private_key(a.private), b_id, "spite", tmp_path / "b.w.json")
    ring = keyring.load_keyring([a.public], [rot, gone, spite])
    assert b_id in ring.trusted and b_id not in ring.withdrawn, ring.notes
    assert any("signed only by withdrawn keys" in n for n in ring.notes)
    # Two keys withdrawing each other: nobody can tell the thief, both are withdrawn.
    mutual = keyring.withdraw(load_private_key(tmp_path / "k" / "b.key"), a.keyid, "x",
                              tmp_path / "m.json")
    spite2 = keyring.withdraw(load_private_key(a.private), b_id, "y", tmp_path / "m2.json")
    both = keyring.load_keyring([a.public], [rot, mutual, spite2])
    assert {a.keyid, b_id} <= set(both.withdrawn)
    code, out = nodecert("keys", "withdraw", b_id, "--key", str(a.private), "--reason", "r",
                         "--key-statement", str(gone), "--out", str(tmp_path / "no.json"))
    assert code == 2 and "is withdrawn" in out and not (tmp_path / "no.json").exists()
    from nodecert.certs.handover import HandoverError, build
    with pytest.raises(HandoverError, match="is withdrawn"):
        build([tmp_path], tmp_path / "bundle", [load_private_key(a.private)],
              pubkeys=[a.public], key_statements=[rot, gone])
    assert not (tmp_path / "bundle").exists()


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


def test_a_key_and_its_own_hand_over_are_one_signer(tmp_path: Path) -> None:
    """A signs, A's rotation B cosigns: that is one party, not the two that
    --require-signers 2 asks for, whether the verifier trusts B through the hand-over
    or was given both keys; in verify-bundle too. Before, it counted as two."""
    a = init_key(tmp_path / "k", name="a")
    _, b_pub, rot = keyring.rotate(load_private_key(a.private), tmp_path / "k", "b")
    cert = certificate(tmp_path, a.private)
    code, _ = nodecert("cosign", str(cert), "--key", str(tmp_path / "k" / "b.key"),
                       "--pubkey", str(a.public))
    assert code == 0
    for pubs in ([a.public], [a.public, b_pub]):
        v = verify_report(cert, pubs, now=NOW, key_statements=[rot], require_signers=2)
        ok, why = steps(v)["signature"]
        assert not ok and "(1 party: a key and its hand-over are one)" in why \
            and "2 different signers required" in why, why
    # A second party (QA) makes two.
    qa = init_key(tmp_path / "q", name="qa")
    assert nodecert("cosign", str(cert), "--key", str(qa.private), "--pubkey",
                    str(a.public))[0] == 0
    assert verify_report(cert, [a.public, qa.public], now=NOW, key_statements=[rot],
                         require_signers=2).ok
    from nodecert.certs.bundlecheck import check
    from nodecert.certs.handover import build
    out = tmp_path / "bundle"
    build([cert.parent.parent], out, [load_private_key(a.private),
                                      load_private_key(tmp_path / "k" / "b.key")],
          key_statements=[rot])
    b = check(out, [a.public], now=NOW, require_signers=2, allow_simulated=True)
    manifest = [(ok, d) for n, ok, d in b.steps if n == "manifest"]
    assert not b.ok and manifest and not manifest[0][0] and "1 party" in manifest[0][1]


def test_a_huge_key_statement_is_refused_after_reading_one_byte_past_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 MiB "key statement" in a bundle's keys/: refused having read at most the
    limit and one byte (before, the whole file was read, then cut)."""
    import io
    big = tmp_path / "x.rotation.dsse.json"
    with big.open("wb") as f:
        f.truncate(64 << 20)
    reads: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *a: object, **kw: object) -> io.BufferedReader:
        fh = real_open(self, *a, **kw)  # type: ignore[call-overload]
        if self == big:
            read = fh.read

            def counted(n: int = -1) -> bytes:
                data: bytes = read(n)
                reads.append(len(data))
                return data
            fh.read = counted
        return fh  # type: ignore[no-any-return]
    monkeypatch.setattr(Path, "open", counting_open)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read whole"))
    with pytest.raises(keyring.KeyStatementError, match="larger than a key statement"):
        keyring.read_statement(big)
    assert sum(reads) == keyring.MAX_STATEMENT + 1
