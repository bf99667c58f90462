"""READY only from an acceptance run: the profiles' data, the judgement, the verdicts it
gives (READY, HEALTHY health records, NOT READY), and every place a health record must
not pass for an acceptance certificate: verify --require acceptance, the revocation list,
the hand-over bundle, revalidate's baseline, the lab's minimums on real hardware."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.certs import revocations as revlist
from nodecert.certs.bundlecheck import check
from nodecert.certs.certify import HEALTHY, NOT_READY, READY, certify
from nodecert.certs.handover import HandoverError, build
from nodecert.certs.signing import KeyPair, init_key, load_private_key, sign_envelope
from nodecert.cli import main
from nodecert.core.errors import InventoryError, ManifestError
from nodecert.profiles import acceptance, thresholds
from nodecert.provision.chain import acceptance_suite
from nodecert.revalidate.run import acceptance_baseline
from support.runs import make_run, passing, recorded_results

SAMPLE_HOST = ("n1 ansible_host=192.0.2.10 nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 "
               "nodecert_cpu_cores=112 nodecert_ram_gb=2048 nodecert_nvme_count=8")


@pytest.fixture
def kp(tmp_path: Path) -> KeyPair:
    return init_key(tmp_path / "keys")


def predicate(envelope: Path) -> dict[str, Any]:
    env = json.loads(envelope.read_text())
    return dict(json.loads(base64.b64decode(env["payload"]))["predicate"])


def certified(root: Path, kp: KeyPair, results: list[dict[str, Any]] | None = None,
              **kw: Any) -> tuple[Any, dict[str, Any]]:
    run = make_run(root, {"n1": {"results": results if results is not None
                                 else passing(recorded_results())}}, **kw)
    cr = certify(run, load_private_key(kp.private))
    return cr, predicate(cr.nodes[0].envelope)


def verify(cert: Path, kp: KeyPair, *args: str) -> Any:
    return CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(kp.public), *args])


# --- the data -------------------------------------------------------------------------------

def test_every_stage_and_minimum_cites_a_source_and_the_suites_declare_their_profile() -> None:
    profs = acceptance.profiles()
    assert set(profs) == {"production", "lab"}
    for prof in profs.values():
        assert [s.name for s in prof.stages] == ["hardware", "health", "platform", "stack",
                                                 "burnin", "soak", "nccl", "bandwidth",
                                                 "storage", "dcgm"]
        for s in prof.stages:
            assert s.source.startswith(("nodecert policy: ", "NVIDIA")), s
            if s.minimum:
                assert s.minimum.source.startswith(("nodecert policy: ", "NVIDIA DCGM")), s
    prod = {s.name: s.minimum for s in profs["production"].stages}
    assert (prod["burnin"].value, prod["soak"].value, prod["storage"].value,
            prod["dcgm"].value) == (120, 600, 30, 2)
    assert profs["lab"].simulated_only and not profs["production"].simulated_only
    got = {n: s.acceptance for n, s in thresholds.suites().items()}
    assert got == {"quick": None, "standard": "production", "full": "production", "lab": "lab"}
    # the shipped suites meet their own profile's minimums
    for name in ("standard", "full", "lab"):
        s = thresholds.suite(name)
        for stage in acceptance.profile(str(s.acceptance)).stages:
            if stage.minimum:
                section, key = stage.minimum.setting.split(".")
                assert getattr(s, section)[key] >= stage.minimum.value, (name, stage.name)
        assert set(s.checks) >= {c for st in acceptance.profile(str(s.acceptance)).stages
                                 for c in st.checks}, name
    assert set(thresholds.suite("lab").checks) == set(thresholds.suite("standard").checks)


def test_a_suites_file_naming_an_unknown_profile_and_an_unsourced_minimum_are_refused(
        tmp_path: Path) -> None:
    f = tmp_path / "suites.yml"
    f.write_text("schema: nodecert.suites/v1\nsuites:\n  mine:\n    description: d\n"
                 "    acceptance: relaxed\n    check_timeout_s: 60\n"
                 "    checks: [hardware.inventory]\n"
                 "    storage: {size_mb: 1, runtime_s: 1}\n")
    with pytest.raises(ManifestError, match="unknown acceptance profile 'relaxed'"):
        thresholds.suites(f)
    bad = tmp_path / "acceptance.yml"
    text = (Path(acceptance.__file__).parents[3] / "validators" / "acceptance.yml").read_text()
    bad.write_text(text.replace("source: BURNIN}", "source: NOWHERE}", 1))
    with pytest.raises(ManifestError, match="cites 'NOWHERE'"):
        acceptance.profiles(bad)


# --- the judgement and the verdicts -------------------------------------------------------

def test_an_acceptance_run_is_ready_and_says_what_it_measured(tmp_path: Path,
                                                              kp: KeyPair) -> None:
    cr, p = certified(tmp_path, kp)
    assert p["verdict"] == READY and cr.ok() and cr.all_ready
    a = p["acceptance"]
    assert a["accepted"] and a["profile"] == "production" and a["missing"] == []
    assert a["durations_s"] == {"burnin": 120.0, "soak": 600.0}
    nccl = next(s for s in a["stages"] if s["stage"] == "nccl")
    assert nccl["met"] and nccl["detail"].startswith("not applicable: a one-GPU node")
    page = cr.nodes[0].html.read_text()
    assert 'id="acceptance" data-accepted="yes" data-profile="production"' in page
    r = verify(cr.nodes[0].envelope, kp, "--require", "acceptance")
    assert r.exit_code == 0, r.output
    assert ("acceptance certificate: suite standard, acceptance profile production; burn-in "
            "120 s, soak 600 s; not proven with its neighbours") in r.output


def test_a_quick_run_is_a_health_record_that_lists_what_it_lacks(tmp_path: Path,
                                                                 kp: KeyPair) -> None:
    cr, p = certified(tmp_path, kp, passing(recorded_results(), acceptance=False),
                      suite="quick")
    assert p["verdict"] == HEALTHY and p["acceptance"]["profile"] is None
    # the recording's own burn-in and soak ran 60 s: under the production minimums
    assert p["acceptance"]["missing"] == ["platform", "stack", "burnin", "soak", "bandwidth",
                                          "storage", "dcgm"]
    assert p["reasons"][0] == "suite quick is not an acceptance suite"
    assert cr.ok() and not cr.all_ready  # a health record was what was asked for
    assert not cr.ok(require_acceptance=True)
    page = cr.nodes[0].html.read_text()
    assert 'class="banner HEALTHY"' in page
    assert ('<b id="missing">platform, stack, burnin, soak, bandwidth, storage, dcgm</b>'
            in page)
    assert 'data-stage="storage" data-met="no"' in page
    plain = verify(cr.nodes[0].envelope, kp)
    assert plain.exit_code == 0, plain.output
    assert "VALID as a health record: the node is HEALTHY, not READY" in plain.output
    assert ("not an acceptance certificate (a health record): suite quick, not an acceptance "
            "suite; lacks platform, stack, burnin, soak, bandwidth") in plain.output
    strict = verify(cr.nodes[0].envelope, kp, "--require", "acceptance")
    assert strict.exit_code == 1 and "FAIL scope" in strict.output
    assert "(--require acceptance)" in strict.output
    # certify says so, and exits 1 only when acceptance is required
    run = cr.run_dir
    out = CliRunner().invoke(main, ["certify", str(run), "--key", str(kp.private), "--out",
                                    str(tmp_path / "again")])
    assert out.exit_code == 0, out.output
    assert ("n1             HEALTHY: a health record, not an acceptance certificate; lacks "
            "platform, stack, burnin, soak, bandwidth, storage, dcgm") in out.output
    req = CliRunner().invoke(main, ["certify", str(run), "--key", str(kp.private), "--out",
                                    str(tmp_path / "req"), "--require", "acceptance"])
    assert req.exit_code == 1, req.output


def test_only_some_checks_is_a_health_record_whatever_it_measured(tmp_path: Path,
                                                                  kp: KeyPair) -> None:
    cr, p = certified(tmp_path, kp, plan={"partial": True})
    assert p["verdict"] == HEALTHY
    assert "only some of the suite's checks ran (--only)" in p["acceptance"]["reasons"]
    assert p["acceptance"]["missing"] == []  # every stage measured, still not acceptance
    assert cr.ok() and not cr.nodes[0].acceptance_asked


@pytest.mark.parametrize(("change", "stage", "words"), [
    ({"load": {"burnin_s": 30, "soak_s": 600}}, "burnin",
     "load.burnin_s was 30, under the 120 s acceptance requires"),
    ({"load": {"burnin_s": 120, "soak_s": 60}}, "soak",
     "load.soak_s was 60, under the 600 s"),
    ({"storage": {"runtime_s": 3}}, "storage", "storage.runtime_s was 3"),
    ({"fabric": {"dcgm_level": 1}}, "dcgm", "fabric.dcgm_level was 1"),
])
def test_a_shortened_acceptance_run_is_not_ready_and_certify_exits_one(
        tmp_path: Path, kp: KeyPair, change: dict[str, Any], stage: str, words: str) -> None:
    from support.runs import ACCEPTANCE_OPTIONS

    options = copy.deepcopy(ACCEPTANCE_OPTIONS)
    for section, keys in change.items():
        options[section].update(keys)
    cr, p = certified(tmp_path, kp, plan={"options": options})
    assert p["verdict"] == HEALTHY and p["acceptance"]["missing"] == [stage]
    assert any(words in r for r in p["reasons"]), p["reasons"]
    assert not cr.ok()  # an acceptance suite's run that fell short


def test_what_the_node_measured_counts_not_only_what_was_asked(tmp_path: Path,
                                                               kp: KeyPair) -> None:
    res = passing(recorded_results())
    burn = next(r for r in res if r["check"] == "load.burnin")
    burn["value"]["seconds"] = 40.0  # asked for 120 s, loaded for 40
    soak = next(r for r in res if r["check"] == "load.thermal_soak")
    soak["value"]["plateau_sm_mhz"] = {}
    dcgm = next(r for r in res if r["check"] == "dcgm.diag")
    dcgm["value"]["level"] = 1
    _, p = certified(tmp_path, kp, res)
    why = p["reasons"]
    assert p["verdict"] == HEALTHY
    assert p["acceptance"]["missing"] == ["burnin", "soak", "dcgm"], why
    assert "burnin: measured 40 s, under the 120 s acceptance requires" in why
    assert any(w.startswith("soak: no clock plateau for GPU") for w in why), why


def test_a_warn_that_measured_nothing_and_a_missing_check_are_not_a_stage(
        tmp_path: Path, kp: KeyPair) -> None:
    res = passing(recorded_results())
    for r in res:
        if r["check"] == "fabric.bandwidth":
            r.update(verdict="WARN", value={"not_measured": ["nvbandwidth missing"]},
                     summary="copy bandwidth not measured")
    res = [r for r in res if r["check"] != "platform.iommu"]
    _, p = certified(tmp_path, kp, res, plan={"spec": {"gpu_count": 8}})
    assert p["verdict"] == HEALTHY
    # eight GPUs: the all-reduce that reported no bandwidth is missing too
    assert p["acceptance"]["missing"] == ["platform", "nccl", "bandwidth"]
    assert "platform: platform.iommu did not run" in p["reasons"]
    assert any(r.startswith("bandwidth: fabric.bandwidth reported no measurement")
               for r in p["reasons"])


def test_a_failure_is_not_ready_whatever_the_acceptance(tmp_path: Path, kp: KeyPair) -> None:
    _, p = certified(tmp_path, kp, recorded_results())  # the recording's real findings
    assert p["verdict"] == NOT_READY and p["acceptance"]["accepted"] is False


# --- the lab's minimums never serve real hardware ------------------------------------------

def test_the_lab_suite_is_refused_for_a_real_host_before_anything_runs(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[gpu]\n{SAMPLE_HOST}\n")
    r = CliRunner().invoke(main, ["validate", "-i", str(inv), "--suite", "lab",
                                  "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2, r.output
    assert "suite lab is judged by the lab acceptance profile, for simulated hardware only, " \
           "and host(s) n1 are not lab hosts" in r.output
    assert not (tmp_path / "runs").exists()
    assert acceptance_suite(inv) == "standard"
    inv.write_text(f"[gpu]\n{SAMPLE_HOST} nodecert_simulated=true\n")
    assert acceptance_suite(inv) == "lab"
    inv.write_text(f"[gpu]\n{SAMPLE_HOST} nodecert_simulated=true\n"
                   f"{SAMPLE_HOST.replace('n1', 'n2').replace('.10', '.11')}\n")
    with pytest.raises(InventoryError, match=r"mixes lab hosts \(n1\) and real hosts \(n2\)"):
        acceptance_suite(inv)


def test_real_hardware_judged_on_lab_minimums_is_never_accepted(tmp_path: Path,
                                                                kp: KeyPair) -> None:
    from support.runs import ACCEPTANCE_OPTIONS

    _, p = certified(tmp_path / "a", kp, suite="lab")  # make_run's host is not simulated
    assert p["verdict"] == HEALTHY
    assert ("the lab acceptance profile is for simulated hardware only: it cannot certify "
            "real hardware") in p["reasons"]
    # a statement forged to say READY on lab minimums, signed: verify refuses its scope
    cr, good = certified(tmp_path / "b", kp, plan={"options": ACCEPTANCE_OPTIONS})
    env = json.loads(cr.nodes[0].envelope.read_text())
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["acceptance"].update(profile="lab", simulated_only=True)
    forged = tmp_path / "forged.intoto.dsse.json"
    forged.write_text(json.dumps(sign_envelope(json.dumps(st).encode(), env["payloadType"],
                                               load_private_key(kp.private))))
    r = verify(forged, kp)
    assert r.exit_code == 1, r.output
    assert "claims real hardware accepted on the lab acceptance profile" in r.output
    st["predicate"]["acceptance"].update(profile="production", simulated_only=False,
                                         accepted=False)
    forged.write_text(json.dumps(sign_envelope(json.dumps(st).encode(), env["payloadType"],
                                               load_private_key(kp.private))))
    r = verify(forged, kp)
    assert r.exit_code == 1 and "says READY but its acceptance judgement did not" in r.output
    assert good["verdict"] == READY


# --- a health record never stands in for an acceptance certificate -------------------------

def entry(verdict: str, day: int, digest: str) -> revlist.Entry:
    t = dt.datetime(2026, 12, day, tzinfo=dt.UTC).isoformat()
    return revlist.Entry(digest, "node:n1", verdict, t, t)


def test_a_health_record_never_supersedes_an_acceptance_certificate() -> None:
    now = dt.datetime(2026, 12, 9, tzinfo=dt.UTC)
    reg = revlist.register(revlist.Register(), [entry(READY, 1, "a"), entry(HEALTHY, 2, "b"),
                                                entry(HEALTHY, 3, "c")], now)
    status = {d: e.status for d, e in reg.entries.items()}
    assert status == {"a": "current", "b": "superseded", "c": "current"}
    assert reg.entries["b"].superseded_by == "c"
    # anything that found a failure does supersede it
    reg = revlist.register(reg, [entry(NOT_READY, 4, "d")], now)
    assert {d: e.status for d, e in reg.entries.items()} == {
        "a": "superseded", "b": "superseded", "c": "superseded", "d": "current"}
    assert reg.entries["a"].superseded_by == "d"


def test_verify_with_the_list_keeps_the_acceptance_certificate_after_a_quick_run(
        tmp_path: Path, kp: KeyPair) -> None:
    rev = tmp_path / revlist.DEFAULT_NAME
    ready = make_run(tmp_path / "a", {"n1": {"results": passing(recorded_results())}})
    first = certify(ready, load_private_key(kp.private), revocations=rev).nodes[0].envelope
    quick = make_run(tmp_path / "b", {"n1": {"results": passing(recorded_results()),
                                             "finished": dt.datetime.now(dt.UTC).timestamp()
                                             - 60}}, suite="quick")
    certify(quick, load_private_key(kp.private), revocations=rev)
    r = verify(first, kp, "--revocations", str(rev), "--require", "acceptance")
    assert r.exit_code == 0, r.output
    assert "ok   revocation     current on the list" in r.output


def test_handover_refuses_health_records_unless_told_and_verify_bundle_too(
        tmp_path: Path, kp: KeyPair) -> None:
    cr, _ = certified(tmp_path / "q", kp, suite="quick")
    key = load_private_key(kp.private)
    with pytest.raises(HandoverError, match=r"1 node\(s\) hold only a health record, not an "
                                            r"acceptance certificate: n1 .*suite quick"):
        build([cr.run_dir], tmp_path / "bundle", [key])
    assert not (tmp_path / "bundle").exists()
    h = build([cr.run_dir], tmp_path / "bundle", [key], allow_health_records=True)
    manifest = json.loads((h.out / "manifest.intoto.dsse.json").read_text())
    assert json.loads(base64.b64decode(manifest["payload"]))["health_records_allowed"] is True
    refused = check(h.out, [kp.public])
    assert not refused.ok
    assert ("health records", False) in [(n, ok) for n, ok, _ in refused.steps]
    assert check(h.out, [kp.public], allow_health_records=True).ok
    r = CliRunner().invoke(main, ["verify-bundle", str(h.out), "--pubkey", str(kp.public)])
    assert r.exit_code == 1 and "refused: pass --allow-health-records" in r.output
    r = CliRunner().invoke(main, ["verify-bundle", str(h.out), "--pubkey", str(kp.public),
                                  "--allow-health-records"])
    assert r.exit_code == 0, r.output
    # counted as what it is, never as READY
    assert ("VALID: the bundle holds; 0 certificates valid and READY, 1 valid health records "
            "(HEALTHY)") in r.output


def test_a_node_with_both_hands_over_its_acceptance_certificate(tmp_path: Path,
                                                                 kp: KeyPair) -> None:
    key = load_private_key(kp.private)
    ready = make_run(tmp_path / "a", {"n1": {"results": passing(recorded_results())}})
    certify(ready, key)
    later = dt.datetime.now(dt.UTC).timestamp() - 60
    quick = make_run(tmp_path / "b", {"n1": {"results": passing(recorded_results()),
                                             "finished": later}}, suite="quick")
    certify(quick, key)
    h = build([ready, quick], tmp_path / "bundle", [key])
    assert [c.statement["predicate"]["verdict"] for c in h.certificates] == [READY]
    assert h.superseded and "replaced by" in h.superseded[0]


def test_drift_is_judged_against_the_last_acceptance_certificate(tmp_path: Path,
                                                                  kp: KeyPair) -> None:
    import os
    import shutil
    import time

    runs = tmp_path / "runs"
    runs.mkdir()
    key = load_private_key(kp.private)

    def run_in(name: str, suite: str, run_id: str) -> Path:
        made = make_run(tmp_path / name, {"n1": {"results": passing(recorded_results()),
                                                 "run_id": run_id}}, suite=suite)
        certify(made, key)
        return Path(shutil.move(str(made), str(runs / name)))
    ready = run_in("20261201-000000-aaaaaa", "standard", "acceptance-run")
    quick = run_in("20261202-000000-bbbbbb", "quick", "quick-run")
    later = time.time() + 5
    os.utime(quick / "reports", (later, later))  # the quick run's reports are the newest
    base, newest = acceptance_baseline(runs, [key.public_key()])
    assert newest == quick / "reports"
    assert base["n1"]["run_id"] == "acceptance-run" and base["n1"]["accepted"]
    # without any acceptance certificate, the newest certificate is the baseline
    (ready / "reports" / "n1.intoto.dsse.json").unlink()
    base, _ = acceptance_baseline(runs, [key.public_key()])
    assert base["n1"]["run_id"] == "quick-run" and not base["n1"]["accepted"]
