"""nvidia-smi on real-world variants: the R590+ power readings, MIG mode against the order,
clocks below their default, persistence mode (health.gpu)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.profiles import thresholds
from nodecert_node.checks.health import judge_gpu_health
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import ParseError, smi
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "nvidia-smi"


def real(name: str) -> str:
    return (REAL / name).read_text()


def limits(model: str) -> Limits:
    return Limits(thresholds.resolve(model))


@pytest.mark.parametrize(("name", "draw", "limit", "default"), [
    ("h200-1gpu-590.48.01-q-idle.txt", 77.88, 700.0, 700.0),           # R590: instantaneous
    ("h100-80gb-hbm3-1gpu-590.48.01-q-under-gpu-burn-load.txt", None, 700.0, 700.0),
    ("h100-sxm-8gpu-565.57.01-q.txt", None, 700.0, 700.0),
    ("a100-sxm4-80gb-4gpu-555.42.02-q.txt", None, None, None),
])
def test_power_readings_across_layouts(name: str, draw: float | None, limit: float | None,
                                       default: float | None) -> None:
    _, gpus = smi.parse_q(real(name))
    g = gpus[0]
    if draw is not None:
        assert g["power_draw_w"] == draw
    else:
        assert g["power_draw_w"] is None or g["power_draw_w"] > 0
    if limit is not None:
        assert (g["power_limit_w"], g["power_default_w"]) == (limit, default)


def test_r590_xml_power_readings() -> None:
    _, gpus = smi.parse_q_xml(real("b200-8gpu-580.105.08-q-x-v13.xml"))
    assert len(gpus) == 8
    assert (gpus[0]["power_draw_w"], gpus[0]["power_limit_w"], gpus[0]["power_default_w"]) \
        == (195.79, 1000.0, 1000.0)
    assert gpus[0]["mig_current"] == "Disabled"


def test_mig_mode_against_the_order() -> None:
    h, gpus = smi.parse_q(real("h100-80gb-hbm3-mig-4-instances-590.48.01-q-idle.txt"))
    raw = real("h100-80gb-hbm3-mig-4-instances-590.48.01-q-idle.txt")
    r = judge_gpu_health(h, gpus, raw, limits("H100-SXM"))
    assert r.verdict is Verdict.FAIL
    assert any("MIG mode is Enabled, the order says whole GPUs" in f for f in r.findings)
    ordered = judge_gpu_health(h, gpus, raw, limits("H100-SXM"), mig_ordered=True)
    assert not any("MIG mode" in f for f in ordered.findings)
    h2, whole = smi.parse_q(real("h200-1gpu-590.48.01-q-idle.txt"))
    assert judge_gpu_health(h2, whole, "", limits("H200-SXM")).verdict is Verdict.PASS
    r2 = judge_gpu_health(h2, whole, "", limits("H200-SXM"), mig_ordered=True)
    assert r2.verdict is Verdict.FAIL and "MIG mode is Disabled" in r2.summary


def test_clocks_below_default_and_persistence_off_warn_naming_the_gpu() -> None:
    h, gpus = smi.parse_q(real("h200-1gpu-590.48.01-q-idle.txt"))
    g = dict(gpus[0], app_clock_mhz=1410, app_clock_default_mhz=1980)
    r = judge_gpu_health(h, [g], "", limits("H200-SXM"))
    assert r.verdict is Verdict.WARN
    assert f"GPU {g['bus_id']}: applications clock 1410 MHz is below its default 1980 MHz" \
        in r.summary
    locked = dict(gpus[0], clock_reasons={"applications_clocks_setting": True})
    assert "locked clocks setting" in judge_gpu_health(h, [locked], "", limits(
        "H200-SXM")).summary
    off = dict(gpus[0], persistence_mode=False)
    assert "persistence mode is off" in judge_gpu_health(h, [off], "", limits(
        "H200-SXM")).summary
    # R590 prints "Requested functionality has been deprecated" for applications clocks:
    # nothing to judge, no finding
    assert gpus[0]["app_clock_mhz"] is None


# --- property-based: reorder the GPU blocks, re-indent, truncate ------------------------

EIGHT = real("h100-sxm-8gpu-565.57.01-q.txt")


def _blocks(text: str) -> tuple[str, list[str]]:
    parts = re.split(r"(?m)^(?=GPU [0-9A-F]{8}:)", text)
    return parts[0], parts[1:]


@settings(max_examples=30, deadline=None)
@given(order=st.permutations(range(8)), tabs=st.booleans())
def test_property_reordered_and_retabbed_blocks_read_the_same(order: list[int],
                                                              tabs: bool) -> None:
    head, blocks = _blocks(EIGHT)
    text = head + "".join(blocks[i] for i in order)
    if tabs:  # some captures turn each 4-space indent into a TAB
        text = re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), text)
    _, want = smi.parse_q(EIGHT)
    _, got = smi.parse_q(text)
    assert sorted(got, key=lambda g: g["bus_id"]) == sorted(want, key=lambda g: g["bus_id"])


@settings(max_examples=80, deadline=None)
@given(cut=st.integers(min_value=1, max_value=len(EIGHT.splitlines()) - 1))
def test_property_truncated_q_is_refused_or_whole(cut: int) -> None:
    """Cut anywhere: refused, or every GPU read exactly as from the whole output (a cut
    after the last Processes section loses nothing a judge reads)."""
    text = "\n".join(EIGHT.splitlines()[:cut])
    try:
        _, got = smi.parse_q(text)
    except ParseError:
        return
    _, want = smi.parse_q(EIGHT)
    assert got == want
