"""A rack's management endpoints read and judged: DMTF's public power-shelf and cooling-
unit mockups (real Redfish documents) through the readers, and the rules across a
rack's trays, switch trays, power, cooling and firmware -- each fault named, nothing
absent read as healthy, thresholds judged over consecutive samples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.rack import infra
from nodecert.rack.judge import (
    firmware_table,
    judge_cooling,
    judge_domain,
    judge_firmware,
    judge_power,
    judge_switch_trays,
    judge_trays,
    sustained,
)
from nodecert_node.contract import Verdict

REAL = Path(__file__).parent / "fixtures" / "real" / "redfish-rack"
CDU = "/redfish/v1/ThermalEquipment/CDUs"
SHELVES = "/redfish/v1/PowerEquipment/PowerShelves"


def _real(name: str) -> dict[str, Any]:
    return json.loads((REAL / f"dmtf-mockup-public-{name}.json").read_text())


def _example(name: str) -> dict[str, Any]:
    """A DMTF schema example (DSP2046) of a resource the mockups lack."""
    return json.loads((REAL / f"{name}.json").read_text())


def _coll(*paths: str) -> dict[str, Any]:
    return {"Members": [{"@odata.id": p} for p in paths]}


def cdu_tree(**edit: Any) -> infra.Tree:
    """The DMTF cooling-unit mockup's documents at their paths (collections added)."""
    tree = {
        CDU: _coll(f"{CDU}/1"),
        f"{CDU}/1": _real("cooling-unit-thermalequipment-cdus-1-coolingunit"),
        f"{CDU}/1/LeakDetection": _real("cooling-unit-cdu1-leakdetection-summary"),
        f"{CDU}/1/Pumps": _coll(f"{CDU}/1/Pumps/1"),
        f"{CDU}/1/Pumps/1": _real("cooling-unit-cdu1-pump-1"),
        f"{CDU}/1/PrimaryCoolantConnectors": _coll(f"{CDU}/1/PrimaryCoolantConnectors/1"),
        f"{CDU}/1/PrimaryCoolantConnectors/1":
            _real("cooling-unit-cdu1-primary-coolant-connector-1-temps-flow-pressure"),
        "/redfish/v1/Chassis/CDU/Sensors/PrimaryFlow":
            _real("cooling-unit-chassis-cdu-sensor-primaryflow-lpm"),
        "/redfish/v1/Chassis/CDU/Sensors/PrimarySupplyPressure":
            _real("cooling-unit-chassis-cdu-sensor-primarysupplypressure"),
    }
    tree.update(edit)
    return tree


def healthy_cdu_tree() -> infra.Tree:
    """The mockup as a healthy unit: its published state has pump 2 failed."""
    unit = copy.deepcopy(_real("cooling-unit-thermalequipment-cdus-1-coolingunit"))
    unit["Status"] = {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"}
    return cdu_tree(**{f"{CDU}/1": unit})


def shelf_tree(**edit: Any) -> infra.Tree:
    ch = "/redfish/v1/Chassis/PowerShelf/PowerSubsystem"
    tree = {
        SHELVES: _coll(f"{SHELVES}/1"),
        f"{SHELVES}/1": _real("power-shelf-powerequipment-powershelves-1-powerdistribution"),
        f"{SHELVES}/1/Metrics": _real("power-shelf-powershelves-1-metrics"),
        ch: _real("power-shelf-chassis-powersubsystem"),
        f"{ch}/PowerSupplies": _coll(f"{ch}/PowerSupplies/Bay1"),
        f"{ch}/PowerSupplies/Bay1": _real("power-shelf-powersupply-bay1"),
    }
    tree.update(edit)
    return tree


def switch_tree(port_link: str = "LinkUp", firmware: str = "1.3.2") -> infra.Tree:
    """A switch tray as DMTF's Chassis, SoftwareInventory, Switch and Port schemas put it
    (no public mockup of an NVLink switch tray exists)."""
    sw = "/redfish/v1/Fabrics/NVLink/Switches/NVSwitch_0"
    ports = [f"{sw}/Ports/acp{i}" for i in range(1, 5)]
    tree: infra.Tree = {
        "/redfish/v1/Chassis": _coll("/redfish/v1/Chassis/Tray"),
        "/redfish/v1/Chassis/Tray": {"Id": "Tray", "SerialNumber": "1821000000017",
                                     "Model": "NVLink Switch Tray",
                                     "Status": {"State": "Enabled", "Health": "OK"}},
        "/redfish/v1/UpdateService/FirmwareInventory":
            _coll("/redfish/v1/UpdateService/FirmwareInventory/BMC"),
        "/redfish/v1/UpdateService/FirmwareInventory/BMC": {"Id": "BMC", "Version": "25.06"},
        "/redfish/v1/Fabrics": _coll("/redfish/v1/Fabrics/NVLink"),
        "/redfish/v1/Fabrics/NVLink": {"Switches": {"@odata.id": "/redfish/v1/Fabrics/"
                                                                 "NVLink/Switches"}},
        "/redfish/v1/Fabrics/NVLink/Switches": _coll(sw),
        sw: {"Id": "NVSwitch_0", "FirmwareVersion": firmware,
             "Status": {"State": "Enabled", "Health": "OK"},
             "Ports": {"@odata.id": f"{sw}/Ports"}},
        f"{sw}/Ports": _coll(*ports),
    }
    for k, p in enumerate(ports):
        tree[p] = {"Id": p.rsplit("/", 1)[-1], "PortProtocol": "NVLink",
                   "LinkStatus": port_link if k == 2 else "LinkUp", "CurrentSpeedGbps": 400,
                   "Status": {"State": "Enabled", "Health": "OK"}}
    return tree


def comp(kind: str, name: str, *samples: dict[str, Any] | None,
         errors: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"kind": kind, "name": name, "address": f"10.0.5.{len(name)}",
            "samples": list(samples), "errors": list(errors)}


RACK = {"name": "rack-a1", "kind": "GB200-NVL72", "gpus": 72, "imex": True, "samples": 3,
        "trays": [f"tray{i:02d}" for i in range(18)], "firmware": {}}


# --- readers on the real mockups ----------------------------------------------------------

def test_the_real_cooling_unit_is_read_with_its_sensor_thresholds() -> None:
    u = infra.cdu(cdu_tree())["units"][0]
    assert (u["serial"], u["firmware"], u["health"]) == ("29347ZT536", "3.2.0", "Warning")
    assert [d["state"] for d in u["leaks"]] == ["OK", "OK"]
    by = {r["key"]: r for r in u["readings"]}
    assert by["1.supply_pressure_kpa"]["value"] == 827.0
    assert by["1.supply_pressure_kpa"]["thresholds"] == {"upper_critical": 1380.0,
                                                        "upper_caution": 1240.0}
    assert by["1.flow_lpm"]["value"] == 42.0 and by["1.flow_lpm"]["thresholds"] == {}
    assert by["1.supply_temp_c"]["value"] == 30.0  # no sensor fetched: the connector's own


def test_the_real_cooling_unit_fails_naming_its_failed_pump() -> None:
    s = infra.cdu(cdu_tree())
    r = judge_cooling(RACK, [comp("cdu", "cdu-01", s, s, s)])
    assert r is not None and r.verdict == Verdict.FAIL
    assert "CDU cdu-01: Pump '2' has failed." in r.findings
    healthy = infra.cdu(healthy_cdu_tree())
    ok = judge_cooling(RACK, [comp("cdu", "cdu-01", healthy, healthy, healthy)])
    assert ok is not None and ok.verdict == Verdict.PASS, ok.findings
    assert ok.summary.startswith("no leak; CDU healthy")


def test_a_leak_in_any_sample_fails_naming_the_detector() -> None:
    leak = copy.deepcopy(_real("cooling-unit-cdu1-leakdetection-summary"))
    leak["LeakDetectorGroups"][0]["Detectors"][1]["DetectorState"] = "Critical"
    good = infra.cdu(healthy_cdu_tree())
    bad = infra.cdu(cdu_tree(**{f"{CDU}/1": healthy_cdu_tree()[f"{CDU}/1"],
                                f"{CDU}/1/LeakDetection": leak}))
    r = judge_cooling(RACK, [comp("cdu", "cdu-01", good, bad, good)])
    assert r is not None and r.verdict == Verdict.FAIL
    assert r.summary == "CDU cdu-01: LEAK detected by Fluid Level Overflow (Critical)"


def _detectors_tree(**members: dict[str, Any]) -> infra.Tree:
    """The healthy unit whose LeakDetection also links its LeakDetectors collection (the
    mockup's summary with the link a service adds beside its groups), with `members`."""
    summary = copy.deepcopy(_real("cooling-unit-cdu1-leakdetection-summary"))
    coll = f"{CDU}/1/LeakDetection/LeakDetectors"
    summary["LeakDetectors"] = {"@odata.id": coll}
    tree = healthy_cdu_tree()
    tree[f"{CDU}/1/LeakDetection"] = summary
    tree[coll] = _coll(*(f"{coll}/{k}" for k in members))
    tree.update({f"{coll}/{k}": v for k, v in members.items()})
    return tree


def test_each_leak_detector_is_read_with_its_type_and_state() -> None:
    """The detectors the LeakDetectors collection lists, each with its type and state; a
    group entry no member stands for is kept too (by name, once)."""
    moisture = _real("cooling-unit-cdu1-leakdetector-moisture")
    u = infra.cdu(_detectors_tree(Moisture=moisture))["units"][0]
    assert [(d["name"], d["type"], d["state"]) for d in u["leaks"]] == [
        ("Moisture Leak Detector", "Moisture", "OK"), ("Fluid Level Overflow", None, "OK")]
    ok = infra.cdu(_detectors_tree(Moisture=moisture))
    assert judge_cooling(RACK, [comp("cdu", "c", ok)]).verdict is Verdict.PASS  # type: ignore[union-attr]
    wet = {**moisture, "DetectorState": "Critical"}
    r = judge_cooling(RACK, [comp("cdu", "c", infra.cdu(_detectors_tree(Moisture=wet)))])
    assert r is not None and r.verdict is Verdict.FAIL
    assert "CDU c: LEAK detected by Moisture Leak Detector (Critical)" in r.findings
    off = {**moisture, "Status": {"State": "Disabled", "Health": "OK"}}
    r = judge_cooling(RACK, [comp("cdu", "c", infra.cdu(_detectors_tree(Moisture=off)))])
    assert r is not None and r.verdict is Verdict.WARN
    assert "CDU c: leak detector Moisture Leak Detector (Moisture) is Disabled: it watches " \
        "nothing" in r.findings
    sick = {**_example("dsp2046-example-leakdetector-moisture"),
            "Status": {"State": "Enabled", "Health": "Critical"}}
    r = judge_cooling(RACK, [comp("cdu", "c", infra.cdu(_detectors_tree(Moisture=sick)))])
    assert r is not None and r.verdict is Verdict.FAIL
    assert any("leak detector Moisture-type Leak Detector (Moisture) health Critical" in f
               for f in r.findings)


PDUS = "/redfish/v1/PowerEquipment/RackPDUs"


def pdu_tree(**circuit: Any) -> infra.Tree:
    """DMTF's rack PDU example with one mains circuit (DMTF's circuit example)."""
    return {PDUS: _coll(f"{PDUS}/1"),
            f"{PDUS}/1": _example("dsp2046-example-powerdistribution-rackpdu"),
            f"{PDUS}/1/Mains": _coll(f"{PDUS}/1/Mains/A"),
            f"{PDUS}/1/Mains/A": {**_example("dsp2046-example-circuit-branch-a"), **circuit}}


def test_a_rack_pdu_and_its_mains_are_read_and_judged() -> None:
    from nodecert.rack.gather import walk_rack_pdu
    tree = pdu_tree()
    walked = walk_rack_pdu(tree.__getitem__)
    assert set(walked) == set(tree)
    s = infra.rack_pdu(walked)
    assert s == {"pdus": [{"id": "1", "serial": "29347ZT536", "firmware": "4.3.0",
                           "health": "OK", "state": "Enabled", "health_rollup": None,
                           "conditions": [], "mains": [{"id": "A", "breaker": "Normal",
                                                        "health": "OK",
                                                        "state": "Enabled"}]}]}
    r = judge_power(RACK, [comp("rack_pdu", "pdu-01", s)])
    assert r is not None and r.verdict is Verdict.PASS, r.findings
    assert "1 rack PDU endpoint(s) healthy, 1 mains circuits closed" in r.summary
    tripped = infra.rack_pdu(pdu_tree(BreakerState="Tripped"))
    r = judge_power(RACK, [comp("rack_pdu", "pdu-01", tripped)])
    assert r is not None and r.verdict is Verdict.FAIL
    assert r.findings == ("rack PDU pdu-01 mains A: breaker Tripped",)
    unread = judge_power(RACK, [comp("rack_pdu", "pdu-01", None, errors=["timed out"])])
    assert unread is not None and unread.verdict is Verdict.FAIL
    assert "rack pdu pdu-01" in unread.summary and "timed out" in unread.summary


def _pressure(kpa: float) -> dict[str, Any]:
    sensor = copy.deepcopy(_real("cooling-unit-chassis-cdu-sensor-primarysupplypressure"))
    sensor["Reading"] = kpa
    tree = healthy_cdu_tree()
    tree["/redfish/v1/Chassis/CDU/Sensors/PrimarySupplyPressure"] = sensor
    return infra.cdu(tree)


def test_a_limit_counts_only_when_every_consecutive_sample_holds_it() -> None:
    held = judge_cooling(RACK, [comp("cdu", "c", _pressure(1400), _pressure(1450),
                                     _pressure(1390))])
    assert held is not None and held.verdict == Verdict.FAIL
    assert held.summary == ("CDU c Main supply from facility: supply pressure 1400, 1450, "
                            "1390 kPa over 3 samples (upper caution 1240, upper critical "
                            "1380): beyond its critical threshold in every sample")
    spike = judge_cooling(RACK, [comp("cdu", "c", _pressure(830), _pressure(1450),
                                      _pressure(828))])
    assert spike is not None and spike.verdict == Verdict.WARN
    assert "in some samples only (transient)" in spike.summary
    assert sustained([None, None], {"upper_critical": 1.0}) == (0, 0, "")
    assert sustained([5.0, None, 6.0], {"upper_critical": 4.0})[:2] == (2, 2)


def test_a_cdu_without_leak_detectors_or_readings_is_not_called_leak_free() -> None:
    tree = healthy_cdu_tree()
    del tree[f"{CDU}/1/LeakDetection"], tree[f"{CDU}/1/PrimaryCoolantConnectors"]
    s = infra.cdu(tree)
    r = judge_cooling(RACK, [comp("cdu", "cdu-01", s)])
    assert r is not None and r.verdict == Verdict.WARN
    assert "reports no leak detector: leaks were not checked" in r.summary
    assert any("no coolant readings" in f for f in r.findings)


def test_the_real_power_shelf_passes_and_a_failed_supply_is_named() -> None:
    s = infra.power_shelf(shelf_tree())
    shelf = s["shelves"][0]
    assert (shelf["firmware"], shelf["supplies"][0]["id"], shelf["redundancy"][0]["type"]) == \
        ("1.2.1", "Bay1", "NPlusM")
    r = judge_power(RACK, [comp("power_shelf", "ps-01", s)])
    assert r is not None and r.verdict == Verdict.PASS, r.findings
    bay = copy.deepcopy(_real("power-shelf-powersupply-bay1"))
    bay["Status"]["Health"], bay["LineInputStatus"] = "Critical", "LossOfInput"
    bad = infra.power_shelf(shelf_tree(**{"/redfish/v1/Chassis/PowerShelf/PowerSubsystem/"
                                          "PowerSupplies/Bay1": bay}))
    r = judge_power(RACK, [comp("power_shelf", "ps-01", bad),
                           comp("power_shelf", "ps-02", s)])
    assert r is not None and r.verdict == Verdict.FAIL
    assert r.findings == ("power shelf ps-01 supply Bay1: health Critical",
                          "power shelf ps-01 supply Bay1: input LossOfInput")


def test_a_shelf_or_switch_tray_that_cannot_be_read_fails_naming_it() -> None:
    down = comp("power_shelf", "ps-02", None, errors=("BMC redfish 10.0.5.5:443 "
                                                      "unreachable: ConnectionRefusedError",))
    r = judge_power(RACK, [down])
    assert r is not None and r.verdict == Verdict.FAIL
    assert r.summary.startswith("power shelf ps-02 (10.0.5.5) cannot be read: BMC redfish")
    sw = judge_switch_trays(RACK, [comp("switch_tray", "nvsw-03", None, errors=("timed out",))])
    assert sw is not None and sw.summary == ("switch tray nvsw-03 (10.0.5.7) cannot be read: "
                                             "timed out")
    assert judge_power({**RACK, "power_shelves": []}, []) is None  # not judged, not passed


def test_a_switch_port_down_is_named() -> None:
    ok = judge_switch_trays(RACK, [comp("switch_tray", "nvsw-01",
                                        infra.switch_tray(switch_tree()))])
    assert ok is not None and ok.verdict == Verdict.PASS
    assert ok.summary == "1 switch trays healthy, 4/4 NVLink ports up"
    bad = judge_switch_trays(RACK, [comp("switch_tray", "nvsw-01",
                                         infra.switch_tray(switch_tree("LinkDown")))])
    assert bad is not None and bad.verdict == Verdict.FAIL
    assert bad.findings == ("switch tray nvsw-01 switch NVSwitch_0 port acp3: link LinkDown",)


def test_a_document_that_is_not_a_collection_is_refused() -> None:
    with pytest.raises(infra.InfraError, match="is not a Redfish collection"):
        infra.cdu({CDU: {"Members": "all"}})
    with pytest.raises(infra.InfraError, match=r"without an @odata\.id"):
        infra.cdu({CDU: {"Members": [{"@odata.id": "http://elsewhere/x"}]}})


_JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.text(max_size=5)
                     | st.integers(), lambda c: st.lists(c, max_size=3)
                     | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(healthy_cdu_tree())), field=st.text(max_size=12),
       value=_JSON)
def test_a_mangled_document_is_refused_or_read_without_inventing_health(
        key: str, field: str, value: Any) -> None:
    tree = copy.deepcopy(healthy_cdu_tree())
    doc = tree[key]
    target = field if field in doc else next(iter(doc))
    doc[target] = value
    try:
        s = infra.cdu(tree)
    except infra.InfraError:
        return
    for u in s["units"]:
        for r in u["readings"]:
            assert r["value"] is None or isinstance(r["value"], float)
    r = judge_cooling(RACK, [comp("cdu", "c", s)])
    if r is not None and r.verdict == Verdict.PASS:  # only when everything was reported
        u = s["units"][0]
        assert u["leaks"] and u["readings"] and u["health"] == "OK"


# --- rules across the trays -----------------------------------------------------------------

def _fabric(clique: str = "2", cluster: str = "c0ffee00-0000-0000-0000-000000000001"
            ) -> dict[str, Any]:
    return {"clique_id": clique, "cluster_uuid": cluster,
            "gpus": [{"fabric_clique_id": clique} for _ in range(4)]}


def test_every_tray_in_one_clique_passes_and_an_odd_tray_is_named() -> None:
    fabric = {t: _fabric() for t in RACK["trays"]}
    ok = judge_domain(RACK, fabric)
    assert ok.verdict == Verdict.PASS and ok.value["gpus"] == 72
    fabric["tray07"] = _fabric(clique="3")
    bad = judge_domain(RACK, fabric)
    assert bad.verdict == Verdict.FAIL
    assert bad.findings == ("tray tray07: in clique 3 of cluster c0ffee00-0000-0000-0000-"
                            "000000000001; the rack's other 17 trays are in clique 2 of "
                            "cluster c0ffee00-0000-0000-0000-000000000001",)
    half = {t: _fabric(clique="2" if i < 9 else "5") for i, t in enumerate(RACK["trays"])}
    split = judge_domain(RACK, half)
    assert split.verdict == Verdict.FAIL and "split evenly" in split.summary
    short = judge_domain({**RACK, "gpus": 72}, {t: _fabric() for t in RACK["trays"][:17]})
    assert short.verdict == Verdict.FAIL and "tray17: no NVLink clique reported" in \
        short.findings[0]
    assert judge_domain(RACK, {}).verdict == Verdict.ERROR


def test_a_tray_not_measured_leaves_the_rack_unproven() -> None:
    res = [{"check": c, "verdict": "PASS", "summary": "ok"}
           for c in ("hardware.inventory", "domain.fabric", "domain.imex")]
    trays = {t: {"results": res} for t in RACK["trays"]}
    assert judge_trays(RACK, trays).verdict == Verdict.PASS
    trays["tray04"] = {"results": [*res[:2], {"check": "domain.imex", "verdict": "FAIL",
                                              "summary": "IMEX node #4 is DOWN"}]}
    r = judge_trays(RACK, trays)
    assert r.verdict == Verdict.FAIL and r.summary == ("tray tray04: domain.imex: IMEX node "
                                                       "#4 is DOWN")
    trays["tray09"] = {"error": "unreachable: connection refused"}
    r = judge_trays(RACK, trays)
    assert r.verdict == Verdict.ERROR and r.summary.startswith("tray tray09: not measured")
    no_imex = judge_trays({**RACK, "imex": False},
                          {t: {"results": res[:2]} for t in RACK["trays"]})
    assert no_imex.verdict == Verdict.PASS  # an IMEX check is never asked of it


def _inv(driver: str = "580.95.05", vbios: str = "97.00.9A.00.01") -> dict[str, Any]:
    return {"driver": driver, "gpus": [{"bus_id": f"0000:0{i}:00.0", "vbios": vbios}
                                       for i in range(4)]}


def test_firmware_odd_one_out_and_recipe() -> None:
    trays = {t: _inv() for t in RACK["trays"][:4]}
    sw = [comp("switch_tray", f"nvsw-0{i}", infra.switch_tray(switch_tree())) for i in (1, 2)]
    ok = judge_firmware(RACK, firmware_table(trays, sw))
    assert ok.verdict == Verdict.PASS, ok.findings
    trays["tray02"] = _inv(vbios="97.00.88.00.01")
    sw[1] = comp("switch_tray", "nvsw-02", infra.switch_tray(switch_tree(firmware="1.2.9")))
    bad = judge_firmware(RACK, firmware_table(trays, sw))
    assert bad.verdict == Verdict.FAIL
    assert "tray tray02 GPU 0000:00:00.0: gpu_vbios 97.00.88.00.01; the rest of the domain " \
           "(12) runs 97.00.9A.00.01" in bad.findings
    assert any(f.startswith("switch_tray: the domain runs 2 versions") for f in bad.findings)
    recipe = judge_firmware({**RACK, "firmware": {"driver": "580.105.08", "cdu": "3.2.0"}},
                            firmware_table({t: _inv() for t in RACK["trays"][:2]}, []))
    assert recipe.findings == (
        "tray tray00: driver 580.95.05, the rack's recipe says 580.105.08",
        "tray tray01: driver 580.95.05, the rack's recipe says 580.105.08",
        "cdu: the recipe names 3.2.0 but nothing in the rack reported it")
    blank = firmware_table({"tray00": {"driver": None, "gpus": []}}, [])
    r = judge_firmware({**RACK, "firmware": {"driver": "580.95.05"}}, blank)
    assert r.verdict == Verdict.FAIL and "cannot be shown to be the recipe's" in r.summary
