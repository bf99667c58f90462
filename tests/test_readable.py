"""A certificate's figures as a customer reads them: labelled values with units, per-GPU
maps on one line, records a line each, absent never read as 0, hostile text cleaned; and
the summary's figures closest to their floors."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.certs import html, readable
from nodecert.certs.readable import Line, closest_to_floor, lines


def texts(value: Any, unit: str | None = None) -> dict[str, str]:
    got, _ = lines(value, unit)
    return {ln.label: ln.text for ln in got}


def test_keys_become_labels_and_their_suffixes_units() -> None:
    t = texts({"cpu_cores": 112, "ram_gb": 2048.0, "gpu_model": "NVIDIA H200",
               "seq_read_mbps": 705.671784, "rand_read_iops": 36528.8, "peak_temp_c": 71.5})
    assert t == {"CPU cores": "112", "RAM": "2,048 GB", "GPU model": "NVIDIA H200",
                 "Seq read": "705.7 MB/s", "Rand read": "36,529 IOPS", "Peak temp": "71.5 °C"}


def test_a_per_gpu_map_reads_on_one_line_in_gpu_order() -> None:
    t = texts({"tflops_per_gpu": {"10": 701.2, "2": 699.0, "0": 665.6}})
    assert t == {"TFLOPS per GPU": "GPU 0: 665.6 TFLOPS, GPU 2: 699 TFLOPS, "
                                   "GPU 10: 701.2 TFLOPS"}


def test_records_read_a_line_each_named_by_their_name_field() -> None:
    t = texts({"links": [{"device": "GPU 0000:18:00.0", "gen": 5, "width": 16}]})
    assert t == {"Links: GPU 0000:18:00.0": "gen 5, width 16"}
    # Names the node reported (a PCI address, a counter) are kept as they are.
    t = texts({"limits_w": {"0000:18:00.0": {"current_w": 700.0, "default_w": 700.0}}})
    assert t == {"Limits / 0000:18:00.0": "current 700 W, default 700 W"}
    same = texts({"counter_growth": {"mlx5_0/1": {f"Counter{k}": 0 for k in range(8)}}})
    assert same == {"Counter growth / mlx5_0/1": "8 figures, all 0"}


def test_absent_is_not_reported_never_zero_and_a_bare_figure_takes_the_checks_unit() -> None:
    assert texts({"gpus_inside": None}) == {"GPUs inside": "not reported"}
    assert lines(None, "W") == ([], 0)
    assert texts(0, "ports") == {"": "0 ports"}
    assert texts(12.5, "TFLOPS") == {"": "12.5 TFLOPS"}
    assert texts(True) == {"": "yes"}


def test_long_values_are_cut_and_say_how_much_more_the_evidence_holds() -> None:
    got, more = lines({f"k{k}": k for k in range(40)})
    assert len(got) == readable.MAX_LINES and more == 40 - readable.MAX_LINES
    one = texts({"t_per_gpu": {str(g): 1 for g in range(20)}})
    assert one["T per GPU"].endswith("GPU 15: 1 (and 4 more)")


def test_hostile_text_is_cleaned() -> None:
    t = texts({"name\x1b[31m": "a\x00b\u202ec", "ok": "x" * 500})
    assert all("\x1b" not in k and "\x00" not in v and "\u202e" not in v
               for k, v in t.items())
    assert len(t["Ok"]) <= 200


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                    | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=5)
                    | st.dictionaries(st.text(max_size=10), kids, max_size=5), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(JSON, st.sampled_from([None, "", "W", "TFLOPS", "MB/s|IOPS"]))
def test_any_value_a_node_could_send_reads_without_error(value: Any, unit: str | None) -> None:
    got, more = lines(value, unit)
    assert len(got) <= readable.MAX_LINES and more >= 0
    assert all(isinstance(ln, Line) and isinstance(ln.text, str) for ln in got)
    for ln in got:  # absent is never read as a number
        assert ln.text != "0" or "0" in json.dumps(value)


def result(check: str, value: Any, **thresholds: tuple[str, float, str]) -> dict[str, Any]:
    return {"check": check, "verdict": "PASS", "value": value,
            "thresholds": {k: {"op": op, "value": v, "unit": u, "origin": "profile x"}
                           for k, (op, v, u) in thresholds.items()}}


def test_the_figures_closest_to_their_floors_come_first() -> None:
    results = [
        result("load.burnin", {"dtype": "bf16", "tflops_per_gpu": {"0": 760.0, "3": 720.0}},
               **{"burnin.tflops_min_bf16": (">=", 711, "TFLOPS")}),
        result("storage.fio", {"/scratch": {"seq_read_mbps": 705.0, "seq_write_mbps": 30.0}},
               seq_read_mbps=(">=", 25, "MB/s"), seq_write_mbps=(">=", 25, "MB/s")),
        result("hardware.pcie", {"links": [{"device": "GPU 0", "gen": 5}]},
               **{"pcie.gen": (">=", 5, "")}),  # a requirement met, not a rate: not shown
        {**result("load.nccl", {"busbw": 1.0}, busbw=(">=", 400, "GB/s")),
         "verdict": "ERROR"},  # measured nothing it could be judged on
    ]
    got = closest_to_floor(results)
    assert [(m.check, m.figure, m.value) for m in got] == [
        ("load.burnin", "TFLOPS per GPU, GPU 3", 720.0),
        ("storage.fio", "Seq write, /scratch", 30.0),
        ("storage.fio", "Seq read, /scratch", 705.0)]
    assert round(got[0].room, 4) == round(720 / 711 - 1, 4)
    assert closest_to_floor([result("x", {"other": 5.0}, seq_read_mbps=(">=", 1, "MB/s"))]) == []


def test_the_page_shows_labelled_figures_the_evidence_and_the_summary() -> None:
    r = result("storage.fio", {"/scratch": {"seq_read_mbps": 705.671784}},
               seq_read_mbps=(">=", 25, "MB/s"))
    shown = html.shown(r)
    assert [(ln.label, ln.text) for ln in shown["lines"]] == [("/scratch", "seq read 705.7 MB/s")]
    assert '"seq_read_mbps": 705.671784' in shown["raw"]  # the evidence, as signed
    assert html.proven([r, {**r, "verdict": "FAIL"}, {**r, "verdict": "WARN"}]) == \
        "3 checks: 1 passed, 1 passed with a warning, 1 failed"
