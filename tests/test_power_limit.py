"""power.limit: the worked example of docs/extending.md (one module, one profile key,
these tests): real nvidia-smi outputs, a capped GPU, N/A, and the simulator."""

from __future__ import annotations

from pathlib import Path

from nodecert.profiles import thresholds
from nodecert_node.checks.power import judge_power, power_limits
from nodecert_node.contract import Limits, Verdict
from support.env import REPO
from support.simnode import SimNode

REAL = REPO / "tests" / "fixtures" / "real" / "nvidia-smi"
LIMITS = Limits(thresholds.resolve("H100-SXM"))


def test_real_outputs_at_their_default_limit_pass() -> None:
    h100 = power_limits((REAL / "h100-sxm-8gpu-565.57.01-q.txt").read_text())
    assert len(h100) == 8 and all(w == {"current_w": 700.0, "default_w": 700.0}
                                  for w in h100.values())
    res = judge_power(h100, LIMITS)
    assert res.verdict is Verdict.PASS and res.summary == "8 GPUs at their default power limit"
    a10 = power_limits((REAL / "a10-1gpu-535.129.03-q.txt").read_text())
    assert list(a10.values()) == [{"current_w": 150.0, "default_w": 150.0}]


def test_a_capped_gpu_is_named_with_both_figures() -> None:
    text = (REAL / "h100-sxm-8gpu-565.57.01-q.txt").read_text()
    first = text.index("Current Power Limit")
    capped = text[:first] + text[first:].replace("700.00 W", "500.00 W", 1)
    res = judge_power(power_limits(capped), LIMITS)
    assert res.verdict is Verdict.WARN
    assert res.summary.endswith("power limit 500 W of its default 700 W: needs >= 1 ratio, "
                                "measured 0.714 ratio")
    assert res.thresholds["power.limit_fraction_min"].source.startswith("nodecert policy: ")


def test_no_limit_reported_is_noted_not_judged() -> None:
    res = judge_power({"00000000:01:00.0": {"current_w": None, "default_w": None}}, LIMITS)
    assert res.verdict is Verdict.PASS and res.summary == "no GPU reports a power limit"
    assert res.findings == ("GPU 00000000:01:00.0: no power limit reported (N/A): not judged",)


def test_on_the_simulator(tmp_path: Path) -> None:
    r = SimNode(tmp_path).check("power.limit", suite="standard")
    assert r.verdict is Verdict.PASS, r.summary
    assert r.summary == "8 GPUs at their default power limit"
    assert r.evidence[-1].command == "nvidia-smi -q -d POWER"
    assert "Clocks" not in r.evidence[-1].output  # only the power sections, as printed
