"""A validation run split into slices (one controller process each, as the tasks of a
Slurm job array) and merged into one run: the slices share the hosts out without overlap,
the merged run holds the verdicts a single controller gives the same fleet, a slice that
never ran or was killed leaves its hosts ERROR "not run", and running it again completes
the run, changing only its hosts' records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.cli import main
from nodecert.core.errors import InventoryError
from nodecert.runs.layout import RunDirError
from nodecert.runs.records import read_host_record
from nodecert.validation.run import ValidateRequest, validate
from nodecert.validation.slices import NOT_RUN_CODE, Slice, merge
from support.emulated import emulated_fleet

RUN_ID = "20261207-101500-3fa9c1"


# --- which hosts a slice takes -------------------------------------------------------------

@pytest.mark.unit
@settings(max_examples=60, deadline=None)  # a busy machine must not fail it on time
@given(st.sets(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=1,
               max_size=60), st.integers(min_value=1, max_value=12))
def test_the_slices_share_the_hosts_out_once_each(names: set[str], n: int) -> None:
    shares = [Slice(k, n, RUN_ID).hosts(list(names)) for k in range(1, n + 1)]
    taken = [h for share in shares for h in share]
    assert sorted(taken) == sorted(names)  # every host once, none twice
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # even shares
    # the same inventory in another order slices the same way
    assert shares == [Slice(k, n, RUN_ID).hosts(sorted(names, reverse=True))
                      for k in range(1, n + 1)]


@pytest.mark.unit
def test_a_slice_is_read_from_k_of_n_or_from_a_slurm_array_task() -> None:
    assert Slice.parse("3/8", RUN_ID) == Slice(3, 8, RUN_ID)
    # an array indexed from 0 (--array=0-7): its fourth task is slice 4
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0",
           "SLURM_ARRAY_TASK_COUNT": "8"}
    assert Slice.parse("auto", RUN_ID, env) == Slice(4, 8, RUN_ID)
    for bad, words in (("0/8", "does not exist"), ("9/8", "does not exist"),
                       ("3", "is not K/N"), ("3/8/2", "is not K/N")):
        with pytest.raises(InventoryError, match=words):
            Slice.parse(bad, RUN_ID)
    with pytest.raises(InventoryError, match="SLURM_ARRAY_TASK_ID"):
        Slice.parse("auto", RUN_ID, {})
    with pytest.raises(InventoryError, match="needs the run's id"):
        Slice.parse("1/2", None)
    with pytest.raises(InventoryError, match="not a validation run's id"):
        Slice.parse("1/2", "../elsewhere")


# --- slices of a run against an emulated fleet ---------------------------------------------

@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with emulated_fleet(tmp_path_factory.mktemp("slicefleet"), 45, 9, "--failing", "2",
                        "--time-scale", "0.02", "--seed", "11") as work:
        yield work


def _slice(fleet: Path, runs: Path, k: int, n: int = 3) -> None:
    validate(ValidateRequest(fleet / "inventory.ini", runs_dir=runs,
                             slice=Slice(k, n, RUN_ID)), progress=lambda line: None)


def _verdicts(summary: dict[str, object]) -> dict[str, str]:
    hosts = summary["hosts"]
    assert isinstance(hosts, dict)
    return {h: v["verdict"] for h, v in hosts.items()}


@pytest.mark.integration
def test_a_sliced_run_merges_into_the_run_one_controller_gives(fleet: Path,
                                                              tmp_path: Path) -> None:
    whole = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=tmp_path / "one"),
                     progress=lambda line: None)
    runs = tmp_path / "sliced"
    for k in (1, 2, 3):
        _slice(fleet, runs, k)
    run = runs / RUN_ID
    summary = json.loads((run / "validate.json").read_text())  # the last slice merged
    assert _verdicts(summary) == {h: hr.verdict.name for h, hr in whole.hosts.items()}
    assert "FAIL" in _verdicts(summary).values()  # the fleet's failing nodes, as measured
    assert summary["slices"] == 3 and summary["slices_missing"] == []
    assert sorted(p.name for p in (run / "slices").iterdir()) == [
        "1-of-3.json", "2-of-3.json", "3-of-3.json"]
    for k in (1, 2, 3):  # each slice's controller says what it held and spent
        ctl = json.loads((run / "slices" / f"{k}-of-3.json").read_text())["controller"]
        assert 10 < ctl["peak_rss_mb"] < 4096 and ctl["cpu_s"] > 0 and ctl["host"]
    # each host's record is one a single-controller run writes, read the same way
    for host in whole.hosts:
        rec = read_host_record(run / host / "results.json")
        assert rec.run_id == RUN_ID and rec.verdict is not None
    # the merged run is certified as one run: a signed record per node, one fleet page
    # and one JUnit file over every node
    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key
    key = load_private_key(init_key(tmp_path / "keys").private)
    cr = certify(run, key)
    assert sorted(n.host for n in cr.nodes) == sorted(whole.hosts) and not cr.failed
    assert len(list((run / "reports").glob("*.intoto.dsse.json"))) == len(whole.hosts)
    junit = (run / "reports" / "junit.xml").read_text()
    assert all(f'testsuite name="nodecert.{h} ' in junit for h in whole.hosts)
    assert (run / "reports" / "index.html").is_file()


@pytest.mark.integration
def test_a_lost_slice_is_its_hosts_not_run_until_it_runs_again(fleet: Path,
                                                              tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _slice(fleet, runs, 1)
    _slice(fleet, runs, 3)
    run = runs / RUN_ID
    assert not (run / "validate.json").exists()  # slice 2 has not ended: no merge yet
    # slice 3 killed while one of its hosts ran: a record left unfinished
    third = Slice(3, 3, RUN_ID).hosts([f"n{i:05d}" for i in range(9)])
    cut = run / third[0] / "results.json"
    rec = json.loads(cut.read_text())
    rec.update(status="running", verdict="ERROR", results=rec["results"][:2])
    cut.write_text(json.dumps(rec))
    merged = merge(run)
    second = Slice(2, 3, RUN_ID).hosts([f"n{i:05d}" for i in range(9)])
    assert set(merged.lost) == {*second, third[0]}
    assert merged.slices_missing == (2,) and merged.verdict.name == "ERROR"
    for host in second:
        r = read_host_record(run / host / "results.json")
        assert r.outcome.name == "ERROR" and r.data["status"] == "lost"
        assert all(x.verdict.name == "ERROR" and x.fault_code == NOT_RUN_CODE
                   and "slice 2 of 3 never ran this host" in x.summary for x in r.results)
        assert len(r.results) > 5  # every planned check is there, none absent
    kept = read_host_record(cut)
    assert kept.outcome.name == "ERROR"
    assert [x.verdict.name for x in kept.results[:2]] == \
        [x["verdict"] for x in rec["results"]]  # what it measured is kept
    assert "slice 3 of 3 ended before this host finished" in kept.results[-1].summary
    # the CLI says the same and fails
    r = CliRunner().invoke(main, ["runs", "merge", str(run)])
    assert r.exit_code == 1 and "slices that did not end: 2" in r.output, r.output
    # slice 2 again: the run completes; no other slice's record changes
    others = {h: (run / h / "results.json").read_bytes()
              for h in [f"n{i:05d}" for i in range(9)] if h not in second}
    _slice(fleet, runs, 2)
    summary = json.loads((run / "validate.json").read_text())
    assert summary["slices_missing"] == []
    assert {h for h, v in summary["hosts"].items() if v["status"] == "lost"} == {third[0]}
    assert all(summary["hosts"][h]["status"] == "done" for h in second)
    assert others == {h: (run / h / "results.json").read_bytes() for h in others}


@pytest.mark.integration
def test_a_run_sliced_otherwise_is_refused_before_anything_is_written(
        fleet: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _slice(fleet, runs, 1, n=3)
    before = sorted(p.relative_to(runs) for p in runs.rglob("*"))
    with pytest.raises(RunDirError, match="sliced otherwise"):
        _slice(fleet, runs, 2, n=4)
    assert sorted(p.relative_to(runs) for p in runs.rglob("*")) == before


@pytest.mark.unit
def test_the_cli_wants_a_slice_with_a_run_id_and_a_sliced_run_to_merge(
        tmp_path: Path) -> None:
    inv = tmp_path / "x.ini"
    inv.write_text("[gpu]\n")
    r = CliRunner().invoke(main, ["validate", "-i", str(inv), "--run-id", RUN_ID])
    assert r.exit_code == 2 and "give --slice" in r.output
    r = CliRunner().invoke(main, ["runs", "merge", str(tmp_path)])
    assert r.exit_code == 2 and "is not a sliced run" in r.output, r.output


# --- certifying and re-validating in slices ------------------------------------------------

def _key(tmp_path: Path) -> Path:
    from nodecert.certs.signing import init_key
    return init_key(tmp_path / "keys").private


@pytest.mark.integration
def test_a_run_is_certified_in_slices_and_the_last_writes_the_fleet_page(
        fleet: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for k in (1, 2):
        _slice(fleet, runs, k)
    run = runs / RUN_ID
    key = _key(tmp_path)
    hosts = [f"n{i:05d}" for i in range(9)]

    def certify_slice(k: int) -> tuple[int, dict[str, Any]]:
        r = CliRunner().invoke(main, ["certify", str(run), "--key", str(key), "--slice",
                                      f"{k}/3", "--json"])
        return r.exit_code, json.loads(r.stdout) if r.exit_code != 2 else {"out": r.output}

    # the validation has not ended (its slice 3 has not run): nothing is certified
    code, out = certify_slice(1)
    assert code == 2 and "no validate.json" in out["out"]
    assert not (run / "reports").exists()
    _slice(fleet, runs, 3)  # the validation's last slice ends and merges
    for k in (1, 2):
        code, out = certify_slice(k)
        assert out["index"] is None and not (run / "reports" / "index.html").exists()
        assert sorted(n["host"] for n in out["nodes"]) == Slice(k, 3, RUN_ID).hosts(hosts)
    code, out = certify_slice(3)  # the last: the fleet page and JUnit over every slice
    assert out["index"] == str(run / "reports" / "index.html") and not out["not_certified"]
    page = (run / "reports" / "index.html").read_text()
    junit = (run / "reports" / "junit.xml").read_text()
    assert all(f">{h}<" in page for h in hosts)
    assert all(f'testsuite name="nodecert.{h} ' in junit for h in hosts)
    # the verdicts one certify of the whole run gives
    whole = CliRunner().invoke(main, ["certify", str(run), "--key", str(key), "--out",
                                      str(tmp_path / "whole"), "--json"])
    assert {n["host"]: n["verdict"] for n in json.loads(whole.stdout)["nodes"]} == {
        h: _predicate(run / "reports" / f"{h}.intoto.dsse.json")["verdict"] for h in hosts}
    assert "NOT READY" in page  # the fleet's failing nodes are on it as such
    # a certificate changed after its slice listed it is never put on the page
    victim = run / "reports" / f"{Slice(1, 3, RUN_ID).hosts(hosts)[0]}.intoto.dsse.json"
    victim.write_text(victim.read_text() + " ")
    code, out = certify_slice(2)
    assert code == 2 and "changed after slice 1/3 listed it" in out["out"], out


def _predicate(envelope: Path) -> dict[str, Any]:
    import base64
    env = json.loads(envelope.read_text())
    p = json.loads(base64.b64decode(env["payload"]))["predicate"]
    assert isinstance(p, dict)
    return p


@pytest.mark.integration
def test_a_revalidation_in_slices_compares_with_the_last_run_never_with_itself(
        fleet: Path, tmp_path: Path) -> None:
    from nodecert.certs.certify import certify
    from nodecert.certs.signing import load_private_key
    from nodecert.revalidate.run import RevalidateRequest, revalidate
    runs = tmp_path / "runs"
    key = load_private_key(_key(tmp_path))
    first = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=runs),
                     progress=lambda line: None)
    certify(first.run_dir, key)
    again = "20261207-111500-0c4a2e"
    seen = []
    for k in (1, 2, 3):
        rv = revalidate(RevalidateRequest(
            ValidateRequest(fleet / "inventory.ini", runs_dir=runs,
                            slice=Slice(k, 3, again)), key=key, trusted=[key.public_key()]),
            progress=lambda line: None)
        # the earlier run's certificates, though this run's first slices certified theirs
        seen.append(rv.baseline)
        assert sorted(rv.drift) == Slice(k, 3, again).hosts(sorted(first.hosts))
        assert rv.cert is not None and sorted(n.host for n in rv.cert.nodes) == sorted(rv.drift)
    assert seen == [first.run_dir / "reports"] * 3
    run = runs / again
    summary = json.loads((run / "validate.json").read_text())  # merged by the last slice
    assert sorted(summary["hosts"]) == sorted(first.hosts) and not summary["slices_missing"]
    for h in first.hosts:  # each host's comparison is in the merged run's record
        rec = read_host_record(run / h / "results.json")
        assert any(r.check.startswith("drift.") for r in rec.results)
    assert (run / "reports" / "index.html").is_file()
    with pytest.raises(Exception, match="does not collect"):
        revalidate(RevalidateRequest(
            ValidateRequest(fleet / "inventory.ini", runs_dir=runs, slice=Slice(1, 3, again)),
            key=key, trusted=[key.public_key()], collect_reason="any"))


@pytest.mark.integration
def test_an_emulated_fleet_on_one_address_serves_each_node_on_its_own_port(
        tmp_path: Path) -> None:
    """The emulator's mode for controllers in another network namespace (a lab's Slurm
    nodes): every node at one address, each on its own port with its own host key, the
    inventory naming its key and known_hosts where the controllers see them."""
    with emulated_fleet(tmp_path / "fleet", 46, 4, "--listen", "127.46.0.1", "--failing",
                        "1", "--time-scale", "0.02", "--seed", "5", "--seen-as",
                        str(tmp_path / "fleet")) as work:
        inv = (work / "inventory.ini").read_text()
        ports = [int(p) for p in re.findall(r"ansible_port=(\d+)", inv)]
        assert len(set(ports)) == 4  # the group's port, and one per other node
        known = (work / "known_hosts").read_text().splitlines()
        assert len({line.split()[0] for line in known}) == 4
        assert all(line.startswith("[127.46.0.1]:") for line in known)
        run = validate(ValidateRequest(work / "inventory.ini", runs_dir=tmp_path / "runs"),
                       progress=lambda line: None)
    kinds = json.loads((work / "kinds.json").read_text())
    assert sorted(run.hosts) == sorted(kinds) and all(
        hr.status == "done" for hr in run.hosts.values())
    assert {h for h, hr in run.hosts.items() if hr.verdict.name == "FAIL"} == {
        h for h, k in kinds.items() if k == "failing"}  # each node answered as itself


@pytest.mark.unit
def test_the_lab_binds_this_machines_nodecert_only_into_a_cluster() -> None:
    """What a lab host needs to run this machine's nodecert as a Slurm job: directories
    holding the running Python, the package and its data, none inside another."""
    import sys

    import nodecert
    from nodecert.lab.fleetlab import controller_binds
    binds = [Path(b) for b in controller_binds()]
    base = Path(sys.base_prefix).resolve()  # a host has its own /usr
    for need in (Path(sys.executable).parent, Path(nodecert.__file__).resolve(),
                 *([] if str(base).startswith("/usr") else [base / "lib"])):
        assert any(need.resolve().is_relative_to(b) for b in binds), need
    assert not any(a != b and a.is_relative_to(b) for a in binds for b in binds)
    r = CliRunner().invoke(main, ["lab", "up", "--controllers"])
    assert r.exit_code == 2 and "--controllers is for --cluster" in r.output
