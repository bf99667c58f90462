"""The signed revocation and supersession list: certify keeps it, revoke edits it, verify
reads it. Without the list a newer NOT READY certificate leaves the older READY one
verifying VALID offline; with it, the older one fails."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.certs import revocations as revlist
from nodecert.certs.certify import certify
from nodecert.certs.cluster import certify_cluster
from nodecert.certs.signing import init_key, load_private_key, load_public_key
from nodecert.certs.verify import ReportError, verify_report
from nodecert.cli import main
from support.cluster import ModelLauncher, run_model
from support.runs import make_run, passing, recorded_results

DAY = 86400.0


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    kp = init_key(tmp_path / "keys")
    return kp.private, kp.public


def _run(root: Path, finished: float, *, ready: bool = True) -> Path:
    results = passing(recorded_results()) if ready else recorded_results()
    return make_run(root, {"n1": {"results": results, "started": finished - 148,
                                  "finished": finished}})


def _steps(v: object) -> dict[str, tuple[bool, str]]:
    return {n: (ok, d) for n, ok, d in v.steps}  # type: ignore[attr-defined]


def test_a_newer_not_ready_certificate_makes_the_older_ready_one_fail(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = load_private_key(keys[0]), [keys[1]]
    listing = tmp_path / "runs" / revlist.DEFAULT_NAME
    now = time.time()
    old = certify(_run(tmp_path / "runs" / "a", now - 2 * DAY), key, revocations=listing)
    assert old.all_ready and old.revocations == listing
    after_first = tmp_path / "first-list.json"
    shutil.copy(listing, after_first)
    new = certify(_run(tmp_path / "runs" / "b", now - DAY, ready=False), key,
                  revocations=listing)
    assert not new.all_ready
    cert = old.nodes[0].envelope
    # Without the list the older certificate still holds offline (what the list is for).
    assert verify_report(cert, pub).ok
    v = verify_report(cert, pub, revocations=listing)
    ok, detail = _steps(v)["revocation"]
    assert not ok and not v.ok and v.exit_code == 1
    assert detail.startswith("SUPERSEDED ") and "NOT READY" in detail and "list #2" in detail
    # The list as it was before the newer certificate names it current.
    issued = revlist.load(after_first, [load_public_key(pub[0])]).issued
    assert _steps(verify_report(cert, pub, revocations=after_first))["revocation"] == (
        True, f"current on the list #1 issued {issued}")
    # The newer certificate is current on the list (its own verdict is what fails it).
    nv = _steps(verify_report(new.nodes[0].envelope, pub, revocations=listing))
    assert nv["revocation"][0] and not nv["verdict"][0]
    reg = revlist.load(listing, [load_public_key(pub[0])])
    assert reg.sequence == 2
    assert sorted(e.status for e in reg.entries.values()) == ["current", "superseded"]


def test_a_certificate_missing_from_the_list_is_superseded_by_a_newer_one_on_it(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = load_private_key(keys[0]), [keys[1]]
    listing = tmp_path / revlist.DEFAULT_NAME
    now = time.time()
    unlisted = certify(_run(tmp_path / "a", now - 2 * DAY), key)  # kept on no list
    assert unlisted.revocations is None and not listing.exists()
    certify(_run(tmp_path / "b", now - DAY), key, revocations=listing)
    ok, detail = _steps(verify_report(unlisted.nodes[0].envelope, pub,
                                      revocations=listing))["revocation"]
    assert not ok and "the list holds a certificate on newer evidence for node:n1" in detail
    # ...and one newer than everything on the list holds.
    newest = certify(_run(tmp_path / "c", now - 3600), key)
    ok, detail = _steps(verify_report(newest.nodes[0].envelope, pub,
                                      revocations=listing))["revocation"]
    assert ok and "not on the list #1" in detail


def test_revoke_names_the_reason_and_refuses_what_it_cannot_vouch_for(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key = load_private_key(keys[0])
    runs = tmp_path / "runs"
    run = _run(runs / "a", time.time() - 3600)
    cli = CliRunner()
    r = cli.invoke(main, ["certify", str(run), "--key", str(keys[0])])
    assert r.exit_code == 0, r.output
    listing = runs / "a" / revlist.DEFAULT_NAME  # next to the run directory by default
    assert f"revocation list: {listing}" in r.output
    cert = run / "reports" / "n1.intoto.dsse.json"
    ok = cli.invoke(main, ["verify", str(cert), "--pubkey", str(keys[1]),
                           "--revocations", str(listing)])
    assert ok.exit_code == 0 and "revocation" in ok.output and "current on the list #1" \
        in ok.output, ok.output
    r = cli.invoke(main, ["revoke", str(cert), "--revocations", str(listing), "--key",
                          str(keys[0]), "--reason", "GPU 3 replaced (RMA 4711)"])
    assert r.exit_code == 0 and "list #2" in r.output, r.output
    bad = cli.invoke(main, ["verify", str(cert), "--pubkey", str(keys[1]),
                            "--revocations", str(listing)])
    assert bad.exit_code == 1
    assert "REVOKED" in bad.output and "GPU 3 replaced (RMA 4711)" in bad.output
    assert "NOT VALID" in bad.output
    # Another signer's key cannot revoke it, nor a certificate that is not on the list.
    other = init_key(tmp_path / "other")
    r = cli.invoke(main, ["revoke", str(cert), "--revocations", str(listing), "--key",
                          str(other.private), "--reason", "x"])
    assert r.exit_code == 2 and "not a certificate this key signed" in r.output
    unlisted = certify(_run(tmp_path / "b", time.time() - 60), key)
    r = cli.invoke(main, ["revoke", str(unlisted.nodes[0].envelope), "--revocations",
                          str(listing), "--key", str(keys[0]), "--reason", "x"])
    assert r.exit_code == 2 and "is not on the list" in r.output
    r = cli.invoke(main, ["revoke", str(cert), "--revocations", str(listing), "--key",
                          str(keys[0]), "--reason", "  "])
    assert r.exit_code == 2 and "needs a reason" in r.output


def test_a_list_that_does_not_verify_is_refused_and_never_overwritten(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = load_private_key(keys[0]), [keys[1]]
    listing = tmp_path / revlist.DEFAULT_NAME
    first = certify(_run(tmp_path / "a", time.time() - 7200), key, revocations=listing)
    env = json.loads(listing.read_text())
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["certificates"] = []  # an edited list: forgets what it revoked
    env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    listing.write_text(json.dumps(env))
    with pytest.raises(ReportError, match="revocation list's signature does not verify"):
        verify_report(first.nodes[0].envelope, pub, revocations=listing)
    r = CliRunner().invoke(main, ["verify", str(first.nodes[0].envelope), "--pubkey",
                                  str(keys[1]), "--revocations", str(listing)])
    assert r.exit_code == 2 and str(listing) in r.output
    edited = listing.read_bytes()
    # certify refuses to build on it: no certificate written, the list left as it was
    run = _run(tmp_path / "b", time.time() - 3600)
    with pytest.raises(revlist.RevocationError, match="does not verify"):
        certify(run, key, revocations=listing)
    assert listing.read_bytes() == edited and not (run / "reports").exists()
    # a certificate passed as the list is no list
    with pytest.raises(ReportError, match="not a nodecert revocation list"):
        verify_report(first.nodes[0].envelope, pub, revocations=first.nodes[0].envelope)


def test_two_signers_at_once_lose_no_entry(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key = load_private_key(keys[0])
    listing = tmp_path / revlist.DEFAULT_NAME
    now = dt.datetime.now(dt.UTC)
    entries = [revlist.Entry(f"{i:064x}", f"node:h{i}", "READY", now.isoformat(),
                             now.isoformat()) for i in range(12)]

    start = threading.Barrier(len(entries))

    def add(e: revlist.Entry) -> None:
        start.wait()  # all twelve reach the list at once
        with revlist.updating(listing, key, now) as new:
            new.append(e)

    threads = [threading.Thread(target=add, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reg = revlist.load(listing, [key.public_key()])
    assert reg.sequence == 12 and len(reg.entries) == 12


def test_supersession_is_by_subject_and_evidence_time() -> None:
    def e(i: int, subject: str, validated: str, status: str = "current") -> revlist.Entry:
        return revlist.Entry(f"{i:064x}", subject, "READY", validated,
                             "2026-12-01T00:00:00+00:00", status)

    now = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    reg = revlist.register(revlist.Register(), [
        e(1, "node:h1", "2026-11-01T00:00:00+00:00"),
        e(2, "node:h1", "2026-11-20T00:00:00+00:00"),
        e(3, "node:h2", "2026-11-10T00:00:00+00:00"),
        e(4, "cluster:h1,h2", "2026-11-05T00:00:00+00:00"),
        e(5, "cluster:h1,h2,h3", "2026-11-25T00:00:00+00:00")], now)
    status = {int(k, 16): v.status for k, v in reg.entries.items()}
    # h1's older certificate only: another node, or another set of nodes, supersedes nothing
    assert status == {1: "superseded", 2: "current", 3: "current", 4: "current", 5: "current"}
    assert reg.entries[f"{1:064x}"].superseded_by == f"{2:064x}"
    # a revoked newest still supersedes; a revoked one stays revoked
    reg = revlist.revoke(reg, f"{2:064x}", "sent back", now)
    reg = revlist.register(reg, [e(6, "node:h1", "2026-11-30T00:00:00+00:00")], now)
    status = {int(k, 16): v.status for k, v in reg.entries.items()}
    assert (status[1], status[2], status[6]) == ("superseded", "revoked", "current")
    assert reg.entries[f"{1:064x}"].superseded_by == f"{6:064x}"


def test_a_cluster_certificate_is_entered_and_superseded_by_its_nodes_set(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = load_private_key(keys[0]), [keys[1]]
    listing = tmp_path / revlist.DEFAULT_NAME
    paths = []
    for earlier, name in ((60.0, "cluster-a"), (0.0, "cluster-b")):
        (tmp_path / name).mkdir()
        data = run_model(tmp_path / name, 3, ModelLauncher())
        data["started"] -= earlier  # cluster-a's measurement ended a minute before b's
        data["finished"] -= earlier
        run_dir = tmp_path / name / "cluster-run-abcdef"
        (run_dir / "results.json").write_text(json.dumps(data))
        paths.append(certify_cluster(run_dir, key, revocations=listing)[0])
    older = _steps(verify_report(paths[0], pub, allow_simulated=True, revocations=listing))
    newer = _steps(verify_report(paths[1], pub, allow_simulated=True, revocations=listing))
    assert not older["revocation"][0] and "SUPERSEDED" in older["revocation"][1]
    assert newer["revocation"][0]
    reg = revlist.load(listing, [load_public_key(pub[0])])
    assert {e.subject for e in reg.entries.values()} == {"cluster:h1,h2,h3"}


def test_an_older_or_stale_list_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """Once a verifier has seen list #2 (which revokes), list #1 (which still says
    "current") is refused as a replay; a list older than the verifier's maximum age is
    refused too. Before the check, the replayed list #1 gave VALID."""
    key = load_private_key(keys[0])
    runs = tmp_path / "runs"
    run = _run(runs / "a", time.time() - 3600)
    listing = runs / revlist.DEFAULT_NAME
    certify(run, key, revocations=listing)
    first = tmp_path / "list-1.json"
    shutil.copy(listing, first)
    cert = run / "reports" / "n1.intoto.dsse.json"
    cli = CliRunner()

    def verify(lst: Path, *more: str) -> tuple[int, str]:
        r = cli.invoke(main, ["verify", str(cert), "--pubkey", str(keys[1]),
                              "--revocations", str(lst), *more])
        return r.exit_code, r.output
    assert verify(first)[0] == 0  # list #1 is the newest this verifier has seen: it holds
    cli.invoke(main, ["revoke", str(cert), "--revocations", str(listing), "--key",
                      str(keys[0]), "--reason", "GPU 3 replaced"])
    code, out = verify(listing)
    assert code == 1 and "REVOKED" in out
    code, out = verify(first)
    assert code == 1 and "list #1 issued" in out and "is older than list #2" in out \
        and "a replayed list is never applied" in out, out
    # Another verifier's memory (a file of its own) has not seen #2: #1 holds there.
    assert verify(first, "--seen-lists", str(tmp_path / "other.json"))[0] == 0
    # A maximum age: the list of an hour ago holds at 1 day, not at 0.01 days (14 min).
    pub = [keys[1]]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    old = revlist.Freshness(max_age=dt.timedelta(days=0.01))
    v = verify_report(cert, pub, revocations=listing, now=later, freshness=old)
    ok, detail = _steps(v)["revocation"]
    assert not ok and "is older than the 0.01 days allowed" in detail
    v = verify_report(cert, pub, revocations=first, now=later,
                      freshness=revlist.Freshness(max_age=dt.timedelta(days=1)))
    assert _steps(v)["revocation"][0]
    seen = json.loads((tmp_path / "other.json").read_text())
    assert seen["schema"] == "nodecert.seen-lists/v1" and (tmp_path / "other.json").stat(
        ).st_mode & 0o077 == 0
