"""Fleet baselines: the peers' median and robust spread per GPU model, signed; a node
judged against them (fleet.peers); trends over a node's own runs (fleet.trend)."""

from __future__ import annotations

import base64
import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.certs.signing import init_key, load_private_key, load_public_key
from nodecert.fleet import baseline as fb
from nodecert.fleet import peers, stats, trends
from nodecert.fleet.judging import fleet_limits, history_of, judge_records, with_results
from nodecert.fleet.samples import FleetDataError, gpu_model, samples
from nodecert.lab.fleet import FleetSpec
from nodecert.lab.fleetfigures import NodeFigures
from nodecert.lab.fleetruns import write_run
from nodecert.runs.records import HostRecord, finished_run
from nodecert_node.contract import Limits, Result, Verdict, figures
from support.runs import recorded_results

LIMITS = fleet_limits(None)


def kinds(spec: FleetSpec) -> dict[str, str]:
    return {f"n{i:05d}": k for i, k in enumerate(spec.kinds())}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetSpec, Path, list[Path]]:
    """400 emulated nodes, four runs each (an hour apart): 3 weak, 2 wearing, 1 repaired."""
    spec = FleetSpec(400, weak=3, wearing=2, repaired=1, seed=11)
    runs = tmp_path_factory.mktemp("fleet") / "runs"
    t0 = time.time() - 5 * 3600
    return spec, runs, [write_run(runs, spec, k, started=t0 + k * 3600) for k in range(1, 5)]


# --- statistics -------------------------------------------------------------------------

def test_robust_spread_ignores_a_minority_of_outliers() -> None:
    healthy = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8]
    assert stats.median(healthy) == 100.0
    s = stats.robust_sigma(healthy)
    assert s == stats.robust_sigma([*healthy[:-1], 10.0])  # one broken node barely moves it
    assert 0.5 < s < 1.0


def test_identical_figures_do_not_make_every_difference_infinite() -> None:
    assert stats.deviations(99.0, 100.0, 0.0, floor=0.5) == -2.0
    assert stats.deviations(100.0, 100.0, 0.0) == 0.0
    assert stats.deviations(99.0, 100.0, 0.0) == -math.inf
    with pytest.raises(ValueError, match="median of no values"):
        stats.median([])


# --- figures ------------------------------------------------------------------------------

def test_figures_of_a_real_h200_run_become_fleet_samples() -> None:
    res = [Result.from_dict(r) for r in recorded_results()]
    got = {(s.metric, s.label): s for s in samples(res)}
    assert gpu_model(res) == "NVIDIA H200"
    gemm = got[("gemm_tflops", "gpu=0")]
    assert gemm.unit == "TFLOPS" and gemm.better == "higher" and gemm.value > 100
    assert ("soak_peak_temp", "gpu=0") in got
    # the worst-GPU aggregates are not samples of their own (no GPU counted twice)
    assert not any(m in ("gemm_tflops_min", "h2d_gbs_min", "soak_peak_temp") and not lab
                   for m, lab in got)


def test_copy_bandwidth_figures_per_gpu_and_pair() -> None:
    bw = Result("fabric.bandwidth", Verdict.PASS, "", value={
        "host_to_device_memcpy_ce": {"0": 53.1, "1": 52.9},
        "device_to_host_memcpy_ce": {"0": 52.0, "1": 51.8},
        "device_to_device_memcpy_read_ce": {"0-1": 390.0, "1-0": 391.0}})
    got = {(s.metric, s.label): s.value for s in samples([bw])}
    assert got == {("h2d_gbs", "gpu=0"): 53.1, ("h2d_gbs", "gpu=1"): 52.9,
                   ("d2h_gbs", "gpu=0"): 52.0, ("d2h_gbs", "gpu=1"): 51.8,
                   ("p2p_gbs", "pair=0-1"): 390.0, ("p2p_gbs", "pair=1-0"): 391.0}


def test_an_error_result_and_absent_readings_have_no_figure() -> None:
    burnin = {"check": "load.burnin", "verdict": "ERROR",
              "value": {"tflops_per_gpu": {"0": 650.0}}}
    assert figures(burnin) == {}
    soak = {"check": "load.thermal_soak", "verdict": "PASS",
            "value": {"peak_temp_c": {"0": 60}, "plateau_sm_mhz": {}, "plateau_power_w": {"0":
                                                                                         None}}}
    names = set(figures(soak))
    assert "soak_sm_mhz{gpu=0}" not in names and "soak_power_w{gpu=0}" not in names
    health = {"check": "health.gpu", "verdict": "PASS",
              "value": {"ecc_corrected_per_gpu": {"0": 4}, "temp_c_per_gpu": {"0": 31}}}
    assert figures(health)["ecc_corrected{gpu=0}"].value == 4.0


# --- the baseline and the peers' judgement ---------------------------------------------------

def test_slow_but_passing_nodes_are_named_and_no_healthy_node_is(
        fleet: tuple[FleetSpec, Path, list[Path]]) -> None:
    spec, _, runs = fleet
    recs = finished_run(runs[0])
    b = fb.build(recs)
    k = kinds(spec)
    assert b.excluded == {h: f"verdict FAIL in run {runs[0].name}" for h, v in k.items()
                          if v == "repaired"}
    flagged = {r.host: peers.judge(r.results, b, LIMITS) for r in recs}
    bad = {h for h, res in flagged.items() if res.verdict >= Verdict.WARN}
    assert bad == {h for h, v in k.items() if v == "weak"}
    for h in bad:
        res = flagged[h]
        assert res.verdict == Verdict.FAIL and res.fault_code == "NC-FLEET-OUTLIER"
        # names the metric, the value, the peers' median and the spread
        gemm = next(f for f in res.findings if f.startswith("gemm_tflops GPU0"))
        assert "below the fleet median 6" in gemm and "robust deviations; spread" in gemm
    # the weak nodes pass every absolute floor: their burn-in is PASS on the node
    for h in bad:
        rec = next(r for r in recs if r.host == h)
        assert next(r for r in rec.results if r.check == "load.burnin").verdict is Verdict.PASS
        assert min(s.value for s in samples(rec.results) if s.metric == "gemm_tflops") > 590


def test_a_worse_temperature_is_above_the_median_and_only_warns() -> None:
    recs = [_node(f"h{i}", temp=60.0 + (i % 3) * 0.5) for i in range(12)]
    hot = _node("hot", temp=70.0)
    b = fb.build(recs)
    res = peers.judge(hot.results, b, LIMITS)
    assert res.verdict == Verdict.WARN
    assert res.findings[0].startswith("soak_peak_temp GPU0 70 C is ") and "above" in \
        res.findings[0]
    cold = peers.judge(_node("cold", temp=50.0).results, b, LIMITS)
    assert cold.verdict == Verdict.PASS  # cooler than the fleet is not worse


def test_too_few_peers_is_not_judged_and_says_so() -> None:
    b = fb.build([_node(f"h{i}", gemm=650.0 + i) for i in range(5)])
    res = peers.judge(_node("slow", gemm=500.0).results, b, LIMITS)
    assert res.verdict == Verdict.WARN and res.fault_code == "NC-FLEET-NOT-JUDGED"
    assert "5 peer nodes, needs >= 8 nodes" in res.summary


def test_a_node_without_figures_or_model_is_not_judged_never_passed() -> None:
    b = fb.build([_node(f"h{i}") for i in range(10)])
    bare = [r for r in _node("x").results if r.check == "hardware.inventory"]
    assert peers.judge(bare, b, LIMITS).verdict == Verdict.WARN
    other = copy.deepcopy(_node("y").results)
    next(r for r in other if r.check == "hardware.inventory").value["gpu_model"] = \
        "NVIDIA B200"
    res = peers.judge(other, b, LIMITS)
    assert res.verdict == Verdict.WARN and "no NVIDIA B200 nodes" in res.summary


def test_the_limits_come_from_the_run_and_a_tighter_one_flags_more() -> None:
    recs = [_node(f"h{i}", gemm=650.0 + (i % 5)) for i in range(20)]
    b = fb.build(recs)
    near = _node("near", gemm=640.0)  # 1.5% below: within the 2% shortfall
    assert peers.judge(near.results, b, LIMITS).verdict == Verdict.PASS
    raw = {k: t.as_dict() for k, t in LIMITS.pick(*peers.KEYS).items()}
    raw["fleet.shortfall_fraction_max"]["value"] = 0.01
    assert peers.judge(near.results, b, Limits(raw)).verdict == Verdict.FAIL


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=600, max_value=700), min_size=8, max_size=40),
       st.floats(min_value=0, max_value=0.019))
def test_a_figure_within_the_shortfall_never_fails(values: list[float], short: float) -> None:
    b = fb.build([_node(f"h{i}", gemm=v) for i, v in enumerate(values)])
    med = b.groups["NVIDIA H200"]["gemm_tflops"].median
    res = peers.judge(_node("x", gemm=round(med * (1 - short), 1) + 0.1).results, b, LIMITS)
    assert res.verdict == Verdict.PASS


def _node(host: str, *, gemm: float = 650.0, temp: float = 60.0,
          verdict: str = "PASS") -> HostRecord:
    results = [{"check": "hardware.inventory", "verdict": "PASS",
                "value": {"gpu_model": "NVIDIA H200", "gpus": 1}},
               {"check": "load.burnin", "verdict": verdict,
                "value": {"tflops_per_gpu": {"0": gemm}}},
               {"check": "load.thermal_soak", "verdict": "PASS",
                "value": {"peak_temp_c": {"0": temp}}}]
    return HostRecord(Path(f"/nonexistent/run/{host}/results.json"),
                      {"schema": "nodecert.validation/v1", "host": host, "run_id": "r1",
                       "verdict": verdict, "results": results, "finished": 1.0})


# --- the signed file ----------------------------------------------------------------------

@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Any, Any]:
    kp = init_key(tmp_path / "keys")
    b = fb.build([_node(f"h{i}", gemm=650.0 + i) for i in range(10)])
    path = tmp_path / "b.json"
    fb.write(b, path, load_private_key(kp.private))
    return path, load_public_key(kp.public), b


def test_a_baseline_reads_back_only_with_its_signer(signed: tuple[Path, Any, Any],
                                                    tmp_path: Path) -> None:
    path, pub, b = signed
    got = fb.read(path, [pub])
    assert got.version == b.version and got.groups == b.groups
    other = load_public_key(init_key(tmp_path / "other").public)
    with pytest.raises(FleetDataError, match="signature does not verify"):
        fb.read(path, [other])


def test_a_baseline_for_another_fleet_or_too_old_is_refused(tmp_path: Path) -> None:
    """A baseline is signed with the fleet it was built for and when: a verifier asking
    for its own fleet refuses another's (or one that names none), and one asking for a
    maximum age refuses an older one. Before, any baseline of any age was used."""
    import datetime as dt

    from click.testing import CliRunner

    from nodecert.cli import main
    kp = init_key(tmp_path / "keys")
    made = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    b = fb.build([_node(f"h{i}", gemm=650.0 + i) for i in range(10)], now=made,
                 fleet="dc1-h200")
    path = tmp_path / "b.json"
    fb.write(b, path, load_private_key(kp.private))
    pub = [load_public_key(kp.public)]
    later = made + dt.timedelta(days=40)
    assert fb.read(path, pub, fb.Expect("dc1-h200", dt.timedelta(days=60)), later).fleet \
        == "dc1-h200"
    with pytest.raises(FleetDataError, match="built for fleet 'dc1-h200', not 'dc2'"):
        fb.read(path, pub, fb.Expect("dc2"), later)
    with pytest.raises(FleetDataError, match="older than the 30 days allowed"):
        fb.read(path, pub, fb.Expect(max_age=dt.timedelta(days=30)), later)
    anon = tmp_path / "anon.json"
    fb.write(fb.build([_node(f"h{i}", gemm=650.0) for i in range(10)]), anon,
             load_private_key(kp.private))
    with pytest.raises(FleetDataError, match="built for fleet None"):
        fb.read(anon, pub, fb.Expect("dc1-h200"))
    r = CliRunner().invoke(main, ["fleet", "judge", str(tmp_path), "--baseline", str(path),
                                  "--pubkey", str(kp.public), "--baseline-fleet", "dc2"])
    assert r.exit_code == 2 and "not 'dc2'" in r.output, r.output


def _repayload(path: Path, change: Any) -> None:
    env = json.loads(path.read_text())
    data = json.loads(base64.b64decode(env["payload"]))
    change(data)
    env["payload"] = base64.b64encode(json.dumps(data).encode()).decode()
    path.write_text(json.dumps(env))


def test_a_changed_figure_is_refused(signed: tuple[Path, Any, Any]) -> None:
    path, pub, _ = signed
    _repayload(path, lambda d: d["groups"]["NVIDIA H200"]["gemm_tflops"].update(median=1.0))
    with pytest.raises(FleetDataError, match="does not verify"):
        fb.read(path, [pub])


def test_a_version_that_is_not_its_figures_digest_is_refused(tmp_path: Path) -> None:
    kp = init_key(tmp_path / "keys")
    b = fb.build([_node(f"h{i}") for i in range(10)])
    data = b.as_dict()
    data["version"] = "0" * 16
    from nodecert.certs.signing import canonical_json, sign_envelope
    env = sign_envelope(canonical_json(data), fb.PAYLOAD_TYPE, load_private_key(kp.private))
    (tmp_path / "b.json").write_text(json.dumps(env))
    with pytest.raises(FleetDataError, match="is not the digest"):
        fb.read(tmp_path / "b.json", [load_public_key(kp.public)])
    (tmp_path / "nan.json").write_text(json.dumps(sign_envelope(
        canonical_json(data).replace(b'"median":650.0', b'"median":NaN'), fb.PAYLOAD_TYPE,
        load_private_key(kp.private))))
    with pytest.raises(FleetDataError, match="NaN is not a figure"):
        fb.read(tmp_path / "nan.json", [load_public_key(kp.public)])


def test_a_fleet_with_no_figures_gives_no_baseline() -> None:
    with pytest.raises(FleetDataError, match="no host of these runs has figures"):
        fb.build([_node("h1", verdict="FAIL")])


# --- trends ----------------------------------------------------------------------------------

def _hist(values: list[float], *, temps: list[float] | None = None) -> list[
        tuple[str, list[Result]]]:
    temps = temps or [60.0] * len(values)
    return [(f"r{k}", _node("h", gemm=v, temp=t).results)
            for k, (v, t) in enumerate(zip(values, temps, strict=True))]


def test_a_falling_figure_is_flagged_before_it_crosses_its_floor() -> None:
    floor = 590.0  # H200-SXM burnin.tflops_min_bf16
    values = [660.0 * (1 - 0.02 * k) for k in range(8)]
    flagged_at = next(n for n in range(1, 9)
                      if trends.judge(_hist(values[:n]), LIMITS).verdict == Verdict.WARN)
    crossed_at = next(n for n in range(1, 9) if values[n - 1] < floor)
    assert flagged_at == 3 and crossed_at == 7
    res = trends.judge(_hist(values[:3]), LIMITS)
    assert res.findings[0] == ("gemm_tflops GPU0 fell at each of the last 3 runs: 660 -> "
                               "646.8 -> 633.6 TFLOPS (4.0% in all)")


@pytest.mark.parametrize("values", [[660, 650, 655, 645], [660, 659, 658], [660, 640, 650]])
def test_spread_that_goes_both_ways_or_stays_small_is_no_trend(values: list[float]) -> None:
    assert trends.judge(_hist([float(v) for v in values]), LIMITS).verdict == Verdict.PASS


def test_a_warming_gpu_and_rising_error_counts_are_trends() -> None:
    res = trends.judge(_hist([650.0] * 3, temps=[60.0, 62.0, 64.5]), LIMITS)
    assert res.verdict == Verdict.WARN and "soak_peak_temp GPU0 rose" in res.summary
    assert trends.judge(_hist([650.0] * 3, temps=[60.0, 61.0, 62.0]),
                        LIMITS).verdict == Verdict.PASS  # 2 C: within fleet.trend_rise_c_max


def test_a_links_error_count_rising_run_after_run_is_a_trend() -> None:
    """net.ib's counters as last read become link_errors{port=...} (data counters are not
    errors); a port counting up at each of the last 3 runs is flagged, naming it."""
    from nodecert_node.contract import all_figures

    def ib(symbol: int, recovery: int) -> Result:
        return Result("net.ib", Verdict.PASS, "8 ports", value={"counters": {
            "mlx5_3/1": {"SymbolErrorCounter": symbol, "LinkErrorRecoveryCounter": recovery},
            "mlx5_0/1": {"SymbolErrorCounter": 0}}})
    figs = all_figures([ib(3, 1).as_dict()])
    assert figs["link_errors{port=mlx5_3/1}"].value == 4.0
    assert figs["link_errors{port=mlx5_3/1}"].unit == "errors"
    hist = [(f"r{k}", [*_node("h", gemm=650.0).results, ib(s, r)])
            for k, (s, r) in enumerate([(0, 0), (12, 1), (40, 2)])]
    res = trends.judge(hist, LIMITS)
    assert res.verdict == Verdict.WARN
    assert res.findings == ("link_errors port mlx5_3/1 rose at each of the last 3 runs: "
                            "0 -> 13 -> 42 errors",)
    steady = [(f"r{k}", [*_node("h", gemm=650.0).results, ib(7, 0)]) for k in range(3)]
    assert trends.judge(steady, LIMITS).verdict == Verdict.PASS


def test_too_few_runs_say_so() -> None:
    res = trends.judge(_hist([660.0, 600.0]), LIMITS)
    assert res.verdict == Verdict.PASS and "a trend needs 3" in res.summary


def test_the_wearing_nodes_trend_and_a_run_is_never_judged_with_later_runs(
        fleet: tuple[FleetSpec, Path, list[Path]]) -> None:
    spec, runs_dir, runs = fleet
    wearing = sorted(h for h, k in kinds(spec).items() if k == "wearing")
    for n, run in enumerate(runs, start=1):
        recs = [r for r in finished_run(run) if r.host in wearing]
        judged = judge_records(recs, baseline=None, runs_dir=runs_dir)
        verdicts = {judged[h][0].verdict for h in wearing}
        assert verdicts == ({Verdict.WARN} if n >= 3 else {Verdict.PASS}), n
        hist = history_of(runs_dir, wearing[0], current=recs[0].path)
        assert [r for r, _ in hist] == [p.name for p in runs[:n]]
    findings = judged[wearing[0]][0].findings
    assert any(f.startswith("gemm_tflops GPU0 fell") for f in findings)
    assert any(f.startswith("ecc_corrected GPU0 rose") for f in findings)
    assert any(f.startswith("idle_temp GPU0 rose") for f in findings)


def test_the_seeded_fleet_is_spread_as_stated() -> None:
    gemm = [NodeFigures(i, "ok", 5).value("load.burnin", 1)["tflops_per_gpu"]["0"]
            for i in range(2000)]
    med = stats.median(gemm)
    assert 655 < med < 665
    assert 0.006 < stats.robust_sigma(gemm) / med < 0.01


def test_a_record_with_a_fleet_fail_is_a_failing_record() -> None:
    rec = _node("h")
    res = peers.judge(rec.results, fb.build([_node(f"p{i}", gemm=700.0 + i % 3)
                                              for i in range(10)]), LIMITS)
    assert res.verdict == Verdict.FAIL
    assert with_results(rec, [res]).verdict is Verdict.FAIL


# --- cluster runs: each node's pairings -------------------------------------------------------

def _cluster_run(root: Path, nodes: list[str], slow_rail: str | None = None) -> Path:
    """A cluster run as `cluster validate` lays it out: its record (the pairings, each node
    with two partners), and the nodes' own validation run under nodes/."""
    run = root / "cluster-20261203-101500-a1b2c3"
    pairs = []
    for k, a in enumerate(nodes):
        for b in (nodes[(k + 1) % len(nodes)], nodes[(k + 2) % len(nodes)]):
            slow = slow_rail in (a, b)
            pairs.append({"nodes": [a, b], "round": 1, "job": f"j{k}", "ok": True,
                          "busbw": 46.0 + (k % 3) * 0.1 - (2.5 if slow else 0.0),
                          "rails": {"mlx5_0": 390.0 + (k % 4) * 0.5 - (20 if slow else 0),
                                    "mlx5_1": 391.0 + (k % 3) * 0.5},
                          "rails_ok": {}, "problem": "", "error": ""})
    pairs.append({"nodes": [nodes[0], nodes[1]], "error": "launch failed", "busbw": 1.0})
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"schema": "nodecert.cluster-run/v1",
                                                  "verdict": "PASS", "pairs": pairs,
                                                  "results": [], "culprits": []}))
    inner = run / "nodes" / "20261203-101501-d4e5f6"
    for n in nodes:
        (inner / n).mkdir(parents=True)
        (inner / n / "results.json").write_text(json.dumps(
            {**_node(n).data, "schema": "nodecert.validation/v1", "started": 1.0}))
    (inner / "validate.json").write_text("{}")
    return run


def test_a_cluster_runs_pairings_are_figures_of_each_node(tmp_path: Path) -> None:
    from nodecert.fleet.judging import add_to_cluster_run, load_runs
    from nodecert.fleet.samples import pair_samples
    from nodecert.runs.records import read_cluster_record
    nodes = [f"c{i:02d}" for i in range(12)]
    run = _cluster_run(tmp_path, nodes, slow_rail="c05")
    records, extra = load_runs([run])
    assert sorted(r.host for r in records) == nodes
    got = {s.metric + (f"{{{s.label}}}" if s.label else ""): s.value for s in extra["c05"]}
    assert set(got) == {"pair_busbw", "rail_gbps{rail=mlx5_0}", "rail_gbps{rail=mlx5_1}"}
    # the failed pairing (busbw 1.0) gives no figure
    assert all(s.value > 40 for ss in extra.values() for s in ss if s.metric == "pair_busbw")
    assert pair_samples([{"nodes": ["a", "b"], "busbw": None, "rails": {"x": "fast"}}]) == {}
    b = fb.build(records, extra=extra)
    assert b.groups["NVIDIA H200"]["rail_gbps"].nodes == 12
    new = add_to_cluster_run(read_cluster_record(run), b)
    fleet = new.result("fleet.peers")
    assert fleet is not None and fleet.verdict is Verdict.FAIL and "c05" in new.culprits
    assert [f.split(" ")[0] for f in fleet.findings] == ["c05:"]  # its partners pass
    assert "rail_gbps rail mlx5_0 " in fleet.findings[0] or "pair_busbw " in fleet.findings[0]
    assert new.verdict is Verdict.FAIL
    assert read_cluster_record(run).verdict is Verdict.FAIL  # saved as it was returned
    saved = json.loads((run / "nodes" / "20261203-101501-d4e5f6" / "c05" /
                        "results.json").read_text())
    assert next(r for r in saved["results"] if r["check"] == "fleet.peers")["verdict"] == "FAIL"
