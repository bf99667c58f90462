"""Signing keys on a token, through PKCS#11, tested on SoftHSM2 (Debian's softhsm2): a
certificate signed with `--key pkcs11:...` verifies with the token's public key, the
private key never leaves the token, the PIN comes from a 0600 file or the environment and
never from the command line, and a wrong PIN or a missing key is a clear error that
writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.certs.signing import init_key, keyid, load_private_key, load_public_key
from nodecert.certs.verify import verify_report
from nodecert.cli import main
from support.env import require, require_tool
from support.runs import make_run, passing, recorded_results

MODULE = "/usr/lib/softhsm/libsofthsm2.so"


@pytest.fixture(scope="module")
def token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A SoftHSM2 token 'nodecert' holding an ECDSA P-256 key pair 'signing-key'."""
    util = require_tool("softhsm2-util")
    require(Path(MODULE).is_file(), f"{MODULE} is missing (Debian's softhsm2; .ci/run "
                                    "installs it)")
    root = tmp_path_factory.mktemp("softhsm")
    (root / "tokens").mkdir()
    conf = root / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {root}/tokens\nobjectstore.backend = file\n"
                    "log.level = ERROR\n")
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    # The test token's PINs are the test's own, on its own token.
    subprocess.run([util, "--init-token", "--free", "--label", "nodecert", "--pin", "246810",
                    "--so-pin", "13579111"], check=True, capture_output=True, timeout=60)
    import pkcs11
    from pkcs11.util.ec import encode_named_curve_parameters

    tok = pkcs11.lib(MODULE).get_token(token_label="nodecert")
    with tok.open(user_pin="246810", rw=True) as session:
        params = session.create_domain_parameters(
            pkcs11.KeyType.EC, {pkcs11.Attribute.EC_PARAMS:
                                encode_named_curve_parameters("secp256r1")}, local=True)
        params.generate_keypair(store=True, label="signing-key")
    pin = root / "pin"
    fd = os.open(pin, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"246810\n")
    os.close(fd)
    yield {"uri": f"pkcs11:token=nodecert;object=signing-key?module-path={MODULE}"
                  f"&pin-source={pin}", "root": str(root), "pin": str(pin)}
    if old is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = old


def nodecert(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args), env=env)
    return r.exit_code, r.output


def a_run(tmp_path: Path) -> Path:
    """A passing run that ended an hour ago (certify, run now, takes it as fresh)."""
    ended = time.time() - 3600
    return make_run(tmp_path, {"n1": {"results": passing(recorded_results()),
                                      "started": ended - 148.0, "finished": ended}})


def test_a_certificate_signed_on_the_token_verifies_with_its_public_key(
        tmp_path: Path, token: dict[str, str]) -> None:
    code, out = nodecert("keys", "public", token["uri"], "--out", str(tmp_path / "hsm.pub"))
    assert code == 0, out
    pub = load_public_key(tmp_path / "hsm.pub")
    code, out = nodecert("certify", str(a_run(tmp_path)), "--key", token["uri"], "--out",
                         str(tmp_path / "r"))
    assert code == 0, out
    cert = tmp_path / "r" / "n1.intoto.dsse.json"
    env = json.loads(cert.read_text())
    assert env["signatures"][0]["keyid"] == keyid(pub)
    v = verify_report(cert, [tmp_path / "hsm.pub"])
    assert v.ok, v.steps
    # Another key's .pub does not verify it: the signature is the token's.
    other = init_key(tmp_path / "o", name="o")
    assert not verify_report(cert, [other.public]).ok
    # The key cannot be read off the token: only signing and the public key are offered.
    key = load_private_key(token["uri"])
    assert not hasattr(key, "private_bytes")
    assert token["pin"] not in out and "246810" not in out


def test_two_parties_one_on_a_token(tmp_path: Path, token: dict[str, str]) -> None:
    integ = init_key(tmp_path / "i", name="integrator")
    code, _ = nodecert("certify", str(a_run(tmp_path)), "--key", str(integ.private), "--out",
                       str(tmp_path / "r"))
    assert code == 0
    cert = tmp_path / "r" / "n1.intoto.dsse.json"
    code, out = nodecert("cosign", str(cert), "--key", token["uri"], "--pubkey",
                         str(integ.public))
    assert code == 0, out
    nodecert("keys", "public", token["uri"], "--out", str(tmp_path / "qa.pub"))
    v = verify_report(cert, [integ.public, tmp_path / "qa.pub"], require_signers=2)
    assert v.ok, v.steps


def test_the_pin_comes_from_the_environment_or_a_private_file_only(
        tmp_path: Path, token: dict[str, str]) -> None:
    bare = f"pkcs11:token=nodecert;object=signing-key?module-path={MODULE}"
    code, out = nodecert("keys", "public", bare, "--out", str(tmp_path / "a.pub"),
                         env={"NODECERT_PKCS11_PIN": ""})
    assert code == 2 and "no PIN" in out and "NODECERT_PKCS11_PIN" in out
    code, out = nodecert("keys", "public", bare, "--out", str(tmp_path / "b.pub"),
                         env={"NODECERT_PKCS11_PIN": "246810"})
    assert code == 0, out
    loose = Path(token["root"]) / "loose-pin"
    loose.write_text("246810")
    loose.chmod(0o644)
    code, out = nodecert("keys", "public", f"{bare}&pin-source={loose}", "--out",
                         str(tmp_path / "c.pub"))
    assert code == 2 and "accessible by others" in out


def test_a_wrong_pin_or_a_missing_key_is_a_clear_error_and_writes_nothing(
        tmp_path: Path, token: dict[str, str]) -> None:
    run = a_run(tmp_path)
    bad_pin = Path(token["root"]) / "bad-pin"
    fd = os.open(bad_pin, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"000000")
    os.close(fd)
    uri = f"pkcs11:token=nodecert;object=signing-key?module-path={MODULE}"
    code, out = nodecert("certify", str(run), "--key", f"{uri}&pin-source={bad_pin}",
                         "--out", str(tmp_path / "r1"))
    assert code == 2 and "cannot log in" in out and "000000" not in out
    code, out = nodecert("certify", str(run), "--key",
                         f"pkcs11:token=nodecert;object=nope?module-path={MODULE}"
                         f"&pin-source={token['pin']}", "--out", str(tmp_path / "r2"))
    assert code == 2 and "labelled 'nope' must be on the token" in out
    code, out = nodecert("certify", str(run), "--key",
                         f"pkcs11:token=elsewhere;object=signing-key?module-path={MODULE}"
                         f"&pin-source={token['pin']}", "--out", str(tmp_path / "r3"))
    assert code == 2 and "token not found" in out
    assert not any((tmp_path / d).exists() for d in ("r1", "r2", "r3"))
    code, out = nodecert("certify", str(run), "--key", "pkcs11:object=x", "--out",
                         str(tmp_path / "r4"))
    assert code == 2 and "names no token" in out


def test_a_pin_file_someone_else_owns_or_a_link_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PIN file must be the running user's own, 0600, and not a link: a 0600 file
    another account owns (and so can change) is refused by name, never read."""
    from nodecert.certs import hsm
    pin = tmp_path / "pin"
    pin.write_text("1234\n")
    pin.chmod(0o600)
    ref = hsm.KeyRef("t", "k", "/nonexistent.so", str(pin))
    assert hsm._pin(ref) == "1234"
    me = os.geteuid()
    monkeypatch.setattr(hsm.os, "geteuid", lambda: me + 1)
    with pytest.raises(hsm.HsmError, match=f"belongs to uid {me}, not to the user"):
        hsm._pin(ref)
    monkeypatch.undo()
    link = tmp_path / "link"
    link.symlink_to(pin)
    with pytest.raises(hsm.HsmError, match="cannot read its PIN file"):
        hsm._pin(hsm.KeyRef("t", "k", "/nonexistent.so", str(link)))
