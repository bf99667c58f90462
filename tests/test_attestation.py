"""GPU attestation: the evidence, what the verifier's steps say, the verdict and what the
certificate states. Judged on the helper's real output (NVIDIA's recorded Hopper sample
through nv-local-gpu-verifier), then live through the verifier on that sample and on
tampered variants of it."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodecert.certs import html as report_html
from nodecert.certs.certify import certify
from nodecert.certs.signing import init_key, load_private_key
from nodecert.certs.verify import verify_report
from nodecert.inventory.reader import HostSpec
from nodecert.profiles import thresholds
from nodecert.validation.plan import build_plan
from nodecert_node import attest_gpu as ag
from nodecert_node.checks import attestation as check
from nodecert_node.context import Ctx
from nodecert_node.contract import Plan, Verdict
from support.runs import make_run, passing, recorded_results
from support.verifier import helper, recorded, verifier_python


def _redigest(doc: dict[str, Any]) -> dict[str, Any]:
    doc["evidence_sha256"] = ag.evidence_digest(doc["evidence"])
    return doc


def _measured(doc: dict[str, Any]) -> dict[str, Any]:
    """The recorded document as it would read had reference manifests been at hand and
    matched (the judge's input only: NVIDIA's samples carry no matching RIMs)."""
    d = copy.deepcopy(doc)
    for g in d["gpus"]:
        for k in ("driver_rim", "vbios_rim", "measurements"):
            g["steps"][k] = {"status": "ok", "detail": "synthetic"}
    d["status"], d["reason"] = ag.outcome(d["gpus"])
    return d


# --- the judge, on the helper's recorded output ----------------------------------------------

def test_the_recorded_sample_is_not_verified_here_and_says_replayed() -> None:
    facts = check.attestation_facts(recorded(), allow_replay=True)
    assert facts["status"] == "not verified here" and facts["replayed"] is True
    steps = facts["gpus"][0]["steps"]
    assert {k: steps[k]["status"] for k in ("report", "certificate_chain",
                                            "report_signature")} == dict.fromkeys(
        ("report", "certificate_chain", "report_signature"), "ok")
    assert steps["measurements"]["status"] == steps["revocation"]["status"] == "not checked"
    r = check.judge_attestation(facts)
    assert r.verdict is Verdict.WARN
    assert "not verified here" in r.summary and "REPLAYED" in r.summary
    assert r.facts["attestation"]["evidence_sha256"] == ag.evidence_digest(
        recorded()["evidence"])
    assert any("measurements: not checked" in f for f in r.findings)


def test_replayed_evidence_on_real_hardware_is_refused() -> None:
    for doc in (recorded(), _measured(recorded())):
        facts = check.attestation_facts(doc, allow_replay=False)
        r = check.judge_attestation(facts)
        assert facts["status"] == "refused" and r.verdict is Verdict.FAIL
        assert r.fault_code == "NC-ATTEST-REFUSED" and "replayed" in r.summary


def test_verified_only_when_every_gpu_was_measured() -> None:
    doc = _measured(recorded())
    r = check.judge_attestation(check.attestation_facts(doc, allow_replay=True))
    assert r.verdict is Verdict.PASS and "1 GPUs attested" in r.summary
    assert "revocation not checked here" in r.summary  # offline: said, not hidden
    two = copy.deepcopy(doc)
    second = copy.deepcopy(recorded()["gpus"][0]) | {"index": 1}
    two["gpus"].append(second)
    two["status"], two["reason"] = ag.outcome(two["gpus"])
    assert check.attestation_facts(two, allow_replay=True)["status"] == "not verified here"


def test_a_document_that_claims_more_than_its_steps_is_not_believed() -> None:
    bold = recorded() | {"status": "verified"}
    with pytest.raises(check.BadDocument, match="says 'verified' but its steps say"):
        check.attestation_facts(bold, allow_replay=True)
    altered = recorded()
    report = bytearray(base64.b64decode(altered["evidence"]["gpus"][0]["report_b64"]))
    report[100] ^= 1
    altered["evidence"]["gpus"][0]["report_b64"] = base64.b64encode(report).decode()
    with pytest.raises(check.BadDocument, match="evidence digest"):
        check.attestation_facts(altered, allow_replay=True)
    odd = recorded()
    odd["gpus"][0]["steps"]["report"]["status"] = "fine"
    with pytest.raises(check.BadDocument, match="not ok/failed/not checked"):
        check.attestation_facts(odd, allow_replay=True)
    with pytest.raises(check.BadDocument):
        check.attestation_facts({"schema": "other"})


def test_evidence_for_another_nonce_is_refused_as_not_fresh() -> None:
    doc = _measured(recorded())
    doc["evidence"]["replayed"] = False
    _redigest(doc)
    wanted = check.run_nonce("run-1", "h1")
    assert wanted == check.run_nonce("run-1", "h1") != check.run_nonce("run-1", "h2")
    facts = check.attestation_facts(doc, wanted)
    assert facts["status"] == "refused" and "not fresh" in facts["reason"]
    doc["evidence"]["nonce"] = wanted
    _redigest(doc)
    assert check.attestation_facts(doc, wanted)["status"] == "verified"


def test_not_attested_is_a_warning_and_never_attested() -> None:
    r = check.not_attested("confidential computing is off")
    assert r.verdict is Verdict.WARN and r.summary.startswith("not attested: ")
    assert r.facts["attestation"]["status"] == "not attested"
    assert r.facts["attestation"]["evidence"] is None


def test_the_check_is_planned_only_where_the_inventory_asks_for_it() -> None:
    def planned(validation: dict[str, Any]) -> list[str]:
        spec = HostSpec(name="h1", address="127.0.0.1", port=22, groups=(),
                        gpu_model="H200-SXM", gpu_count=8, cpu_cores=112, ram_gb=2048,
                        nvme_count=8, nvme_min_gb=3500, simulated=True, validation=validation)
        return build_plan(spec, thresholds.suite("standard"), None, "r", cli_thresholds={},
                          scratch=None).checks

    assert "attestation.gpu" not in planned({})
    assert "attestation.gpu" in planned({"attestation": True})


# --- the certificate ------------------------------------------------------------------------

@pytest.fixture
def key(tmp_path: Path) -> Path:
    return init_key(tmp_path / "keys").private


def _signed(env_path: Path) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(env_path.read_text())["payload"]))


def _pub(key: Path) -> Path:
    return next(key.parent.glob("*.pub"))


def test_the_certificate_states_the_attestation_and_embeds_the_evidence(
        tmp_path: Path, key: Path) -> None:
    result = check.judge_attestation(check.attestation_facts(recorded(), allow_replay=True))
    run = make_run(tmp_path / "a", {"n1": {"results": [*passing(recorded_results()),
                                                       result.as_dict()]}})
    node = certify(run, load_private_key(key)).nodes[0]
    p = _signed(node.envelope)["predicate"]
    att = p["attestation"]
    assert att["status"] == "not verified here" and att["replayed"] is True
    assert att["evidence_sha256"] == ag.evidence_digest(recorded()["evidence"])
    assert att["gpus"][0]["steps"]["report_signature"] == "ok"
    embedded = next(r for r in p["results"] if r["check"] == "attestation.gpu")
    assert embedded["facts"]["attestation"]["evidence"] == recorded()["evidence"]
    assert p["verdict"] == "READY"  # a warning, stated; not a failure of the node
    v = verify_report(node.envelope, [_pub(key)])
    _, ok, detail = next(s for s in v.steps if s[0] == "attestation")
    assert ok and detail.startswith("not verified here (node-reported, not verified by the "
                                    "control side): ")
    page = node.html.read_text()
    assert 'data-status="not verified here"' in page and "REPLAYED" in page
    pt = report_html.node_page(_signed(node.envelope), envelope_name="n1", keyid="k" * 16,
                               lang="pt_BR")
    assert "não verificada aqui" in pt and "Evidência ancorada no hardware" in pt


def test_a_node_that_collected_none_is_stated_as_not_attested(tmp_path: Path,
                                                               key: Path) -> None:
    run = make_run(tmp_path / "a", {"n1": {"results": passing(recorded_results())}})
    node = certify(run, load_private_key(key)).nodes[0]
    att = _signed(node.envelope)["predicate"]["attestation"]
    assert att["status"] == "not attested" and "does not ask" in att["reason"]
    page = node.html.read_text()
    assert 'data-status="not attested"' in page and "were not attested" in page
    assert 'data-status="verified"' not in page


def test_embedded_evidence_that_differs_from_its_digest_fails_verification(
        tmp_path: Path, key: Path) -> None:
    result = check.judge_attestation(check.attestation_facts(recorded(), allow_replay=True))
    d = result.as_dict()
    d["facts"]["attestation"]["evidence"]["gpus"][0]["uuid"] = "GPU-swapped"
    run = make_run(tmp_path / "a", {"n1": {"results": [*passing(recorded_results()), d]}})
    node = certify(run, load_private_key(key)).nodes[0]
    v = verify_report(node.envelope, [_pub(key)])
    _, ok, detail = next(s for s in v.steps if s[0] == "attestation")
    assert not ok and "does NOT match the embedded evidence" in detail
    assert not v.ok


def test_a_nodes_verified_is_stated_as_its_own_word(tmp_path: Path, key: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A node whose (fake) verifier says "verified": without a verifier on the control
    side the certificate and verify say node-reported, never that nodecert verified it.
    Before, verify printed "verified" as the certificate's own finding."""
    monkeypatch.delenv("NODECERT_ATTESTATION_VERIFIER", raising=False)
    claimed = check.judge_attestation(check.attestation_facts(_measured(recorded()),
                                                              allow_replay=True))
    assert claimed.verdict is Verdict.PASS
    run = make_run(tmp_path / "a", {"n1": {"results": [*passing(recorded_results()),
                                                       claimed.as_dict()]}})
    node = certify(run, load_private_key(key)).nodes[0]
    att = _signed(node.envelope)["predicate"]["attestation"]
    assert att["checked_by"] == "node"
    _, held, detail = next(s for s in verify_report(node.envelope, [_pub(key)]).steps
                           if s[0] == "attestation")
    assert held and detail.startswith("verified (node-reported, not verified by the control side)")
    assert 'data-checked-by="node"' in node.html.read_text()


# --- live, through NVIDIA's verifier ---------------------------------------------------------

def test_the_control_side_verifies_the_evidence_itself(tmp_path: Path, key: Path) -> None:
    """With NVIDIA's verifier named on the control side, the node's "verified" is not
    taken: the embedded evidence is verified there (the recorded sample: not verified
    here, no RIMs), and evidence whose report was altered is refused."""
    python = verifier_python()
    claimed = check.judge_attestation(check.attestation_facts(_measured(recorded()),
                                                              allow_replay=True))
    run = make_run(tmp_path / "a", {"n1": {"results": [*passing(recorded_results()),
                                                       claimed.as_dict()]}})
    node = certify(run, load_private_key(key), attestation_verifier=python).nodes[0]
    att = _signed(node.envelope)["predicate"]["attestation"]
    assert att["checked_by"] == "control side" and att["node_status"] == "verified"
    assert att["status"] == "not verified here" and "its word is not taken" in att["reason"]
    _, ok, detail = next(s for s in verify_report(node.envelope, [_pub(key)]).steps
                         if s[0] == "attestation")
    assert ok and detail.startswith("not verified here: ")
    forged = claimed.as_dict()
    ev = forged["facts"]["attestation"]["evidence"]
    report = bytearray(base64.b64decode(ev["gpus"][0]["report_b64"]))
    report[200] ^= 1
    ev["gpus"][0]["report_b64"] = base64.b64encode(report).decode()
    forged["facts"]["attestation"]["evidence_sha256"] = ag.evidence_digest(ev)
    run = make_run(tmp_path / "b", {"n1": {"results": [*passing(recorded_results()),
                                                       forged]}})
    node = certify(run, load_private_key(key), attestation_verifier=python).nodes[0]
    att = _signed(node.envelope)["predicate"]["attestation"]
    assert att["status"] == "refused", att

def _evidence_file(tmp: Path, evidence: dict[str, Any]) -> str:
    path = tmp / f"evidence-{len(list(tmp.glob('evidence-*')))}.json"
    path.write_text(json.dumps(evidence))
    return str(path)


def test_the_verifier_replays_nvidias_sample_as_recorded(tmp_path: Path) -> None:
    rc, doc, err = helper(tmp_path, "run", "--replay")
    assert rc == 0, err
    assert doc is not None and doc["status"] == "not verified here"
    assert doc["evidence"] == recorded()["evidence"]  # the same evidence, the same digest
    assert doc["evidence_sha256"] == recorded()["evidence_sha256"]
    assert doc["verifier"] == {"name": "nv-local-gpu-verifier", "version": "2.7.3"}
    # and verifying the collected evidence on its own gives the same answer
    rc, again, err = helper(tmp_path, "verify", "--evidence",
                            _evidence_file(tmp_path, doc["evidence"]))
    assert rc == 0 and again is not None and again["gpus"] == doc["gpus"], err


def _foreign_root_chain(pem: str) -> str:
    k = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "NVIDIA Device Identity CA")])
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(k.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(k, hashes.SHA384()))
    end = "-----END CERTIFICATE-----"
    blocks = [b + end for b in pem.split(end) if b.strip()]
    return "".join(blocks[:-1]) + "\n" + cert.public_bytes(serialization.Encoding.PEM).decode()


def _tampered(what: str) -> dict[str, Any]:
    ev = copy.deepcopy(recorded()["evidence"])
    g = ev["gpus"][0]
    report = bytearray(base64.b64decode(g["report_b64"]))
    if what == "a measurement":
        report[200] ^= 0x01
    elif what == "the signature":
        report[-5] ^= 0x80
    elif what == "a truncated report":
        report = report[:1000]
    if what == "another nonce":
        ev["nonce"] = "00" * 32
    if what == "a foreign root":
        g["certificates_pem"] = _foreign_root_chain(g["certificates_pem"])
    if what == "another driver":
        g["driver_version"] = "550.90.08"
    g["report_b64"] = base64.b64encode(bytes(report)).decode()
    return ev


@pytest.mark.parametrize(("what", "step"), [
    ("a measurement", "report_signature"), ("the signature", "report_signature"),
    ("a truncated report", "report"), ("another nonce", "report_signature"),
    ("a foreign root", "certificate_chain"), ("another driver", "report_signature")])
def test_tampered_evidence_is_refused_at_the_step_it_breaks(tmp_path: Path, what: str,
                                                            step: str) -> None:
    verifier_python()
    rc, doc, err = helper(tmp_path, "verify", "--evidence",
                          _evidence_file(tmp_path, _tampered(what)))
    assert rc == 1, err
    assert doc is not None and doc["status"] == "refused"
    assert doc["gpus"][0]["steps"][step]["status"] == "failed", doc["gpus"][0]["steps"]
    if what == "a foreign root":  # our byte-for-byte root check, before the verifier's
        assert "not NVIDIA's device root" in doc["gpus"][0]["steps"][step]["detail"]
    facts = check.attestation_facts(doc, allow_replay=True)
    assert check.judge_attestation(facts).verdict is Verdict.FAIL


def test_a_reference_manifest_in_the_mirror_is_checked_not_trusted(tmp_path: Path) -> None:
    """NVIDIA's test driver RIM, put where the sample's driver RIM would be: it is for
    another driver and its signer has expired, so the evidence is refused, never taken
    as verified because a file with the right name was there."""
    samples = Path(verifier_python()).parent.parent / "lib"
    rim = next(samples.glob("python3*/site-packages/verifier/samples/"
                            "Driver_RIM_test_no_gpu.swidtag"))
    rims = tmp_path / "rims"
    rims.mkdir()
    (rims / "NV_GPU_DRIVER_GH100_550.90.07").write_bytes(rim.read_bytes())
    rc, doc, err = helper(tmp_path, "verify", "--rim-dir", str(rims), "--evidence",
                          _evidence_file(tmp_path, recorded()["evidence"]))
    assert rc == 1 and doc is not None, err
    steps = doc["gpus"][0]["steps"]
    assert steps["driver_rim"]["status"] == "failed"
    assert steps["vbios_rim"]["status"] == "not checked"  # none in the directory


def test_evidence_that_is_not_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "evidence.json"
    bad.write_text("{not json")
    rc, doc, err = helper(tmp_path, "verify", "--evidence", str(bad))
    assert rc == 2 and doc is None and str(bad) in err


def test_the_node_check_runs_the_verifier_and_states_replay_on_simulated_gpus(
        tmp_path: Path) -> None:
    python = verifier_python()

    def ctx(spec: dict[str, Any]) -> Ctx:
        return Ctx(Plan(run_id="run-1", host="h1", suite="quick", checks=["attestation.gpu"],
                        simulated=True, spec=spec))

    r = check.gpu_attestation(ctx({"attestation_python": python,
                                   "attestation_rim_dirs": [str(tmp_path / "none")]}))
    assert r.verdict is Verdict.WARN, r.summary
    att = r.facts["attestation"]
    assert att["status"] == "not verified here" and att["replayed"] is True
    assert att["evidence"] == recorded()["evidence"]
    missing = check.gpu_attestation(ctx({"attestation_python": str(tmp_path / "no-python")}))
    assert missing.verdict is Verdict.WARN and missing.summary.startswith("not attested: ")
