"""Certificates: keys, DSSE signing, in-toto Statements, verification,
HTML (rendered in headless Chromium), JUnit XML.

The run certified here is real: the results nodecert recorded on an H200
(tests/fixtures/recorded/h200-device-2026-11-29), laid out as a validation run.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.certs.certify import (
    HEALTHY,
    NOT_READY,
    PAYLOAD_TYPE,
    READY,
    RunError,
    certify,
    identity_digest,
    readiness,
)
from nodecert.certs.signing import (
    SignatureError,
    SigningKeyError,
    canonical_json,
    init_key,
    load_private_key,
    load_public_key,
    sign_envelope,
    verify_envelope,
)
from nodecert.certs.verify import verify_report
from nodecert.cli import main
from nodecert.core.textsafe import one_line
from nodecert.runs.records import HostRecord
from support.browser import headless, too_wide
from support.env import require_root
from support.runs import make_run, passing, recorded_results

# Screenshots for a person to look at: kept only where NODECERT_TEST_ARTIFACTS points
# (never in the checkout); otherwise in the test's temporary directory.
ARTIFACTS_ENV = os.environ.get("NODECERT_TEST_ARTIFACTS")








@pytest.fixture
def key(tmp_path: Path) -> Path:
    return init_key(tmp_path / "keys").private


# --- keys ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ecdsa-p256", "ed25519"])
def test_keys_init_0600_refuses_overwrite_and_round_trips(tmp_path: Path, kind: str) -> None:
    kp = init_key(tmp_path / "k", kind)
    assert kp.private.stat().st_mode & 0o777 == 0o600
    assert len(kp.keyid) == 64
    with pytest.raises(SigningKeyError, match="already exists: refusing to overwrite"):
        init_key(tmp_path / "k", kind)
    priv, pub = load_private_key(kp.private), load_public_key(kp.public)
    env = sign_envelope(b'{"x":1}', PAYLOAD_TYPE, priv)
    assert verify_envelope(env, [pub]) == (PAYLOAD_TYPE, b'{"x":1}', kp.keyid)


def test_world_or_group_readable_key_is_refused(key: Path) -> None:
    key.chmod(0o644)
    with pytest.raises(SigningKeyError, match=r"accessible by others \(mode 0644\)"):
        load_private_key(key)
    key.chmod(0o640)
    with pytest.raises(SigningKeyError, match="chmod 600"):
        load_private_key(key)


def test_cli_keys_init(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["keys", "init", "--out", str(tmp_path / "k")])
    assert r.exit_code == 0 and "0600" in r.output
    r = CliRunner().invoke(main, ["keys", "init", "--out", str(tmp_path / "k")])
    assert r.exit_code == 2 and "refusing to overwrite" in r.output


# --- DSSE tampering --------------------------------------------------------------------------

@pytest.mark.parametrize("payload", [b"null", b"[]", b"7", b'"READY"', b"{}"])
def test_a_signed_payload_that_is_no_statement_never_verifies(key: Path, tmp_path: Path,
                                                               payload: bytes) -> None:
    priv = load_private_key(key)
    path = tmp_path / "x.intoto.json"
    path.write_text(json.dumps(sign_envelope(payload, PAYLOAD_TYPE, priv)))
    v = verify_report(path, [key.with_suffix(".pub")], allow_simulated=True)
    steps = {name: ok for name, ok, _ in v.steps}
    assert not v.ok and steps["signature"] and steps["statement"] is False


def test_every_byte_of_payload_and_signature_is_covered(key: Path, tmp_path: Path) -> None:
    priv = load_private_key(key)
    pub = priv.public_key()
    payload = canonical_json({"predicate": {"verdict": READY}, "subject": [1, 2, 3]})
    env = sign_envelope(payload, PAYLOAD_TYPE, priv)
    sig = base64.b64decode(env["signatures"][0]["sig"])
    for i in range(len(payload)):
        bad = bytearray(payload)
        bad[i] ^= 0x01
        e = dict(env, payload=base64.b64encode(bytes(bad)).decode())
        with pytest.raises(SignatureError, match="does not match the payload"):
            verify_envelope(e, [pub])
    for i in range(len(sig)):
        bad = bytearray(sig)
        bad[i] ^= 0x01
        e = dict(env, signatures=[{**env["signatures"][0],
                                   "sig": base64.b64encode(bytes(bad)).decode()}])
        with pytest.raises(SignatureError):
            verify_envelope(e, [pub])
    # The payload type is signed too (DSSE PAE): relabelling it breaks the signature.
    with pytest.raises(SignatureError):
        verify_envelope(dict(env, payloadType="application/json"), [pub])
    other = load_private_key(init_key(tmp_path / "other").private).public_key()
    with pytest.raises(SignatureError, match="signed by a key that is not trusted"):
        verify_envelope(env, [other])


# --- certify + verify on the recorded H200 run ---------------------------------------------

def test_not_ready_node_gets_a_signed_report_saying_why(tmp_path: Path, key: Path) -> None:
    # 23:46:21.4 and 23:48:49.9 UTC: the certificate states them in UTC, to the second
    run = make_run(tmp_path, {"h200-device": {"started": 1795995981.4,
                                              "finished": 1795996129.9}})
    cr = certify(run, load_private_key(key), now=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    node = cr.nodes[0]
    assert node.verdict == NOT_READY and not cr.all_ready
    assert node.reasons == [
        "hardware.topology ERROR: could not read the tool output: no 'GPU n: ... (UUID: "
        "...)' line: not `nvidia-smi nvlink -s` output",
        "load.burnin FAIL: GPU0: 666 TFLOPS sustained (bf16), below the floor of 711"]
    env = json.loads(node.envelope.read_text())
    _, payload, _ = verify_envelope(env, [load_public_key(key.with_suffix(".pub"))])
    st = json.loads(payload)
    p = st["predicate"]
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["subject"][0]["name"] == "node:h200-device"
    assert st["subject"][0]["digest"]["sha256"] == identity_digest(p["identity"])
    assert p["identity"]["gpus"] == [{"index": 0, "bus_id": "0000:00:06.0",
                                      "serial": "1653724059030",
                                      "uuid": "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"}]
    assert p["stack"]["name"] == "r580-cuda13.0" and p["stack"]["driver"] == "580.173.02"
    assert len(p["stack"]["manifest_sha256"]) == 64
    assert p["validated"] == {"started": "2026-11-29T23:46:21+00:00",
                              "finished": "2026-11-29T23:48:49+00:00"}
    # What the run used, as it recorded it (not the files installed now).
    inputs = run / "inputs"
    assert p["inputs"] == {
        "plan": hashlib.sha256((inputs / "plan-h200-device.json").read_bytes()).hexdigest(),
        "suite": hashlib.sha256((inputs / "suite.json").read_bytes()).hexdigest(),
        "stack": hashlib.sha256((inputs / "stack/r580-cuda13.0.yml").read_bytes()).hexdigest()}
    burn = next(r for r in p["results"] if r["check"] == "load.burnin")
    assert burn["thresholds"]["burnin.tflops_min_bf16"]["value"] == 711
    assert all(len(e["sha256"]) == 64 for e in burn["evidence"])
    assert "output" not in json.dumps(burn["evidence"])  # digests, not raw logs
    v = verify_report(node.envelope, [key.with_suffix(".pub")])
    assert [(n, ok) for n, ok, _ in v.steps] == [
        ("signature", True), ("payload type", True), ("statement", True), ("validity", True),
        ("subject", True), ("attestation", True), ("verdict", False), ("scope", True)]
    assert v.steps[5][2].startswith("not attested: not collected")
    assert v.exit_code == 1


def test_ready_report_verifies_and_fails_when_expired_or_for_other_hardware(
        tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results()),
                                     "started": 1795995981.4, "finished": 1795996129.9}})
    cr = certify(run, load_private_key(key), valid_days=30,
                 now=dt.datetime(2026, 12, 2, tzinfo=dt.UTC))  # signed 2 days later
    assert cr.all_ready
    pub = [key.with_suffix(".pub")]
    path = cr.nodes[0].envelope
    ok = verify_report(path, pub, now=dt.datetime(2026, 12, 3, tzinfo=dt.UTC))
    assert ok.ok and ok.exit_code == 0
    # validity runs from the end of the validation, not from the (later) signature
    late = verify_report(path, pub, now=dt.datetime(2026, 12, 30, 0, 0, 1, tzinfo=dt.UTC))
    assert not late.ok
    assert [d for n, ok_, d in late.steps if n == "validity"] == [
        "validated 2026-11-29T23:48:49+00:00, signed 2026-12-02T00:00:00+00:00, valid until "
        "2026-12-29T23:48:49+00:00: EXPIRED"]
    p = ok.statement["predicate"]  # type: ignore[index]
    assert p["validated"] == {"started": "2026-11-29T23:46:21+00:00",
                              "finished": "2026-11-29T23:48:49+00:00"}
    assert p["validity"]["max_result_age_days"] == 7.0
    live = copy.deepcopy(p["identity"])
    assert verify_report(path, pub, now=dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
                         live_identity=live).ok
    live["gpus"][0]["serial"] = "1653724059999"  # a swapped GPU
    swapped = verify_report(path, pub, now=dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
                            live_identity=live)
    assert not swapped.ok
    hw = next(d for n, _, d in swapped.steps if n == "hardware")
    assert "GPU replaced in slot 0, bus 0000:00:06.0: serial 1653724059030" in hw
    assert "-> serial 1653724059999" in hw


def test_tampered_report_files_fail_verification(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results())}})
    path = certify(run, load_private_key(key)).nodes[0].envelope
    pub = [key.with_suffix(".pub")]
    env = json.loads(path.read_text())
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["results"][0]["summary"] = "all good"  # an edited verdict text
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(dict(env, payload=base64.b64encode(
        canonical_json(st)).decode())))
    v = verify_report(forged, pub)
    assert v.steps == [("signature", False, "no valid signature from a trusted key: "
                        f"{env['signatures'][0]['keyid'][:16]}: signature does not match the "
                        "payload (the report was altered, or signed by another key)")]
    # A different (untrusted) signer re-signing the edited statement is refused too.
    other = init_key(tmp_path / "evil").private
    resigned = tmp_path / "resigned.json"
    resigned.write_text(json.dumps(sign_envelope(canonical_json(st), PAYLOAD_TYPE,
                                                 load_private_key(other))))
    assert "not trusted" in verify_report(resigned, pub).steps[0][2]
    r = CliRunner().invoke(main, ["verify", str(resigned), "--pubkey", str(pub[0])])
    assert r.exit_code == 1 and "NOT VALID" in r.output
    r = CliRunner().invoke(main, ["verify", str(path), "--pubkey", str(pub[0])])
    assert r.exit_code == 0 and "VALID: the certificate holds" in r.output
    (tmp_path / "junk.json").write_text("{not json")
    r = CliRunner().invoke(main, ["verify", str(tmp_path / "junk.json"), "--pubkey",
                                  str(pub[0])])
    assert r.exit_code == 2 and "is not JSON" in r.output


def test_simulated_reports_are_refused_unless_allowed(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path, {"lab1": {"results": passing(recorded_results()),
                                       "simulated": True}})
    cr = certify(run, load_private_key(key))
    html = cr.nodes[0].html.read_text()
    assert html.count("SIMULATED HARDWARE") == 2 and "READY (SIMULATED)" in html
    assert "SIMULATED" in cr.index.read_text()  # type: ignore[union-attr]
    pub = [key.with_suffix(".pub")]
    assert not verify_report(cr.nodes[0].envelope, pub).ok
    assert verify_report(cr.nodes[0].envelope, pub, allow_simulated=True).ok


def _readiness(host: dict[str, Any], accepted: dict[str, Any] | None = None) -> tuple[
        str, list[str]]:
    return readiness(HostRecord(Path("run/h1/results.json"), host), accepted)


def test_readiness_rules() -> None:
    host = {"status": "done", "verdict": "WARN", "identity": {"gpus": [],
                                                              "system_serial": "S1"},
            "results": [{"check": "health.gpu", "verdict": "WARN", "summary": "w"}]}
    accepted = {"accepted": True, "reasons": []}
    assert _readiness(host, accepted) == (READY, [])
    # nothing failed, but no accepted acceptance run: a health record, saying why
    assert _readiness(host) == (HEALTHY, ["the run was not judged for acceptance"])
    assert _readiness(host, {"accepted": False, "reasons": ["burnin: load.burnin did not "
                                                           "run"]}) == (
        HEALTHY, ["burnin: load.burnin did not run"])
    # a failure outweighs acceptance
    assert _readiness({**host, "verdict": "ERROR"}, accepted)[0] == NOT_READY
    # An identity of empty strings names no hardware: every such node has one digest.
    empty = {"system_serial": "", "system_uuid": "", "baseboard_serial": "", "nic_macs": [],
             "gpus": [{"serial": "", "uuid": ""}], "nvme": [{"serial": "", "model": "x"}]}
    verdict, why = _readiness({**host, "identity": empty})
    assert verdict == NOT_READY and "names no serial, UUID or MAC" in why[0]
    for one in ({"nic_macs": ["02:00:00:00:00:01"]}, {"gpus": [{"uuid": "GPU-1"}]},
                {"nvme": [{"serial": "N1"}]}, {"system_uuid": "u"}):
        assert _readiness({**host, "identity": {**empty, **one}}, accepted)[0] == READY, one
    assert _readiness({**host, "status": "interrupted", "error": "Ctrl-C"})[0] == NOT_READY
    assert _readiness({**host, "identity": None})[1] == [
        "no hardware identity: hardware.inventory did not run or failed to read it, so the "
        "certificate could not be bound to the hardware"]
    assert _readiness({**host, "verdict": "ERROR"}) == (
        NOT_READY, ["the run's verdict for this host is ERROR"])
    # a verdict that is none of the four, or a damaged result, is never READY
    assert _readiness({**host, "verdict": "READY"}, accepted)[0] == NOT_READY
    cut = {**host, "results": [*host["results"], {"check": "load.burnin", "summary": "x"}]}
    verdict, why = _readiness(cut, accepted)
    assert verdict == NOT_READY and why[0].startswith("load.burnin ERROR: ") and \
        "result 2 is unreadable" in why[0]


def test_certify_bad_input(tmp_path: Path, key: Path) -> None:
    with pytest.raises(RunError, match=r"has no validate\.json"):
        certify(tmp_path, load_private_key(key))
    (tmp_path / "validate.json").write_text("{}")
    (tmp_path / "h1").mkdir()
    (tmp_path / "h1" / "results.json").write_text('{"schema": "other"}')
    with pytest.raises(RunError, match="not a nodecert host result"):
        certify(tmp_path, load_private_key(key))
    r = CliRunner().invoke(main, ["certify", str(tmp_path / "nope"), "--key", str(key)])
    assert r.exit_code == 2 and "is not a directory" in r.output
    assert not list(tmp_path.glob("**/*.dsse.json"))  # nothing half-written


# --- JUnit and HTML --------------------------------------------------------------------------

def test_junit_xml_parses_and_counts(tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path, {"a": {}, "b": {"results": passing(recorded_results())}})
    cr = certify(run, load_private_key(key))
    root = ET.parse(cr.junit).getroot()  # type: ignore[arg-type]
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"nodecert.a", "nodecert.b"}
    a = suites["nodecert.a"]
    assert (a.get("tests"), a.get("failures"), a.get("errors")) == ("8", "1", "1")
    fail = a.find("testcase[@name='load.burnin']/failure")
    assert fail is not None and fail.get("message", "").startswith("GPU0: 666 TFLOPS")
    props = {p.get("name"): p.get("value") for p in a.iter("property")}
    assert props["verdict"] == NOT_READY and props["simulated"] == "false"
    assert suites["nodecert.b"].get("failures") == "0"
    assert ET.parse(cr.nodes[0].junit).getroot().find("testsuite") is not None






@pytest.mark.lab  # root: the browser runs in its own network namespace (unshare --net)
def test_html_report_renders_in_headless_chromium(tmp_path: Path, key: Path) -> None:
    require_root()
    run = make_run(tmp_path, {"h200-device": {}})
    cr = certify(run, load_private_key(key))
    page = cr.nodes[0].html
    html = page.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", html)  # self-contained
    dom = headless(page.as_uri(), "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    d = dom.stdout
    assert re.search(r'id="verdict">NOT READY', d)
    assert len(re.findall(r'<tr class="check"', d)) == 8
    assert 'data-check="load.burnin" data-verdict="FAIL"' in d
    for plot in ("soak-temp_c", "soak-sm_mhz", "soak-power_w", "burnin-tflops"):
        assert f'data-plot="{plot}"' in d, plot
    assert len(re.findall(r'<polyline class="series"', d)) == 3
    assert "1653724059030" in d  # the GPU's serial in the identity table
    # Figures read as labelled values with units, the signed value one click away.
    assert "<dt>TFLOPS per GPU</dt><dd>GPU 0: 665.6 TFLOPS</dd>" in d
    assert "<summary>evidence</summary>" in d and 'id="summary"' in d
    assert '"tflops_per_gpu": {' not in d.split('id="checks"')[1].split("<details>")[0]
    assert "<script" not in html  # a certificate page runs nothing
    width, wide = too_wide(page, tmp_path)
    assert width <= 1280 and wide == "", f"wider than 1280 px: {wide}"
    artifacts = Path(ARTIFACTS_ENV) if ARTIFACTS_ENV else tmp_path / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "certificate-h200-device.png"
    r = headless(page.as_uri(), f"--screenshot={shot}", "--window-size=1200,2600")
    assert r.returncode == 0 and shot.stat().st_size > 50_000, r.stderr[-2000:]
    fleet = headless(cr.index.as_uri(), "--dump-dom")  # type: ignore[union-attr]
    assert 'data-host="h200-device" data-verdict="NOT READY"' in fleet.stdout
    assert "0 of 1 nodes READY" in fleet.stdout


def test_stale_results_are_refused_per_host_and_the_others_certified(
        tmp_path: Path, key: Path) -> None:
    run = make_run(tmp_path, {
        "old": {"results": passing(recorded_results()), "started": 1764459981.5,
                "finished": 1764460129.0},                       # 2025-11-29: a year old
        "new": {"results": passing(recorded_results()), "started": 1795995981.4,
                "finished": 1795996129.9}})                      # 2026-11-29
    now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    cr = certify(run, load_private_key(key), now=now)
    assert [n.host for n in cr.nodes] == ["new"] and not cr.all_ready
    assert "old: the results are 365.0 days old" in cr.failed["old"]
    assert "--max-result-age-days" in cr.failed["old"]
    reports = sorted(p.name for p in (run / "reports").iterdir())
    assert not any(name.startswith("old.") for name in reports)  # nothing half-written
    assert "new.intoto.dsse.json" in reports and "index.html" in reports
    wide = certify(run, load_private_key(key), now=now, max_age_days=400,
                   out_dir=tmp_path / "r2")
    assert sorted(n.host for n in wide.nodes) == ["new", "old"] and not wide.failed


def test_a_host_whose_report_cannot_be_built_leaves_no_files(
        tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.certs import certify as certify_mod
    run = make_run(tmp_path, {h: {"results": passing(recorded_results()),
                                  "started": 1795995981.4, "finished": 1795996129.9}
                              for h in ("a", "b")})
    real = certify_mod.report_html.node_page

    def page(st: dict[str, Any], **kw: Any) -> str:
        if st["predicate"]["host"] == "a":
            raise RuntimeError("template exploded")
        return real(st, **kw)
    monkeypatch.setattr(certify_mod.report_html, "node_page", page)
    cr = certify(run, load_private_key(key), now=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    assert cr.failed == {"a": "RuntimeError: template exploded"}
    names = {p.name for p in (run / "reports").iterdir()}
    assert not any(n.startswith("a.") for n in names) and "b.html" in names


def test_verify_expectations_and_subject_first(tmp_path: Path, key: Path) -> None:
    from click.testing import CliRunner

    from nodecert.cli import main
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results()),
                                     "started": 1795995981.4, "finished": 1795996129.9}})
    cr = certify(run, load_private_key(key), now=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    env = cr.nodes[0].envelope
    st = verify_report(env, [key.with_suffix(".pub")]).statement
    assert st is not None
    ident = st["predicate"]["identity"]
    digest = st["subject"][0]["digest"]["sha256"]
    gpu_serial = ident["gpus"][0]["serial"]
    base = ["verify", str(env), "--pubkey", str(key.with_suffix(".pub"))]
    cli = CliRunner()
    good = cli.invoke(main, [*base, "--expect-host", "n1", "--expect-serial", gpu_serial,
                             "--expect-identity", f"sha256:{digest}"])
    first = good.output.splitlines()[0]
    assert first.startswith(f"subject: node:n1 sha256:{digest}")
    assert "expected" in good.output and good.exit_code in (0, 1)
    assert "FAIL expected" not in good.output
    for flag, value, words in (("--expect-host", "n2", "for host 'n1', not 'n2'"),
                               ("--expect-serial", "XYZ", "serial 'XYZ' is not in"),
                               ("--expect-identity", "sha256:" + "0" * 64,
                                "not 'sha256:000")):
        bad = cli.invoke(main, [*base, flag, value])
        assert bad.exit_code == 1 and words in bad.output, bad.output


def test_identity_rows_in_slot_order_and_a_swap_named_by_slot_and_bus() -> None:
    from nodecert.certs.identity import certificate_identity, identity_changes, identity_digest
    gpus = [{"bus_id": f"00000000:{b}:00.0", "serial": f"S{k}", "uuid": f"GPU-{9 - k}"}
            for k, b in enumerate(["19", "3B", "4C", "5D"])]
    ident = {"system_serial": "X1", "gpus": gpus}
    shown = certificate_identity(ident)
    assert [(g["index"], g["bus_id"]) for g in shown["gpus"]] == [
        (0, "00000000:19:00.0"), (1, "00000000:3B:00.0"), (2, "00000000:4C:00.0"),
        (3, "00000000:5D:00.0")]
    # the rows are shown in slot order; the digest (the subject) does not change with them
    assert identity_digest(shown) == identity_digest(ident)
    # bus ids renumbered, same GPUs: no change
    moved = {"system_serial": "X1", "gpus": [dict(g, bus_id=f"0000:{k + 1}a:00.0")
                                              for k, g in enumerate(gpus)]}
    assert identity_changes(shown, moved) == []
    live = {"system_serial": "X1", "gpus": [dict(g) for g in gpus]}
    live["gpus"][2] = {"bus_id": "0000:4c:00.0", "serial": "NEW", "uuid": "GPU-new"}
    live["gpus"][3] = {"bus_id": "0000:5d:00.0", "serial": "NEW2", "uuid": "GPU-new2"}
    assert identity_changes(shown, live) == [
        "GPU replaced in slot 2, bus 00000000:4C:00.0: serial S2 (GPU-7) -> serial NEW "
        "(GPU-new)",
        "GPU replaced in slot 3, bus 00000000:5D:00.0: serial S3 (GPU-6) -> serial NEW2 "
        "(GPU-new2)"]
    del live["gpus"][3]
    assert identity_changes(shown, live)[-1] == \
        "GPU no longer present in slot 3, bus 00000000:5D:00.0: serial S3 (GPU-6)"


def test_a_newline_in_a_nodes_text_cannot_print_a_line_of_its_own(tmp_path: Path) -> None:
    """A NOT READY certificate whose failing summary carries line breaks and a fake
    "ok verdict READY" / "VALID" pair: verify prints one line per step all the same."""
    results = passing(recorded_results())
    bad = next(r for r in results if r["check"] == "health.gpu")
    bad.update(verdict="FAIL", summary="Xid 79\nok   verdict        READY\u2028"
                                       "VALID: the certificate holds and the node is READY")
    run = make_run(tmp_path, {"n1": {"results": results}})
    keys = init_key(tmp_path / "k")
    cr = certify(run, load_private_key(keys.private))
    r = CliRunner().invoke(main, ["verify", str(cr.nodes[0].envelope), "--pubkey",
                                  str(keys.public)])
    assert r.exit_code == 1
    lines = r.output.splitlines()
    assert not any(line.startswith(("ok   verdict", "VALID")) for line in lines), r.output
    assert lines[-1].startswith("NOT VALID")
    assert any(line.startswith("FAIL verdict") and "Xid 79 \u23ce ok   verdict" in line
               for line in lines), r.output
    assert one_line(" a\r\n\n b \u2029c\n") == "a \u23ce b \u23ce c"


def test_the_firmware_bill_of_materials_is_signed_and_a_component_behind_is_not_ready(
        tmp_path: Path, key: Path) -> None:
    from nodecert.stack.firmware import find_recipe, judge_recipe

    recipe = find_recipe("dgx-h200-motherboard")
    members = [{"id": i, "version": v} for i, v in (
        ("CPLDMB_0", "0.2.1.6"), ("CPLDMID_0", "0.2.0.7"),
        ("EROT_BIOS_0", "00.04.0018.0000_n00"), ("EROT_BMC_0", "00.04.0018.0000_n00"))]
    met = judge_recipe(recipe, members, None).as_dict()
    run = make_run(tmp_path / "a", {"n1": {"results": [*passing(recorded_results()), met]}})
    node = certify(run, load_private_key(key)).nodes[0]
    signed = json.loads(base64.b64decode(json.loads(node.envelope.read_text())["payload"]))
    fw = signed["predicate"]["firmware"]
    assert fw["recipe"] == "dgx-h200-motherboard" and "FWDGXH" in fw["sources"]
    assert fw["components"]["cpld_mid"] == {"wanted": "0.2.0.7",
                                            "found": {"BMC CPLDMID_0": "0.2.0.7"}}
    assert signed["predicate"]["verdict"] == "READY"
    members[1] = {"id": "CPLDMID_0", "version": "0.2.0.5"}
    behind = judge_recipe(recipe, members, None).as_dict()
    run = make_run(tmp_path / "b", {"n1": {"results": [*passing(recorded_results()),
                                                       behind]}})
    node = certify(run, load_private_key(key)).nodes[0]
    signed = json.loads(base64.b64decode(json.loads(node.envelope.read_text())["payload"]))
    assert signed["predicate"]["verdict"] == "NOT READY"
    assert any("cpld_mid" in r for r in signed["predicate"]["reasons"])


def test_a_large_fleets_page_is_a_summary_and_every_node_is_on_a_page(
        tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past html.PAGE_ROWS nodes, index.html lists the counts and the nodes not READY;
    every node is on one of fleet/001.html onwards (linked both ways); a later, smaller
    certify of the same directory leaves no page of the larger one behind."""
    from nodecert.certs import html as report_html
    monkeypatch.setattr(report_html, "PAGE_ROWS", 2)
    times = {"started": 1795995981.4, "finished": 1795996129.9}
    hosts = {f"n{i}": {"results": passing(recorded_results()), **times} for i in range(5)}
    hosts["n3"] = {"results": recorded_results(), **times}  # its real findings: NOT READY
    run = make_run(tmp_path, hosts)
    now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    cr = certify(run, load_private_key(key), now=now)
    out = run / "reports"
    index = (out / "index.html").read_text()
    assert "4 of 5 nodes READY" in index
    assert re.findall(r'data-host="([^"]+)"', index) == ["n3"]  # only the node to act on
    assert [p.name for p in sorted((out / "fleet").iterdir())] == [
        "001.html", "002.html", "003.html"]
    listed = [h for p in sorted((out / "fleet").iterdir())
              for h in re.findall(r'data-host="([^"]+)"', p.read_text())]
    assert listed == [f"n{i}" for i in range(5)]  # every node once, in order
    second = (out / "fleet" / "002.html").read_text()
    for link in ('href="../index.html"', 'href="001.html"', 'href="003.html"',
                 'href="../n2.html"', 'href="../n2.intoto.dsse.json"'):
        assert link in second
    assert 'href="fleet/002.html"' in index and cr.index == out / "index.html"
    monkeypatch.setattr(report_html, "PAGE_ROWS", 1000)
    certify(run, load_private_key(key), now=now)
    assert not list((out / "fleet").iterdir())
    assert len(re.findall(r'data-host="', (out / "index.html").read_text())) == 5
