"""perftest output (ib_write_bw) from real runs: Gb/s whichever unit was printed,
GPUDirect runs recognised, interleaved warnings skipped, a broken row refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecert_node.parse import ParseError
from nodecert_node.parse.perftest import parse_perftest

PT = Path(__file__).parent / "fixtures" / "real" / "perftest"


def test_real_perftest_runs() -> None:
    (hdr,) = parse_perftest((PT / "a100-cx6-hdr-2node-ib_write_bw-a-mlx5_0-23gbs-cpu-freq-"
                                  "warnings-interleaved.txt").read_text())
    assert (hdr["device"], hdr["qps"], hdr["unit"], len(hdr["rows"])) == ("mlx5_0", 1, "MB", 23)
    # 23317.65 MB/sec (MB = 2^20 bytes) is 195.6 Gb/s on an HDR (200 Gb/s) link
    assert hdr["rows"][-1] == {"bytes": 8388608, "iterations": 5000, "peak_gbps": 195.68,
                               "avg_gbps": 195.603, "msg_rate_mpps": 0.002915}
    (gdr,) = parse_perftest((PT / "a100-k8s-pod-ib_write_bw-use_cuda-gdr-client-all-sizes-"
                                  "2qp.txt").read_text())
    assert gdr["gpudirect"] and gdr["unit"] == "Gb" and gdr["rows"][-1]["avg_gbps"] == 80.96
    (roce,) = parse_perftest((PT / "dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-gbits.txt")
                             .read_text())
    assert (roce["device"], roce["qps"], roce["rows"][0]["avg_gbps"]) == ("rocep1s0f1", 4,
                                                                         111.71)
    both = parse_perftest((PT / "ib-write-bw-loopback-8m-ib0.txt").read_text())
    assert [len(r["rows"]) for r in both] == [1, 1]  # server and client, one report each


def test_a_broken_row_is_refused() -> None:
    text = (PT / "dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-gbits.txt").read_text()
    with pytest.raises(ParseError, match="is not a perftest result row"):
        parse_perftest(text.replace("111.72             111.71", "111.72111.71"))
    with pytest.raises(ParseError, match="not perftest output"):
        parse_perftest("hello\n")
