"""The data path: the order's shared file system spec, the node's mount and figures
(storage.shared, with real fio on a local directory), and the cluster's aggregate read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodecert.cluster.storage import PREP, READ, judge, read_rates, script
from nodecert.inventory.sharedfs import parse_shared_fs
from nodecert.transport.joboutput import demux
from nodecert_node import sharedfs
from nodecert_node.contract import Evidence, Threshold, Verdict
from support.env import REPO, require

FIO_JSON = REPO / "tests" / "fixtures" / "real" / "fio" / "nvme0n1-randrw-4k-qd64-j4-fio3.16.json"
MOUNTS = """sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
/dev/nvme0n1p2 / ext4 rw,relatime 0 0
10.0.0.5:/export/data /mnt/data nfs4 rw,relatime,vers=4.2,rsize=1048576 0 0
/dev/nvme1n1 /mnt/data/local ext4 rw,relatime 0 0
fs01@tcp:/lustre /lustre lustre rw,flock 0 0
"""


def test_the_spec_is_checked_before_anything_runs() -> None:
    spec, why = parse_shared_fs({"mounts": [{"path": "/mnt/data/", "type": "nfs4"}, "/lustre"],
                                 "aggregate_read_mbps_min": 16000, "read_mbps_min": 2000})
    assert why is None and spec is not None
    assert spec["mounts"] == [{"path": "/mnt/data", "type": "nfs4"}, {"path": "/lustre"}]
    for raw, msg in (
            ({"mounts": []}, "mounts must be a non-empty list"),
            ({"mounts": ["/mnt/a b"]}, "is not a plain absolute path"),
            ({"mounts": ["/mnt/../etc"]}, "is not a plain absolute path"),
            ({"mounts": ["/"]}, "is not a plain absolute path"),
            ({"mounts": [{"path": "/d", "type": "ext4"}]}, "mount type 'ext4' is not one of"),
            ({"mounts": ["/d"], "read_mbps_min": -1}, "read_mbps_min must be a positive"),
            ({"mounts": ["/d"], "read_mbps_min": True}, "read_mbps_min must be a positive"),
            ({"mounts": ["/d"], "speed": 1}, "unknown key(s) speed"),
            ("/mnt/data", "must be a mapping")):
        spec, why = parse_shared_fs(raw)
        assert spec is None and why is not None and msg in why, (raw, why)


def test_the_mount_is_found_and_its_type_judged() -> None:
    assert sharedfs.mount_of("/mnt/data", MOUNTS) == ("/mnt/data", "nfs4")
    assert sharedfs.mount_of("/mnt/data/local/x", MOUNTS) == ("/mnt/data/local", "ext4")
    assert sharedfs.mount_of("/lustre", MOUNTS) == ("/lustre", "lustre")
    ok = sharedfs.mount_problem({"path": "/mnt/data", "type": "nfs"},
                                sharedfs.mount_of("/mnt/data", MOUNTS))
    assert ok is None  # nfs as ordered: the kernel says nfs4 for NFSv4
    bad = sharedfs.mount_problem({"path": "/mnt/data/local", "type": "nfs4"},
                                 sharedfs.mount_of("/mnt/data/local", MOUNTS))
    assert bad == "/mnt/data/local is mounted as ext4, the order says nfs4"
    gone = sharedfs.mount_problem({"path": "/mnt/weka"}, sharedfs.mount_of("/mnt/weka",
                                                                           MOUNTS))
    assert gone == ("/mnt/weka is not a mount point (it lies on /): the shared file system "
                    "is not mounted")


@pytest.mark.integration
def test_real_fio_measures_a_directory_and_leaves_nothing(tmp_path: Path) -> None:
    ev: list[Evidence] = []
    m = sharedfs.measure(str(tmp_path), "nodecert-test-h1", sizes=(8, 8), timeout=120, ev=ev)
    assert set(m) == {"seq_read_mbps", "checkpoint_mbps", "small_files_per_s"}
    assert all(v > 0 for v in m.values())
    assert [e.name for e in ev] == [f"fio {k} on {tmp_path}" for k in
                                    ("seqread", "checkpoint", "smallfiles")]
    assert list(tmp_path.iterdir()) == []
    # a directory of that name already there is never written into
    (tmp_path / "nodecert-test-h1").mkdir()
    (tmp_path / "nodecert-test-h1" / "theirs").write_text("keep")
    with pytest.raises(Exception, match="already exists: refusing to write into it"):
        sharedfs.measure(str(tmp_path), "nodecert-test-h1", sizes=(8, 8), timeout=60, ev=[])
    assert (tmp_path / "nodecert-test-h1" / "theirs").read_text() == "keep"


def test_node_figures_are_judged_against_the_order() -> None:
    spec = {"mounts": [{"path": "/mnt/data"}], "read_mbps_min": 2000,
            "small_files_per_s_min": 5000}
    r = sharedfs.judge({"/mnt/data": {"seq_read_mbps": 2500.0, "checkpoint_mbps": 50.0,
                                      "small_files_per_s": 6000.0}}, [], spec)
    assert r.verdict is Verdict.PASS and "checkpoint_mbps" not in r.thresholds
    r = sharedfs.judge({"/mnt/data": {"seq_read_mbps": 900.0, "checkpoint_mbps": 50.0,
                                      "small_files_per_s": 6000.0}},
                       ["/lustre is not a mount point"], spec)
    assert r.verdict is Verdict.FAIL and r.fault_code == "NC-SHARED-FS"
    assert r.findings == ("/lustre is not a mount point",
                          "/mnt/data sequential read: needs >= 2000 MB/s, measured 900 MB/s")


def ranked(outputs: list[str]) -> str:
    """What srun --label prints for these tasks' outputs."""
    return "".join(f"{k}: {ln}\n" for k, out in enumerate(outputs) for ln in out.splitlines())


def test_the_aggregate_read_is_read_per_node_from_real_fio_output() -> None:
    one = FIO_JSON.read_text()
    rates = read_rates(demux(ranked([one, one, "fio: command not found"])),
                       ["h1", "h2", "h3"])
    bw = json.loads(one)["jobs"][0]["read"]["bw_bytes"] / 1e6
    assert rates == {"h1": pytest.approx(bw), "h2": pytest.approx(bw), "h3": None}


def node(verdict: str = "PASS") -> dict[str, Any]:
    return {"verdict": verdict, "summary": f"{verdict} here", "value": {}}


PEER = Threshold(0.8, ">=", "ratio")


def test_cluster_judge_sums_names_the_slow_reader_and_errors_on_gaps() -> None:
    spec = {"mounts": [{"path": "/mnt/data"}], "aggregate_read_mbps_min": 2500}
    r, named = judge({"h1": node(), "h2": node(), "h3": node()},
                     {"h1": 1000.0, "h2": 990.0, "h3": 1010.0}, "", spec=spec, peer=PEER,
                     simulated=False)
    assert r.verdict is Verdict.PASS and named == [] and r.value["aggregate_read_mbps"] == 3000
    r, named = judge({"h1": node(), "h2": node(), "h3": node()},
                     {"h1": 1000.0, "h2": 300.0, "h3": 1010.0}, "", spec=spec, peer=PEER,
                     simulated=False)
    assert r.verdict is Verdict.FAIL and named == ["h2"]
    assert r.findings[0].startswith("h2: read 300 MB/s while every node read at once")
    assert "aggregate read of 3 nodes at once: needs >= 2500 MB/s, measured 2310 MB/s" in \
        r.findings[1]
    r, named = judge({"h1": node(), "h2": node("FAIL")}, {"h1": 1000.0, "h2": None}, "",
                     spec=spec, peer=PEER, simulated=False)
    assert r.verdict is Verdict.ERROR and named == ["h2"]
    assert any("no fio result from h2" in f for f in r.findings)


def test_a_slow_reader_is_named_only_when_the_repeat_confirms_it() -> None:
    spec = {"mounts": [{"path": "/mnt/data"}], "aggregate_read_mbps_min": 400}
    nodes = {"h1": node(), "h2": node(), "h3": node(), "h4": node()}
    first = {"h1": 151.0, "h2": 59.0, "h3": 154.0, "h4": 155.0}  # 0.39 of the median
    lab = Threshold(0.4, ">=", "ratio")
    # the repeat reads h2 as fast as the others: one slow read, not the node's path
    r, named = judge(nodes, first, "", spec=spec, peer=lab, simulated=True,
                     repeat={"h1": 150.0, "h2": 149.0, "h3": 150.0, "h4": 152.0})
    assert r.verdict is Verdict.PASS and named == []
    assert r.findings == ("h2: read 59 MB/s while every node read at once, as a fraction of "
                          "the median (152): needs >= 0.4 ratio, measured 0.387 ratio; not "
                          "confirmed: 149 MB/s when all read again (one slow read of a shared "
                          "server is not held against a node)",)
    assert r.value["repeat_read_mbps_at_once"]["h2"] == 149.0
    assert r.value["aggregate_read_mbps_each"] == [519.0, 601.0]
    assert r.value["aggregate_read_mbps"] == 601.0  # the file system's best at once
    # slow in both reads: named, both figures given
    r, named = judge(nodes, first, "", spec=spec, peer=lab, simulated=True,
                     repeat={"h1": 150.0, "h2": 20.0, "h3": 150.0, "h4": 152.0})
    assert r.verdict is Verdict.FAIL and named == ["h2"]
    assert r.findings[0].startswith("h2: read 59 MB/s") and "; again: read 20 MB/s" in \
        r.findings[0]
    # without a repeat the first read decides, as before
    r, named = judge(nodes, first, "", spec=spec, peer=lab, simulated=True)
    assert r.verdict is Verdict.FAIL and named == ["h2"]
    # a repeat that gave no figures is an ERROR, and the unconfirmed node is not named
    r, named = judge(nodes, first, "", spec=spec, peer=lab, simulated=True,
                     repeat=dict.fromkeys(first), repeat_error="hung past its limit")
    assert r.verdict is Verdict.ERROR and named == []
    assert ("the repeated aggregate read did not give every node's figure: hung past its "
            "limit") in r.findings


def test_a_node_below_its_floor_at_once_is_measured_alone_and_judged_by_that(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a cluster run every node's storage.shared reads one server at the same
    moment: four healthy nodes each got a quarter of it and fell below the one-node
    floor. Each is measured again alone, one after another, and judged by that; a node
    slow alone stays FAIL; the cluster result says which figures were taken alone."""
    from types import SimpleNamespace

    from nodecert.cluster import validate as cv
    from nodecert_node.contract import Result

    def shared(verdict: Verdict, mbps: int) -> Result:
        return Result("storage.shared", verdict, f"/mnt/nodecert-shared: read {mbps} MB/s",
                      value={"/mnt/nodecert-shared": {"read_mbps": mbps}})

    calls: list[Any] = []
    solo = {"h1": 160, "h2": 8, "h3": 155}  # h2 is slow on its own path

    def fake_validate(request: Any, progress: Any) -> Any:
        calls.append(request)
        if len(calls) == 1:  # all at once: everyone below the 25 MB/s floor but h4
            rates = {"h1": 20, "h2": 4, "h3": 21, "h4": 30}
            return SimpleNamespace(hosts={n: SimpleNamespace(results=[shared(
                Verdict.PASS if v >= 25 else Verdict.FAIL, v)], error="")
                for n, v in rates.items()})
        return SimpleNamespace(hosts={n: SimpleNamespace(results=[shared(
            Verdict.PASS if solo[n] >= 25 else Verdict.FAIL, solo[n])], error="")
            for n in request.limit})

    monkeypatch.setattr(cv, "validate", fake_validate)
    request = cv.ValidateRequest(Path("inv"), suite="standard", limit=("h1", "h2", "h3", "h4"),
                                 checks=("net.ib", "storage.shared"))
    first = fake_validate(request, None)
    alone = cv._storage_alone(request, first, lambda line: None)
    again = calls[-1]
    assert again.limit == ("h1", "h2", "h3") and again.forks == 1
    assert again.checks == ("storage.shared",) and again.suite == "standard"
    assert {n: r["verdict"] for n, r in alone.items()} == {"h1": "PASS", "h2": "FAIL",
                                                           "h3": "PASS"}
    assert alone["h1"]["measured"] == ("alone (with all 4 nodes at once: "
                                       "/mnt/nodecert-shared: read 20 MB/s)")
    per_node = {n: alone.get(n) or first.hosts[n].results[0].as_dict()
                for n in ("h1", "h2", "h3", "h4")}
    spec = {"mounts": [{"path": "/mnt/nodecert-shared"}]}
    r, named = judge(per_node, {"h1": 150.0, "h2": 140.0, "h3": 150.0, "h4": 155.0}, "",
                     spec=spec, peer=PEER, simulated=True)
    assert r.verdict is Verdict.FAIL and named == ["h2"]
    assert "h1: storage.shared measured alone (with all 4 nodes at once" in r.findings[-3]
    # nothing below a floor: nothing is measured again
    calls.clear()
    ok = SimpleNamespace(hosts={"h1": SimpleNamespace(results=[shared(Verdict.PASS, 90)],
                                                      error="")})
    assert cv._storage_alone(request, ok, lambda line: None) == {} and calls == []


def test_the_jobs_write_only_their_own_directory_and_remove_it() -> None:
    prep = script(PREP, "/mnt/data", "abc123", 64)
    assert prep.startswith("set -e; mkdir -m 0700 /mnt/data/nodecert-agg-abc123-$(hostname -s);")
    read = script(READ, "/mnt/data", "abc123", 64)
    assert read.startswith("trap 'rm -rf /mnt/data/nodecert-agg-abc123-$(hostname -s)' EXIT;")
    assert "--direct=1" in read and "--time_based --runtime=10 " in read
    assert "--runtime=3 " in script(READ, "/mnt/data", "abc123", 64, 3)


# --- GPUDirect Storage (gdsio) ----------------------------------------------------------------

GDSIO = REPO / "tests" / "fixtures" / "real" / "gdsio"


def test_gdsio_result_lines_parse_from_real_output() -> None:
    from nodecert_node.parse.gdsio import parse_gdsio
    (r,) = parse_gdsio((GDSIO / "a100-nvme-read-gpud-4threads-1m.txt").read_text())
    assert (r["io_type"], r["xfer_type"], r["threads"], r["io_size_kib"]) == ("READ", "GPUD",
                                                                                4, 1024)
    assert r["gib_s"] == 6.622534 and r["mb_s"] == 7110.9 and r["io_depth"] is None
    assert (r["dataset_kib"], r["requested_kib"]) == (104837120, 104857600)
    rows = parse_gdsio((GDSIO / "rtx-a5000-randread-gpu_batch-iodepth128-4k.txt").read_text())
    assert [x["io_depth"] for x in rows] == [128, 128] and rows[1]["gib_s"] == 1.142847


@pytest.mark.parametrize("text", [
    "",
    "cuFile config: /etc/cufile.json\n",
    # truncated mid-line: refused, never half-read
    "IoType: READ XferType: GPUD Threads: 4 DataSetSize: 104837120/104857600(KiB) "
    "IOSize: 1024(KiB) Throughput: 6.622534 GiB/sec,",
])
def test_gdsio_without_a_complete_result_is_refused(text: str) -> None:
    from nodecert_node.parse import ParseError
    from nodecert_node.parse.gdsio import parse_gdsio
    with pytest.raises(ParseError):
        parse_gdsio(text)


def test_gdsio_runs_through_the_mount_where_installed(tmp_path: Path) -> None:
    line = (GDSIO / "a100-nvme-read-gpud-4threads-1m.txt").read_text()
    fake = tmp_path / "gdsio"
    # a stand-in at the GPU boundary: prints the real tool's line, records its arguments
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/args\ncat <<'X'\n{line}X\n")
    fake.chmod(0o755)
    ev: list[Evidence] = []
    figures, why = sharedfs.measure_gds(str(fake), "/mnt/data/w", 64, 30, ev)
    assert why == "" and figures == {"gds_write_mbps": 7110.9, "gds_read_mbps": 7110.9}
    args = (tmp_path / "args").read_text().splitlines()
    assert args == ["-f /mnt/data/w/gds.dat -d 0 -w 4 -s 64M -i 1M -I 1 -x 0",
                    "-f /mnt/data/w/gds.dat -d 0 -w 4 -s 64M -i 1M -I 0 -x 0"]
    fake.write_text("#!/bin/sh\necho 'cuFileDriverOpen failed'\nexit 1\n")
    figures, why = sharedfs.measure_gds(str(fake), "/mnt/data/w", 64, 30, [])
    assert figures == {} and why.startswith("gdsio write:")


def test_a_failed_gdsio_warns_unless_the_order_gives_it_a_floor() -> None:
    m = {"/mnt/data": {"seq_read_mbps": 2500.0, "gds_error": "gdsio read: exit 1"}}
    r = sharedfs.judge(m, [], {"mounts": [{"path": "/mnt/data"}]})
    assert r.verdict is Verdict.WARN and r.findings == ("/mnt/data: gdsio read: exit 1",)
    r = sharedfs.judge(m, [], {"mounts": [{"path": "/mnt/data"}], "gds_read_mbps_min": 5000})
    assert r.verdict is Verdict.FAIL
    r = sharedfs.judge({"/mnt/data": {"gds_read_mbps": 4000.0}}, [],
                       {"mounts": [{"path": "/mnt/data"}], "gds_read_mbps_min": 5000})
    assert r.findings == ("/mnt/data GPUDirect Storage read (gdsio): needs >= 5000 MB/s, "
                          "measured 4000 MB/s",)


# --- the check itself, as a node runs it ---------------------------------------------------

@pytest.mark.integration
def test_the_check_passes_without_an_order_and_refuses_what_is_not_mounted(
        tmp_path: Path) -> None:
    from support.simnode import SimNode
    node = SimNode(tmp_path / "n")
    r = node.check("storage.shared", suite="standard")
    assert r.verdict is Verdict.PASS and "names no shared file system" in r.summary
    plain = tmp_path / "data"
    plain.mkdir()
    spec = {"mounts": [{"path": str(plain)}], "read_mbps_min": 1}
    r = node.check("storage.shared", suite="standard", validation={"shared_fs": spec})
    assert r.verdict is Verdict.FAIL and r.fault_code == "NC-SHARED-FS"
    assert r.findings[0].startswith(f"{plain} is not a mount point (it lies on ")
    assert list(plain.iterdir()) == []  # nothing written where nothing is mounted


@pytest.mark.integration
def test_the_check_measures_a_real_mount_and_sizes_its_checkpoint(tmp_path: Path) -> None:
    from support.simnode import SimNode
    mounts = Path("/proc/mounts").read_text()
    point = next((p for p in ("/tmp", "/var/tmp", "/dev/shm")
                  if sharedfs.mount_of(p, mounts) and sharedfs.mount_of(p, mounts)[0] == p),
                 None)
    require(point is not None, "a mount point (/tmp, /var/tmp or /dev/shm) to write a small "
                               "test file under")
    assert point is not None
    node = SimNode(tmp_path / "n")
    spec = {"mounts": [{"path": point}], "size_mb": 8, "checkpoint_mb": 8,
            "read_mbps_min": 1, "small_files_per_s_min": 1}
    r = node.check("storage.shared", suite="standard", validation={"shared_fs": spec})
    assert r.verdict is Verdict.PASS, r.findings
    assert set(r.value[point]) == {"seq_read_mbps", "checkpoint_mbps", "small_files_per_s"}
    assert r.facts["checkpoint_mb"] == 8
    # its own fresh directory (run id and host in the name) is gone afterwards
    work = {Path(a.split("=", 1)[1]).parent for e in r.evidence for a in e.command.split()
            if a.startswith("--filename=")}
    assert len(work) == 1 and next(iter(work)).name.startswith("nodecert-")
    assert not next(iter(work)).exists()
