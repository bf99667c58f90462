"""What the burn-in drew: per-GPU plateau power, the limit in force, energy and
throughput per watt from nvidia-smi's samples (a GPU without readings has no figure,
never 0), stated in the certificate and compared across the fleet."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.certs import html
from nodecert.certs.i18n import voice
from nodecert_node import energy
from nodecert_node.contract import Evidence, Result, Verdict, all_figures
from nodecert_node.parse import smi
from support.env import REPO

# As `nvidia-smi --query-gpu=index,power.draw,enforced.power.limit --format=csv,noheader,
# nounits -lms 1000` prints them (an H200 at its 700 W limit; a GPU that cannot report).
LINES = ["0, 684.21, 700.00", "1, [N/A], 700.00", "0, 690.10, 700.00", "1, [N/A], 700.00",
         "0, 688.00, 700.00", "1, [N/A], 700.00", "0, 689.50, 700.00", "1, [N/A], 700.00"]


def rows() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for line in LINES:
        out += smi.parse_query_csv(line, energy.ENERGY_FIELDS)
    return out


def test_power_energy_and_throughput_per_watt_from_the_samples() -> None:
    e = energy.summarize(rows(), 60.0, {"0": 700.0, "1": 702.0})
    assert e["power_w_per_gpu"] == {"0": 688.8}  # median of the second half
    assert e["power_limit_w_per_gpu"] == {"0": 700.0, "1": 700.0}
    assert e["energy_wh_per_gpu"] == {"0": round((684.21 + 690.1 + 688 + 689.5) / 4 * 60
                                                 / 3600, 3)}
    assert e["energy_wh"] == e["energy_wh_per_gpu"]["0"]
    assert e["tflops_per_w_per_gpu"] == {"0": round(700 / 688.8, 4)}
    assert "1" not in e["power_w_per_gpu"] and "1" not in e["tflops_per_w_per_gpu"]
    nothing = energy.summarize([], 60.0, {"0": 700.0})
    assert nothing["power_w_per_gpu"] == {} and "energy_wh" not in nothing


def test_real_nvidia_smi_readings_give_figures_and_a_row_without_index_gives_none() -> None:
    real = REPO / "tests/fixtures/real/nvidia-smi"
    # An H100 under load, every field queried with units ("631.95 W"): read as a number.
    h100 = smi.parse_query_csv((real / "h100-80gb-hbm3-1gpu-590.48.01-query-gpu-all-fields-"
                                "under-load.csv").read_text())
    e = energy.summarize(h100, 60.0, {"0": 700.0})
    assert e["power_w_per_gpu"] == {"0": 632.0} and e["power_limit_w_per_gpu"] == {"0": 700.0}
    assert e["energy_wh"] == round(631.95 * 60 / 3600, 3)
    # A P100's query without an index column: no GPU to put a figure on, so none.
    p100 = smi.parse_query_csv((real / "tesla-p100-pcie-query-gpu.csv").read_text())
    assert energy.summarize(p100, 60.0, {"0": 9.0})["power_w_per_gpu"] == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.one_of(st.just("[N/A]"), st.floats(
    0, 2000, allow_nan=False).map(lambda x: f"{x:.2f}"))), max_size=40),
       st.floats(0, 3600, allow_nan=False))
def test_no_reading_is_never_a_figure_of_zero(samples: list[tuple[int, str]],
                                              seconds: float) -> None:
    got = [{"index": str(g), "power.draw": p, "enforced.power.limit": "700.00"}
           for g, p in samples]
    e = energy.summarize(got, seconds, {str(g): 500.0 for g in range(8)})
    for key in ("power_w_per_gpu", "energy_wh_per_gpu", "tflops_per_w_per_gpu"):
        for g, v in e[key].items():
            readings = [float(p) for gg, p in samples if str(gg) == g and p != "[N/A]"
                        and float(p) > 0]
            assert readings, f"{key} has a figure for GPU{g}, which never reported"
            assert v >= 0  # a reading of 0.03 W may round to 0.0: still a reading


def burnin(value: dict[str, Any]) -> dict[str, Any]:
    return Result("load.burnin", Verdict.PASS, "ok", value=value).as_dict()


def test_the_burn_in_keeps_its_figures_and_gains_the_energy() -> None:
    res = Result("load.burnin", Verdict.PASS, "8 GPUs", value={"tflops_per_gpu": {"0": 700.0}},
                 evidence=(Evidence.of("gemm", "x", 0, "", 1.0),))
    out = energy.with_energy(res, rows(), ["0, 684.21, 700.00\n"], 60.0, 0)
    assert out.value["tflops_per_gpu"] == {"0": 700.0}
    assert out.value["energy"]["tflops_per_w_per_gpu"] == {"0": round(700 / 688.8, 4)}
    assert [e.name for e in out.evidence] == ["gemm", "power"]
    figs = all_figures([out.as_dict()])
    assert figs["gemm_tflops_per_w{gpu=0}"].unit == "TFLOPS/W"
    assert "gemm_tflops_per_w_min" not in figs  # per GPU: not a node-wide drift figure
    broken = Result("load.burnin", Verdict.ERROR, "no load")
    assert energy.with_energy(broken, rows(), [], 1.0, 0) is broken


def test_the_certificate_states_the_energy_in_the_readers_language() -> None:
    value = {"tflops_per_gpu": {"0": 700.0, "1": 690.0}, "energy": energy.summarize(
        rows() + [{"index": "1", "power.draw": "650", "enforced.power.limit": "700"}] * 4,
        60.0, {"0": 700.0, "1": 690.0})}
    bmc = {"check": "bmc.power", "verdict": "PASS",
           "facts": {"samples": [{"t": 0, "power_w": 5200.0}, {"t": 5, "power_w": 6400.0}]}}
    p = {"results": [burnin(value), bmc]}
    lines = dict(html.energy(p))
    assert lines["throughput per watt"] == "1.016 to 1.062 TFLOPS/W per GPU at 669 W"
    assert lines["power limit in force"] == "700 W per GPU"
    assert lines["energy of the burn-in"].endswith(" Wh (GPUs)")
    assert lines["system draw (BMC)"] == "mean 5800 W, peak 6400 W"
    pt = dict(html.energy(p, voice("pt_BR")))
    assert pt["vazão por watt"] == "de 1,016 a 1,062 TFLOPS/W por GPU a 669 W"
    assert html.energy({"results": [burnin({"tflops_per_gpu": {"0": 1.0}})]}) == []
    assert html.key_figures({"results": [burnin(value)]})["per_w"] == "1.016 / 1.062"
