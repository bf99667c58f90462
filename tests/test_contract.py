"""The contract shared by node and control side: Threshold.check, Plan, figures, files."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert_node.contract import (
    Figure,
    Limits,
    Plan,
    Threshold,
    figures,
    write_atomic,
)


@pytest.mark.parametrize(("op", "limit", "measured", "ok"), [
    (">=", 440, 440, True), (">=", 440, 439.9, False),
    ("<=", 92, 92, True), ("<=", 92, 92.1, False),
    (">", 0, 0, False), (">", 0, 1, True),
    ("<", 5, 5, False), ("<", 5, 4, True),
    ("==", 0, 0, True), ("==", 0, 18, False),
    ("in", ["NVIDIA H200"], "NVIDIA H200", True), ("in", ["NVIDIA H200"], "NVIDIA H100", False),
])
def test_check_honours_the_op(op: str, limit: object, measured: object, ok: bool) -> None:
    assert Threshold(limit, op).check(measured).ok is ok


def test_one_message_format() -> None:
    t = Threshold(440, ">=", "GB/s")
    assert t.check(37.9).message == "needs >= 440 GB/s, measured 37.9 GB/s"
    assert Threshold(92, "<=", "C").check(93).message == "needs <= 92 C, measured 93 C"
    assert Threshold(["NVIDIA H200"], "in").check("NVIDIA H100 80GB HBM3").message == \
        "needs one of NVIDIA H200, measured 'NVIDIA H100 80GB HBM3'"


@pytest.mark.parametrize("missing", [None, math.nan, "n/a", [], {}])
def test_a_missing_or_unreadable_figure_never_passes(missing: object) -> None:
    for op in (">=", "<=", ">", "<"):
        assert not Threshold(1, op).check(missing).ok


def test_a_threshold_that_is_no_number_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="threshold value 'lots'"):
        Threshold("lots", ">=", origin="inventory").check(3)
    with pytest.raises(ValueError, match="op '>>'"):
        Threshold(1, ">>")


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
       st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9))
def test_check_agrees_with_plain_comparison(limit: float, measured: float) -> None:
    assert Threshold(limit, ">=").check(measured).ok is (measured >= limit)
    assert Threshold(limit, "<=").check(measured).ok is (measured <= limit)


def test_limits_opt_and_pick() -> None:
    lim = Limits({"a": {"value": 1, "op": ">="}})
    assert lim.opt("a") == Threshold(1, ">=") and lim.opt("b") is None
    assert set(lim.pick("a", "b")) == {"a"}
    with pytest.raises(KeyError, match="'b'"):
        lim.get("b")


def test_plan_round_trips_and_refuses_what_it_does_not_know() -> None:
    p = Plan(run_id="r", host="h1", suite="quick", checks=["health.gpu"],
             check_timeouts_s={"health.gpu": 5}, thresholds={"a": {"value": 1, "op": ">="}})
    again = Plan.from_dict(json.loads(json.dumps(p.as_dict())))
    assert again == p and again.timeout_for("health.gpu") == 5
    assert again.timeout_for("other") == 300 and again.limits().value("a") == 1
    with pytest.raises(ValueError, match="schema"):
        Plan.from_dict({**p.as_dict(), "schema": "nodecert.plan/v0"})
    with pytest.raises(ValueError, match="unknown keys: colour"):
        Plan.from_dict({**p.as_dict(), "colour": "red"})
    bare = p.as_dict()
    del bare["checks"]
    with pytest.raises(ValueError, match="lacks: checks"):
        Plan.from_dict(bare)


def test_figures_are_the_headline_numbers() -> None:
    burn = {"check": "load.burnin", "verdict": "PASS",
            "value": {"tflops_per_gpu": {"0": 660.0, "1": 650.5}, "dtype": "bf16"}}
    f = figures(burn)
    assert f["gemm_tflops_min"] == Figure(650.5, "TFLOPS", "higher")
    assert f["gemm_tflops{gpu=1}"].labels == (("gpu", "1"),)
    soak = figures({"check": "load.thermal_soak", "verdict": "WARN",
                    "value": {"peak_temp_c": {"0": 61, "1": 64}}})
    assert soak["soak_peak_temp"] == Figure(64.0, "C", "lower")
    fio = figures({"check": "storage.fio", "verdict": "PASS",
                   "value": {"/scratch": {"seq_read_mbps": 6000, "rand_read_iops": True}}})
    assert list(fio) == ["storage /scratch seq_read_mbps"]  # a bool is not a figure
    # A check that did not finish has no figures.
    assert figures({**burn, "verdict": "ERROR"}) == {}
    assert figures({"check": "fabric.nccl_allreduce", "verdict": "PASS",
                    "value": {"busbw_gbs": 476.9}})["allreduce_busbw"].value == 476.9


def test_write_atomic_is_whole_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    target = tmp_path / "results.json"
    write_atomic(str(target), b"one", mode=0o600)
    assert target.read_bytes() == b"one" and (target.stat().st_mode & 0o777) == 0o600

    def full(fd: int) -> None:
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", full)  # the write fails before the rename
    with pytest.raises(OSError, match="disk full"):
        write_atomic(str(target), b"two")
    assert target.read_bytes() == b"one"  # the old file stands
    assert sorted(os.listdir(tmp_path)) == ["results.json"]  # no temp file left behind


def test_write_atomic_sets_the_mode_on_its_descriptor_not_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link swapped in for the temp file by whoever can write the directory cannot
    make chmod change another file: the mode is set on the open descriptor."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    victim.chmod(0o600)
    real_mkstemp = tempfile.mkstemp

    def racing_mkstemp(prefix: str = "", dir: str | None = None) -> tuple[int, str]:
        fd, name = real_mkstemp(prefix=prefix, dir=dir)
        os.rename(name, name + ".moved")  # the attacker: the name now a link to the victim
        os.symlink(victim, name)
        fd2 = os.open(name + ".moved", os.O_RDWR)
        os.close(fd)
        return fd2, name
    monkeypatch.setattr(tempfile, "mkstemp", racing_mkstemp)
    write_atomic(str(tmp_path / "nodecert.prom"), b"metrics", mode=0o644)
    assert (victim.stat().st_mode & 0o777) == 0o600  # untouched
