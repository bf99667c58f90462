"""nccl-tests logs and fio text output on real-world variants: launcher prefixes, noise,
multi-node rank tables, the version from the nccl-tests header; fio 2.x and 3.x text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.parse import ParseError, bench, fio
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real"


def real(rel: str) -> str:
    return (REAL / rel).read_text()


@pytest.mark.parametrize(("name", "rows", "busbw", "ranks", "hosts", "version"), [
    ("b200-gke-a4-2node-16rank-all-gather-gib-rdma.log", 24, 260.03, 16, 2,
     "2.26.6+cuda12.8"),
    ("h100-dell-xe9680-2node-16gpu-all-reduce-mpi-xpmem-warning.log", 32, 469.21, 16, 2,
     "2.26.2+cuda12.8"),
    ("h100-p5-aws-batch-multinode-all-reduce-tag-output-table-EXCERPT.log", 32, 483.05, 0, 0,
     None),
    ("h200-gke-2node-1gpu-each-all-reduce-pairwise-mpi-operator.log", 24, 31.89, 2, 2, None),
    ("gh200-2node-8rank-device-busy-failure.log", 0, None, 8, 2, "2.26.6"),
])
def test_real_multinode_logs(name: str, rows: int, busbw: float | None, ranks: int,
                             hosts: int, version: str | None) -> None:
    r = bench.parse_nccl(real(f"nccl-tests/{name}"))
    assert len(r["rows"]) == rows and r["ranks"] == ranks and len(r["hosts"]) == hosts
    assert (r["rows"][-1]["busbw"] if rows else None) == busbw
    assert r["nccl_version"] == version


def test_tag_output_prefix_and_avg_with_trailing_space() -> None:
    r = bench.parse_nccl(real(
        "nccl-tests/h100-p5-aws-batch-multinode-all-reduce-tag-output-table-EXCERPT.log"))
    assert r["avg_busbw"] == 156.742 and r["oob"] == 0 and r["rows"][0]["size"] == 8


def test_version_from_the_nccl_tests_header() -> None:
    assert bench.nccl_code_version(22606) == "2.26.6"
    assert bench.nccl_code_version(21903) == "2.19.3"
    assert bench.nccl_code_version(2804) == "2.8.4"  # before 2.9: major*1000+minor*100
    r = bench.parse_nccl(real("nccl-tests/gh200-2node-8rank-device-busy-failure.log"))
    assert r["tests_version"] == "2.17.8" and r["failures"]


NOISE = ["WARNING: Could not generate an xpmem segment id for this process'",
         "[1764500000.123] [gpu-7:1234 :0]  ucp_context.c:1102 UCX  WARN  transport "
         "'rc_mlx5' is not available",
         "Warning: Permanently added '[node-1]:222' (ED25519) to the list of known hosts.",
         "--------------------------------------------------------------------------"]


@settings(max_examples=60, deadline=None)
@given(where=st.lists(st.integers(0, 80), max_size=8), noise=st.sampled_from(NOISE),
       prefix=st.sampled_from(["", "[1,0]<stdout>:", "0: "]))
def test_property_noise_and_prefixes_change_nothing(where: list[int], noise: str,
                                                    prefix: str) -> None:
    src = real("nccl-tests/h100-dell-xe9680-2node-16gpu-all-reduce-mpi-xpmem-warning.log")
    want = bench.parse_nccl(src)
    lines = src.splitlines()
    for w in sorted(where, reverse=True):
        lines.insert(min(w, len(lines)), noise)
    got = bench.parse_nccl("\n".join(prefix + ln for ln in lines))
    assert got["rows"] == want["rows"] and got["ranks"] == 16
    assert got["hosts"] == ["bm-h100-01", "bm-h100-02"] and got["avg_busbw"] == 139.56


# --- fio text ---------------------------------------------------------------------------

FIO2 = """seq: (g=0): rw=read, bs=128K-128K/128K-128K/128K-128K, ioengine=libaio, iodepth=32
fio-2.2.10
Starting 1 process
seq: (groupid=0, jobs=1): err= 0: pid=2001: Tue Mar  1 10:00:00 2016
  read : io=10240MB, bw=2048.0MB/s, iops=16384, runt=  5000msec
    slat (usec): min=3, max=40, avg= 5.10, stdev= 1.20
    clat (usec): min=90, max=4000, avg=1900.50, stdev=80.10
     lat (usec): min=95, max=4005, avg=1905.61, stdev=80.20
"""


def test_fio2_text() -> None:
    (job,) = fio.parse_fio(FIO2)
    assert job["fio_version"] == "fio-2.2.10"
    assert job["read"] == {"bw_bytes": 2048 * 2**20, "iops": 16384, "io_bytes": 10240 * 2**20,
                           "lat_mean_us": pytest.approx(1905.61)}


def test_fio_text_cut_before_results_is_refused() -> None:
    text = real("fio/nvme-seqread-4k-libaio-qd64-fio3.28-text.txt")
    cut = text[:text.index("  read: IOPS")]
    with pytest.raises(ParseError, match="has no read/write result line"):
        fio.parse_fio(cut)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, len(real("fio/nvme-seqread-4k-libaio-qd64-fio3.28-text.txt"))))
def test_property_cut_fio_text_reads_whole_values_or_refuses(cut: int) -> None:
    text = real("fio/nvme-seqread-4k-libaio-qd64-fio3.28-text.txt")
    try:
        (job,) = fio.parse_fio(text[:cut])
    except ParseError:
        return
    # never a half-read number: either the full bandwidth or the line was not read
    assert job["read"]["bw_bytes"] == 677 * 2**20
