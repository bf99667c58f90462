"""The hand-over bundle: built from certified runs, checked offline in one pass; any
changed byte, an unlisted or missing file, a link, a missing second signer, a withdrawn
key or a revoked certificate fails it; bad input is refused and leaves nothing."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.certs import keyring
from nodecert.certs.bundlecheck import check
from nodecert.certs.certify import certify
from nodecert.certs.handover import MANIFEST, MANIFEST_TYPE, HandoverError, build
from nodecert.certs.revocations import revoke_file
from nodecert.certs.signing import (
    KeyPair,
    canonical_json,
    init_key,
    load_private_key,
    sign_envelope,
)
from nodecert.cli import main
from support.browser import headless, too_wide
from support.env import require_root
from support.runs import make_run, passing, recorded_results

NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)
ARTIFACTS_ENV = os.environ.get("NODECERT_TEST_ARTIFACTS")
CERTIFIED = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def run_of(root: Path, key: KeyPair, hosts: dict[str, float],
           revocations: Path | None = None) -> Path:
    """A certified run: each host READY, its evidence ending at the given time."""
    run = make_run(root, {h: {"results": passing(recorded_results()), "started": t - 148,
                              "finished": t} for h, t in hosts.items()})
    certify(run, load_private_key(key.private), now=CERTIFIED, revocations=revocations)
    return run


@pytest.fixture
def signer(tmp_path: Path) -> KeyPair:
    return init_key(tmp_path / "keys", name="integrator")


def nodecert(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_a_bundle_holds_every_certificate_and_verifies_in_one_command(
        tmp_path: Path, signer: KeyPair) -> None:
    rev = tmp_path / "revocations.intoto.dsse.json"
    old = run_of(tmp_path / "a", signer, {"n1": 1795995981.0}, rev)
    new = run_of(tmp_path / "b", signer, {"n1": 1796005981.0, "n2": 1796005981.0}, rev)
    out = tmp_path / "acme"
    code, text = nodecert("handover", str(old), str(new), "--out", str(out), "--key",
                          str(signer.private), "--revocations", str(rev))
    assert code == 0, text
    assert f"not handed over (newer evidence): {old}/reports/n1.intoto.dsse.json" in text
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["README.txt", "certificates/node-n1.intoto.dsse.json",
                     "certificates/node-n2.intoto.dsse.json", "index.html",
                     f"keys/{signer.keyid[:16]}.pub", MANIFEST,
                     "reports/node-n1.html", "reports/node-n2.html",
                     "revocations.intoto.dsse.json"]
    index = (out / "index.html").read_text()
    assert 'data-name="n1" data-verdict="READY"' in index and "<script" not in index
    assert 'href="reports/node-n2.html"' in index
    assert "nodecert verify-bundle . --pubkey SIGNER.pub" in (out / "README.txt").read_text()
    b = check(out, [signer.public], now=NOW)
    assert b.ok, (b.steps, {f: v.steps for f, v in b.certificates.items()})
    assert [n for n, _, _ in b.steps] == ["manifest", "files", "certificates", "revocations"]
    code, text = nodecert("verify-bundle", str(out), "--pubkey", str(signer.public))
    assert code == 0 and "VALID: the bundle holds and all 2 certificates" in text, text
    # The bundle's own copy of the key is not trust: another key is refused.
    other = init_key(tmp_path / "o", name="o")
    assert not check(out, [other.public], now=NOW).ok


def test_a_node_not_ready_on_a_failed_check_is_handed_over_as_an_nvsentinel_fault(
        tmp_path: Path, signer: KeyPair) -> None:
    good = passing(recorded_results())
    bad = [dict(r, verdict="FAIL", fault_code="NC-GPU-XID", summary="Xid 79 on GPU 3")
           if r["check"] == "health.xid" else r for r in good]
    assert bad != good
    run = make_run(tmp_path / "r", {"n1": {"results": good, "started": 1796005833.0,
                                           "finished": 1796005981.0},
                                    "n2": {"results": bad, "started": 1796005833.0,
                                           "finished": 1796005981.0}})
    certify(run, load_private_key(signer.private), now=CERTIFIED)
    out = tmp_path / "acme"
    h = build([run], out, [load_private_key(signer.private)])
    assert {c.name: c.statement["predicate"]["verdict"] for c in h.certificates} == {
        "n1": "READY", "n2": "NOT READY"}
    faults = sorted(p.relative_to(out).as_posix() for p in (out / "nvsentinel").iterdir())
    assert faults == ["nvsentinel/n2.externalfault.json"]  # the READY node has none
    doc = json.loads((out / faults[0]).read_text())
    ev = doc["spec"]["healthEvent"]
    assert (doc["kind"], doc["metadata"]["name"], ev["nodeName"]) == (
        "ExternalFault", "nodecert-n2", "n2")
    assert ev["errorCode"] == ["NC-GPU-XID"] and "health.xid: Xid 79 on GPU 3" in ev["message"]
    assert ev["metadata"]["certificate"] == "certificates/node-n2.intoto.dsse.json"
    # listed in the signed manifest like every other file, and checked with them (the
    # bundle as a whole does not pass: it holds a node NOT READY)
    assert faults[0] in json.loads(base64.b64decode(json.loads(
        (out / MANIFEST).read_text())["payload"]))["files"]
    b = check(out, [signer.public], now=NOW)
    assert {n: ok for n, ok, _ in b.steps}["files"] and not b.ok
    (out / faults[0]).write_text((out / faults[0]).read_text().replace("NC-GPU-XID", "NC-OK"))
    b = check(out, [signer.public], now=NOW)
    assert not {n: ok for n, ok, _ in b.steps}["files"]


def test_any_changed_byte_of_any_file_fails_the_bundle(tmp_path: Path,
                                                        signer: KeyPair) -> None:
    out = tmp_path / "b"
    build([run_of(tmp_path, signer, {"n1": 1796005981.0})], out,
          [load_private_key(signer.private)])
    assert check(out, [signer.public], now=NOW).ok
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        k = len(data) // 2
        path.write_bytes(data[:k] + bytes([data[k] ^ 0x01]) + data[k + 1:])
        b = check(out, [signer.public], now=NOW)
        assert not b.ok, f"a changed byte of {path.relative_to(out)} went unnoticed"
        path.write_bytes(data)
    assert check(out, [signer.public], now=NOW).ok


def test_unlisted_missing_and_linked_files_fail(tmp_path: Path, signer: KeyPair) -> None:
    out = tmp_path / "b"
    build([run_of(tmp_path, signer, {"n1": 1796005981.0})], out,
          [load_private_key(signer.private)])
    (out / "reports" / "extra.html").write_text("<p>READY</p>")
    files = {n: d for n, ok, d in check(out, [signer.public], now=NOW).steps}["files"]
    assert "reports/extra.html: not listed in the manifest" in files
    (out / "reports" / "extra.html").unlink()
    os.symlink("/etc/passwd", out / "keys" / "x.pub")
    files = {n: d for n, ok, d in check(out, [signer.public], now=NOW).steps}["files"]
    assert "keys/x.pub: not a regular file (a link or device)" in files
    (out / "keys" / "x.pub").unlink()
    (out / "reports" / "node-n1.html").unlink()
    b = check(out, [signer.public], now=NOW)
    assert not b.ok and "reports/node-n1.html: missing" in {
        n: d for n, ok, d in b.steps}["files"]


def test_a_manifest_naming_paths_outside_the_bundle_fails(tmp_path: Path,
                                                          signer: KeyPair) -> None:
    out = tmp_path / "b"
    build([run_of(tmp_path, signer, {"n1": 1796005981.0})], out,
          [load_private_key(signer.private)])
    env = json.loads((out / MANIFEST).read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    body["files"]["../outside"] = {"sha256": "0" * 64, "size": 0}
    (out / MANIFEST).write_text(json.dumps(sign_envelope(
        canonical_json(body), MANIFEST_TYPE, load_private_key(signer.private))))
    files = {n: d for n, ok, d in check(out, [signer.public], now=NOW).steps}["files"]
    assert "../outside: not a path inside the bundle" in files


def test_two_signers_can_be_required_of_the_bundle_and_its_certificates(
        tmp_path: Path, signer: KeyPair) -> None:
    qa = init_key(tmp_path / "qa", name="qa")
    run = run_of(tmp_path, signer, {"n1": 1796005981.0})
    one = tmp_path / "one"
    build([run], one, [load_private_key(signer.private)])
    b = check(one, [signer.public, qa.public], require_signers=2, now=NOW)
    assert not b.ok and "2 different signers required" in b.steps[0][2]
    code, _ = nodecert("cosign", str(run / "reports" / "n1.intoto.dsse.json"), "--key",
                       str(qa.private), "--pubkey", str(signer.public))
    assert code == 0
    two = tmp_path / "two"
    code, text = nodecert("handover", str(run), "--out", str(two), "--key",
                          str(signer.private), "--key", str(qa.private))
    assert code == 0, text
    assert check(two, [signer.public, qa.public], require_signers=2, now=NOW).ok
    assert not check(two, [signer.public], require_signers=2, now=NOW).ok


def test_a_withdrawn_signing_key_fails_the_bundle(tmp_path: Path, signer: KeyPair) -> None:
    """A bundle built before its key was withdrawn fails once the verifier is given the
    withdrawal (verify-bundle --key-statement); handover refuses a withdrawn key."""
    out = tmp_path / "b"
    run = run_of(tmp_path, signer, {"n1": 1796005981.0})
    build([run], out, [load_private_key(signer.private)])
    gone = keyring.withdraw(load_private_key(signer.private), signer.keyid, "key leaked",
                            tmp_path / "integrator.withdrawal.dsse.json")
    assert check(out, [signer.public], now=NOW).ok
    b = check(out, [signer.public], now=NOW, key_statements=[gone])
    assert not b.ok
    assert b.steps[-1][0] == "manifest" and "signed only by withdrawn keys" in b.steps[-1][2]
    assert "key leaked" in b.steps[-1][2]
    code, text = nodecert("verify-bundle", str(out), "--pubkey", str(signer.public),
                          "--key-statement", str(gone), "--allow-simulated")
    assert code == 1 and "signed only by withdrawn keys" in text
    # counted against what the manifest lists, each file named: never "0 of 0"
    assert b.listed == ["certificates/node-n1.intoto.dsse.json"] and b.unchecked == b.listed
    assert "NOT VALID: 0 of 1 certificates" in text, text
    assert "certificates/node-n1.intoto.dsse.json" in text and "not checked" in text
    with pytest.raises(HandoverError, match="is withdrawn"):
        build([run], tmp_path / "c", [load_private_key(signer.private)], key_statements=[gone])
    # the command refuses with exit 1, naming the key and its withdrawal; nothing written
    code, text = nodecert("handover", str(run), "--out", str(tmp_path / "d"), "--key",
                          str(signer.private), "--key-statement", str(gone))
    assert code == 1 and f"signing key {signer.keyid[:16]}... is withdrawn (key leaked, " \
        "since " in text, text
    assert not (tmp_path / "d").exists()


def test_a_bundle_built_before_a_revocation_fails_with_the_current_list(
        tmp_path: Path, signer: KeyPair) -> None:
    """The bundle's own list says "current"; the signer's newer list, given with
    --revocations, revokes: the bundle fails, and the output names each list applied. A
    bundle without a list says that revocation was not checked."""
    rev = tmp_path / "revocations.intoto.dsse.json"
    run = run_of(tmp_path, signer, {"n1": 1796005981.0}, rev)
    out = tmp_path / "b"
    build([run], out, [load_private_key(signer.private)], revocations=rev)
    env = json.loads((run / "reports" / "n1.intoto.dsse.json").read_text())
    digest = hashlib.sha256(base64.b64decode(env["payload"])).hexdigest()
    revoke_file(rev, load_private_key(signer.private), digest, "GPU swapped", NOW)
    before = check(out, [signer.public], now=NOW, allow_simulated=True)
    assert before.ok
    assert ("revocations", True, "applied: the bundle's list #1 issued "
            "2026-11-30T00:00:00+00:00") in before.steps
    after = check(out, [signer.public], now=NOW, revocations=rev, allow_simulated=True)
    assert not after.ok
    assert ("revocations", True, "applied: the bundle's list #1 issued 2026-11-30T00:00:00"
            "+00:00; --revocations list #2 issued 2026-12-03T00:00:00+00:00") in after.steps
    (cert,) = after.certificates.values()
    assert any(n == "revocation" and not ok and "REVOKED" in d and "GPU swapped" in d
               for n, ok, d in cert.steps)
    code, text = nodecert("verify-bundle", str(out), "--pubkey", str(signer.public),
                          "--revocations", str(rev), "--allow-simulated")
    assert code == 1 and "--revocations list #2" in text and "REVOKED" in text
    bare = tmp_path / "bare"
    build([run_of(tmp_path / "r2", signer, {"n1": 1796005981.0})], bare,
          [load_private_key(signer.private)])
    b = check(bare, [signer.public], now=NOW, allow_simulated=True)
    assert any(n == "revocations" and "was NOT checked" in d for n, ok, d in b.steps)


def test_a_revoked_certificate_fails_the_bundle(tmp_path: Path, signer: KeyPair) -> None:
    rev = tmp_path / "revocations.intoto.dsse.json"
    run = run_of(tmp_path, signer, {"n1": 1796005981.0, "n2": 1796005981.0}, rev)
    env = json.loads((run / "reports" / "n2.intoto.dsse.json").read_text())
    digest = hashlib.sha256(base64.b64decode(env["payload"])).hexdigest()
    revoke_file(rev, load_private_key(signer.private), digest, "GPU swapped", NOW)
    out = tmp_path / "b"
    build([run], out, [load_private_key(signer.private)], revocations=rev)
    b = check(out, [signer.public], now=NOW)
    assert not b.ok
    assert b.certificates["certificates/node-n1.intoto.dsse.json"].ok
    bad = b.certificates["certificates/node-n2.intoto.dsse.json"]
    assert any(n == "revocation" and not ok and "REVOKED" in d and "GPU swapped" in d
               for n, ok, d in bad.steps)
    code, text = nodecert("verify-bundle", str(out), "--pubkey", str(signer.public))
    assert code == 1 and "NOT VALID: 1 of 2 certificates" in text


def test_bad_input_is_refused_and_leaves_nothing(tmp_path: Path, signer: KeyPair) -> None:
    run = run_of(tmp_path, signer, {"n1": 1796005981.0})
    stranger = init_key(tmp_path / "s", name="s")
    code, text = nodecert("handover", str(run), "--out", str(tmp_path / "x"), "--key",
                          str(stranger.private))
    assert code == 2 and "n1.intoto.dsse.json: not signed by a key of this hand-over" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HandoverError, match="holds no certificate"):
        build([empty], tmp_path / "y", [load_private_key(signer.private)])
    (tmp_path / "z").mkdir()
    code, text = nodecert("handover", str(run), "--out", str(tmp_path / "z"), "--key",
                          str(signer.private))
    assert code == 2 and "already exists" in text
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["empty", "keys", "run", "s", "z"]  # no half-written bundle
    code, text = nodecert("verify-bundle", str(tmp_path / "nope"), "--pubkey",
                          str(signer.public))
    assert code == 2 and "not a directory" in text


@pytest.mark.lab  # root: the browser runs in its own network namespace (unshare --net)
@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_the_bundle_reads_well_in_chromium_in_each_language(
        tmp_path: Path, signer: KeyPair, lang: str) -> None:
    require_root()
    run = run_of(tmp_path, signer, {"n1": 1796005981.0, "n2": 1796005981.0})
    out = tmp_path / "bundle"
    code, text = nodecert("handover", str(run), "--out", str(out), "--key",
                          str(signer.private), "--lang", lang, "--pdf")
    assert code == 0, text
    words = {"en": ("Hand-over: 2 of 2 certificates READY", "Node certificate: n1"),
             "pt-BR": ("Entrega: 2 de 2 certificados PRONTOS", "Certificado do nó: n1")}[lang]
    artifacts = Path(ARTIFACTS_ENV) if ARTIFACTS_ENV else tmp_path / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    for page, expect in ((out / "index.html", words[0]),
                         (out / "reports" / "node-n1.html", words[1])):
        dom = headless(page.as_uri(), "--dump-dom")
        assert dom.returncode == 0 and expect in dom.stdout, dom.stderr[-2000:]
        width, wide = too_wide(page, tmp_path)
        assert width <= 1280 and wide == "", f"{page.name} wider than 1280 px: {wide}"
        shot = artifacts / f"handover-{lang}-{page.stem}.png"
        r = headless(page.as_uri(), f"--screenshot={shot}", "--window-size=1280,1600")
        assert r.returncode == 0 and shot.stat().st_size > 30_000, r.stderr[-2000:]
    assert (out / "reports" / "node-n1.pdf").stat().st_size > 20_000
    assert check(out, [signer.public], now=NOW).ok  # the PDFs are in the manifest too
