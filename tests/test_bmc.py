"""The BMC checks on the CPU: the Redfish and ipmitool parsers on real BMC output (and
variants), the judges, the order spec's BMC settings, and the Redfish client's TLS rules
against a local HTTPS server."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert.bmc.judge import event_rules, judge_inventory, judge_power, judge_sel, judge_sensors
from nodecert.inventory.bmc import parse_bmc
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse import ipmitool as ipmi
from nodecert_node.parse import redfish as rf
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real"
LIMITS = Limits({"bmc.power_capacity_fraction_max": {
    "value": 0.9, "op": "<=", "unit": "ratio", "origin": "common", "source": "BMCPSU"}})


def _json(name: str) -> Any:
    return json.loads((REAL / "redfish" / name).read_text())


def _text(name: str) -> str:
    return (REAL / "ipmitool" / name).read_text()


# --- Redfish parsers on real BMCs ------------------------------------------------------------

def test_hpe_thermal_keeps_absent_sensors_without_a_reading() -> None:
    sensors = rf.parse_thermal(_json("hpe-ilo5-proliant-dl360-gen10-plus-chassis-thermal.json"))
    inlet = next(s for s in sensors if s["name"] == "01-Inlet Ambient")
    assert (inlet["reading"], inlet["upper_critical"], inlet["upper_fatal"]) == (23, 42, 47)
    absent = next(s for s in sensors if s["name"] == "04-P1 DIMM 1-8")
    assert absent["state"] == "Absent" and absent["reading"] is None  # not 0 C
    fans = [s for s in sensors if s["kind"] == "fan"]
    assert len(fans) == 7 and fans[0]["unit"] == "%" and fans[0]["reading"] == 16
    res = judge_sensors(sensors)
    assert res.verdict is Verdict.PASS, res.findings
    assert "hottest" in res.summary


def test_dell_power_supplies_redundancy_and_draw() -> None:
    power = rf.parse_power(_json("dell-idrac9-poweredge-r650-chassis-power.json"))
    assert power["consumed_w"] == 396
    assert [(p["name"], p["capacity_w"], p["health"]) for p in power["psus"]] == [
        ("PS1 Status", 1400, "OK"), ("PS2 Status", 1400, "OK")]
    assert power["redundancy"][0]["mode"] == "N+m"
    assert len(power["voltages"]) == 48
    res = judge_power(power, [], spares=1, limits=LIMITS, loaded_checks=[])
    # one 1400 W supply left with one spare failed: 396 / 1400
    assert res.verdict is Verdict.PASS and res.value == pytest.approx(396 / 1400, abs=1e-3)
    assert "idle draw" in res.summary


def test_a_failed_supply_and_lost_redundancy_fail_with_the_supply_named() -> None:
    doc = copy.deepcopy(_json("dell-idrac9-poweredge-r650-chassis-power.json"))
    doc["PowerSupplies"][1]["Status"] = {"Health": "Critical", "State": "Enabled"}
    doc["Redundancy"][0]["Status"] = {"Health": "Critical", "State": "Enabled"}
    res = judge_power(rf.parse_power(doc), [], spares=1, limits=LIMITS, loaded_checks=[])
    assert res.verdict is Verdict.FAIL
    assert "PS2 Status failed" in res.summary
    assert any("redundancy Critical" in f for f in res.findings)
    # one healthy supply cannot keep a spare either
    assert any("cannot keep 1 spare" in f for f in res.findings)


def test_the_burn_in_peak_is_judged_against_capacity_with_spares_failed() -> None:
    power = rf.parse_power(_json("dell-idrac9-poweredge-r650-chassis-power.json"))
    samples = [{"t": 1.0, "power_w": 900.0, "check": "load.gemm"},
               {"t": 2.0, "power_w": 1330.0, "check": "load.gemm"}]
    res = judge_power(power, samples, spares=1, limits=LIMITS, loaded_checks=["load.gemm"])
    assert res.verdict is Verdict.FAIL
    assert "peak draw 1330 W is 95% of the 1400 W" in res.summary
    assert "needs <= 0.9 ratio, measured 0.95" in res.summary
    ok = judge_power(power, samples, spares=0, limits=LIMITS, loaded_checks=["load.gemm"])
    assert ok.verdict is Verdict.PASS and "during load.gemm" in ok.summary


def test_cisco_sel_without_severity_is_classed_by_its_text() -> None:
    entries = rf.parse_log_entries(_json("cisco-ucs-s3260-bmc1-sel-entries-collection.json"))
    assert entries and all(e["severity"] is None for e in entries)
    first = entries[0]
    assert first["created"] == "2022-06-13 12:19:21"  # the vendor's trailing space gone
    assert first["time"] == pytest.approx(1655122761.0)
    res = judge_sel(entries, since=None, since_what="", rules=event_rules())
    assert res.verdict in (Verdict.PASS, Verdict.WARN, Verdict.FAIL)
    critical = [e for e in entries if event_rules().classify(e)[0] == "critical"]
    assert (res.verdict is Verdict.FAIL) == bool(critical)


def test_redfish_severity_wins_and_old_entries_do_not_fail() -> None:
    doc = {"@odata.type": "#LogEntryCollection.LogEntryCollection", "Members": [
        {"Id": "1", "Created": "2026-11-30T10:00:00+00:00", "Severity": "Critical",
         "Message": "PSU 2 input lost", "EntryType": "SEL"},
        {"Id": "2", "Created": "2026-11-30T12:00:00Z", "Severity": "OK",
         "Message": "Lower Critical going low (recovered)"},
        {"Id": "3", "Created": "2026-11-30T14:00:00-02:00", "Severity": "Warning",
         "Message": "Correctable ECC"}]}
    entries = rf.parse_log_entries(doc)
    assert entries[2]["time"] == pytest.approx(entries[0]["time"] + 6 * 3600)
    rules = event_rules()
    res = judge_sel(entries, since=None, since_what="", rules=rules)
    assert res.verdict is Verdict.FAIL and "#1 " in res.summary and "PSU 2 input lost" in \
        res.summary
    later = judge_sel(entries, since=entries[0]["time"] + 1, since_what="the last "
                      "certification (run x)", rules=rules)
    assert later.verdict is Verdict.WARN
    assert "1 older entry before the last certification" not in later.summary  # WARN path
    assert later.findings == ("warning event since the last certification (run x): #3 "
                              "2026-11-30T14:00:00-02:00 | Correctable ECC",)


def test_a_document_of_another_kind_is_refused() -> None:
    with pytest.raises(ParseError, match="not a Thermal"):
        rf.parse_thermal(_json("dell-idrac9-poweredge-r650-chassis-power.json"))
    with pytest.raises(ParseError, match="Members is not a list"):
        rf.parse_log_entries({"@odata.type": "#LogEntryCollection.LogEntryCollection",
                              "Members": {"1": {}}})
    with pytest.raises(ParseError, match="no FirmwareVersion"):
        rf.parse_manager({"@odata.type": "#Manager.v1_10_0.Manager"})


@given(st.sampled_from(["2026-01-02T03:04:05Z", "2026-01-02 03:04:05 ", "2026-01-02T03:04:05",
                        "2026-01-02T05:04:05+02:00", "2026-01-02T03:04:05.123Z",
                        "2026-01-01T22:04:05-0500"]))
def test_redfish_time_forms_are_one_instant(text: str) -> None:
    when, _ = rf.parse_time(text)
    assert when == 1767323045.0


@given(st.text(max_size=30))
def test_unreadable_times_are_none_never_a_wrong_instant(text: str) -> None:
    when, _ = rf.parse_time(text)
    assert when is None or rf.parse_time(text.strip())[0] == when


# --- ipmitool ------------------------------------------------------------------------------

def _row(name: str, reading: str, unit: str, status: str, *limits: str) -> str:
    """A row as `ipmitool sensor` lays it out (fixed-width cells, trailing spaces kept)."""
    return (f"{name:<17}| {reading:<11}| {unit:<11}| {status:<6}| "
            + " | ".join(f"{x:<10}" for x in limits) + " ")


NA = ("na",) * 3
SENSOR = "\n".join([
    _row("Inlet Temp", "25.000", "degrees C", "ok", *NA, "38.000", "42.000", "45.000"),
    _row("GPU Zone Temp", "88.000", "degrees C", "cr", *NA, "80.000", "85.000", "90.000"),
    _row("FAN3", "0.000", "RPM", "cr", "0.000", "500.000", "700.000", *NA),
    _row("P12V", "12.100", "Volts", "ok", "10.200", "10.800", "11.400", "12.600", "13.200",
         "13.800"),
    _row("Total Power", "6420.000", "Watts", "ok", *NA, *NA),
    _row("PS1 Status", "0x1", "discrete", "0x0100", *NA, *NA),
    _row("CPU2 Temp", "na", "degrees C", "na", *NA, "85.000", "90.000", "95.000")]) + "\n"


def test_ipmitool_sensor_rows_and_the_judge() -> None:
    sensors = ipmi.parse_sensor(SENSOR)
    by = {s["name"]: s for s in sensors}
    assert by["GPU Zone Temp"]["upper_critical"] == 85 and by["GPU Zone Temp"]["health"] == \
        "Critical"
    assert by["FAN3"]["lower_critical"] == 500 and by["FAN3"]["lower_fatal"] == 0
    assert by["Total Power"]["kind"] == "power" and by["PS1 Status"]["reading"] is None
    assert by["CPU2 Temp"]["state"] == "Absent"
    res = judge_sensors(sensors)
    assert res.verdict is Verdict.FAIL
    assert "GPU Zone Temp 88 C >= upper critical 85 C" in res.findings
    assert "FAN3 0 RPM <= lower critical 500 RPM" in res.findings
    assert res.value == 4  # inlet, GPU zone, fan, 12 V: the absent CPU2 is not judged


def test_a_sensor_row_with_cells_missing_is_refused_not_shifted() -> None:
    with pytest.raises(ParseError, match="line 1: 6 cells"):
        ipmi.parse_sensor("FAN1 | 3000 | RPM | ok | na | na\n")
    with pytest.raises(ParseError, match="not a number"):
        ipmi.parse_sensor("FAN1 | 3000 | RPM | ok | na | x | na | na | na | na\n")
    for odd in ("nan", "inf", "-Infinity"):  # float() reads them; no sensor does
        with pytest.raises(ParseError, match="not a finite reading"):
            ipmi.parse_sensor(f"FAN1 | {odd} | RPM | ok | na | na | na | na | na | na\n")


def test_real_sel_lists_in_both_time_formats() -> None:
    hp = ipmi.parse_sel(_text("hpe-proliant-gen8-sel-list-psu-failure-ac-lost-redundancy-"
                              "lost-EXCERPT.txt"))
    assert [e["id"] for e in hp][:3] == ["532", "533", "534"]
    assert hp[0]["time"] == pytest.approx(1692012337.0)  # 08/14/2023 11:25:37 (UTC)
    sm = ipmi.parse_sel(_text("supermicro-x10dru-sel-list-fan-lower-critical-non-"
                              "recoverable-chassis-intrusion-EXCERPT.txt"))
    fan = sm[0]
    assert (fan["sensor"], fan["message"], fan["direction"]) == (
        "Fan #0x41", "Lower Critical going low", "Asserted")
    assert fan["time"] == pytest.approx(1733540810.0)  # 12/06/2024 10:06:50 PM EST
    rules = event_rules()
    res = judge_sel(hp, since=None, since_what="", rules=rules)
    assert res.verdict is Verdict.FAIL and "Failure detected" in res.summary
    fans = judge_sel(sm, since=None, since_what="", rules=rules)
    assert fans.verdict is Verdict.FAIL
    assert sum("Deasserted" in f for f in fans.findings) == 0  # recoveries are not faults
    ecc = ipmi.parse_sel(_text("hp-proliant-dl360-sel-list-memory-correctable-ecc-limit.txt"))
    assert judge_sel(ecc, since=None, since_what="", rules=rules).verdict is Verdict.WARN


def test_ipmi_sim_pre_init_and_two_digit_years() -> None:
    text = ("   1 |  Pre-Init  |0000000402| Temperature Inlet Temp | Upper Critical going high "
            "| Asserted | Reading 88 > Threshold 85 degrees C\n"
            "   2 | 12/01/26 | 02:35:23 UTC | Temperature Inlet Temp | Upper Critical going "
            "high | Asserted | Reading 91 > Threshold 85 degrees C\n")
    rows = ipmi.parse_sel(text)
    assert rows[0]["time"] is None and "Pre-Init" in rows[0]["time_note"]
    assert rows[1]["time"] == pytest.approx(1796092523.0)
    assert rows[1]["detail"] == "Reading 91 > Threshold 85 degrees C"
    # since a certification: the dated old row is left out, the undated one is kept
    res = judge_sel(rows, since=rows[1]["time"] + 10, since_what="x", rules=event_rules())
    assert res.verdict is Verdict.FAIL and "Pre-Init" in res.summary


def test_an_ambiguous_zone_gives_no_time() -> None:
    when, note = ipmi.sel_time("12/06/2024", "10:06:50 PM IST")
    assert when is None and "ambiguous" in note


def test_mc_info_and_sdr_rows() -> None:
    info = ipmi.parse_mc_info("Device ID                 : 0\nFirmware Revision         : "
                              "1.49\nAdditional Device Support :\n    Sensor Device\n")
    assert info["Firmware Revision"] == "1.49"
    rows = ipmi.parse_sdr_elist("PS1 Status       | 0Ah | ok  | 10.1 | Presence detected\n"
                                "PS2 Status       | 0Bh | ok  | 10.2 | Presence detected, "
                                "Failure detected\n")
    assert rows[1]["states"] == ["Presence detected", "Failure detected"]
    with pytest.raises(ParseError):
        ipmi.parse_sdr_elist("PS1 Status | ok | Presence detected\n")


# --- inventory and the order spec ------------------------------------------------------------

def test_firmware_and_the_bmc_view_of_the_parts() -> None:
    os_gpus = [{"bus_id": f"0000:{i:02x}:00.0", "serial": f"S{i}"} for i in range(8)]
    bmc_gpus = [{"id": f"GPU_{i}", "serial": f"S{i}"} for i in range(7)]
    res = judge_inventory("1.18.2", ("1.20.0",), bmc_gpus=bmc_gpus, os_gpus=os_gpus,
                          bmc_nics=[{}] * 8, os_nics=8)
    assert res.verdict is Verdict.FAIL
    assert res.findings[:2] == ("BMC firmware 1.18.2, the site's golden version is 1.20.0",
                                "the BMC sees 7 GPUs, the OS 8")
    ok = judge_inventory("1.20.0", ("1.20.0",), bmc_gpus=[*bmc_gpus, {"serial": "S7"}],
                         os_gpus=os_gpus, bmc_nics=[{}] * 8, os_nics=8)
    assert ok.verdict is Verdict.PASS and "golden" in ok.summary


def test_the_bmc_spec_never_allows_unverified_tls() -> None:
    base = {"address": "10.10.0.21", "username": "nodecert", "password_file": "/x"}
    spec, why = parse_bmc(base)
    assert spec is None and "never talks to a BMC whose certificate it cannot verify" in str(why)
    spec, why = parse_bmc({**base, "cert_sha256": "AB:" * 31 + "CD"})
    assert why is None and spec is not None and spec["cert_sha256"] == "ab" * 31 + "cd"
    assert spec["port"] == 443 and spec["psu_spares"] == 1
    spec, why = parse_bmc({**base, "protocol": "ipmi"})
    assert why is None and spec is not None and spec["port"] == 623
    for bad, msg in (({**base, "protocol": "snmp"}, "not one of"),
                     ({**base, "cert_sha256": "xyz"}, "not a SHA-256"),
                     ({**base, "address": "a b"}, "not a host name"),
                     ({**base, "cert_sha256": "ab" * 32, "verify": False}, "unknown key")):
        assert parse_bmc(bad)[0] is None and msg in str(parse_bmc(bad)[1])


def test_the_inventory_refuses_a_plain_text_bmc_password(tmp_path: Path) -> None:
    from nodecert.inventory.reader import check_inventory

    inv = tmp_path / "lab.ini"
    inv.write_text(
        "[gpu]\nh1 ansible_host=10.0.0.1 nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 "
        "nodecert_cpu_cores=96 nodecert_ram_gb=2048 nodecert_nvme_count=4 "
        "nodecert_bmc_password=canary-7f3a\n")
    report = check_inventory(inv)
    assert not report.ok
    text = "\n".join(p.render() for p in report.problems)
    assert "nodecert_bmc_password is set in plain text" in text
    assert "canary-7f3a" not in text


def test_lab_bmcs_without_sushy_tools_name_the_lab_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import shutil

    from nodecert.core.errors import NodecertError
    from nodecert.lab import bmc as labbmc
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sushy_tools" else real(name, *a))
    with pytest.raises(NodecertError, match="sushy-tools") as e:
        labbmc.preflight()
    assert "nodecert[lab]" in (e.value.hint or "")
    # and the extra exists: the package's metadata offers it, with sushy-tools in it
    import re
    from importlib.metadata import metadata
    reqs = metadata("nodecert").get_all("Requires-Dist") or []
    assert any(r.startswith("sushy-tools") and re.search(r"extra == [\"']lab", r)
               for r in reqs), reqs


# Rows of `ipmitool sdr type "Power Supply"` as two servers print them (published in
# public bug reports and tools' test data): a supply's own states, its watts and
# power-good sensors, an absent supply (no state asserted) and the redundancy row in
# IPMI's generic redundancy states (ipmitool's ipmi_sel table, type 0Bh).
SDR_PSU_SUPERMICRO = """\
PSU1_STATUS      | 26h | ok  | 10.1 | Presence detected
PSU1_PWRGD       | 28h | ok  | 10.1 | State Asserted
PSU1_POUT        | 2Bh | ok  | 10.1 | 120 Watts
PSU2_STATUS      | 2Ch | ok  | 10.2 |
PSU2_PWRGD       | 2Eh | ns  | 10.2 | No Reading
PSU2_POUT        | 31h | ns  | 10.2 | No Reading
PS_RDNDNT_MODE   | ADh | ok  | 20.0 | Non-Redundant: Sufficient from Redundant
POWER_USAGE      | AEh | ok  |  7.0 | 128 Watts
"""
SDR_PSU_HP = """\
Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected
Power Supply 2   | 07h | ok  | 10.2 | 95 Watts, Presence detected
Power Supplies   | 08h | ok  | 10.3 | Fully Redundant
"""


def test_ipmi_power_supply_rows_are_supplies_redundancy_or_other_sensors() -> None:
    from nodecert.bmc.gather import ipmi_supplies
    psus, red = ipmi_supplies(ipmi.parse_sdr_elist(SDR_PSU_SUPERMICRO), 1600.0)
    assert [(p["name"], p["state"], p["health"]) for p in psus] == [
        ("PSU1_STATUS", "Enabled", "OK"), ("PSU2_STATUS", "Absent", "OK")]
    assert red == [{"name": "PS_RDNDNT_MODE", "mode": "Non-Redundant: Sufficient from Redundant",
                    "health": "Warning", "state": "Enabled"}]
    res = judge_power({"consumed_w": 128.0, "psus": psus, "redundancy": red}, [], spares=1,
                      limits=LIMITS, loaded_checks=[])
    assert res.verdict is Verdict.FAIL
    assert any("PS_RDNDNT_MODE: redundancy Warning" in f for f in res.findings), res.findings
    # HP: a supply row carries its watts beside its states; the group is fully redundant
    psus, red = ipmi_supplies(ipmi.parse_sdr_elist(SDR_PSU_HP), 460.0)
    assert [(p["name"], p["health"]) for p in psus] == [("Power Supply 1", "Critical"),
                                                       ("Power Supply 2", "OK")]
    assert [(r["name"], r["health"]) for r in red] == [("Power Supplies", "OK")]


# --- discrete states, chassis status, GPUs a BMC lists only as PCIe devices -----------------

# `ipmitool sdr elist` rows as the tool prints them (name | id | status | entity | states);
# the memory state is the one the real HP SEL capture asserts
# (hp-proliant-dl360-sel-list-memory-correctable-ecc-limit.txt).
SDR_DISCRETE = """\
Inlet Ambient    | 01h | ok  |  7.1 | 23 degrees C
Memory           | 2Bh | ok  | 32.1 | Correctable ECC logging limit reached
Drive 0          | 60h | ok  |  4.1 | Drive Present
CPU Fail         | 68h | ok  |  3.1 | Device Absent
PS2 Status       | 0Bh | ok  | 10.2 | Presence detected, Failure detected
"""
CHASSIS_OK = """\
System Power         : on
Power Overload       : false
Power Interlock      : inactive
Main Power Fault     : false
Power Control Fault  : false
Power Restore Policy : always-off
Last Power Event     :
Chassis Intrusion    : inactive
Front-Panel Lockout  : inactive
Drive Fault          : false
Cooling/Fan Fault    : false
Sleep Button Disabled: false
"""


def _ok_sensors() -> list[dict[str, Any]]:
    return ipmi.parse_sensor(_row("Inlet Temp", "23.000", "degrees C", "ok", "na", "na",
                                  "na", "40.000", "45.000", "50.000"))


def test_discrete_states_asserted_now_are_judged() -> None:
    rows = ipmi.parse_sdr_elist(SDR_DISCRETE)
    res = judge_sensors(_ok_sensors(), discrete=rows, rules=event_rules())
    # The memory's logging limit warns; the supply is bmc.power's; a sensor's name
    # ("CPU Fail") is not an event.
    assert res.verdict is Verdict.WARN, res.findings
    assert res.findings == ("Memory: Correctable ECC logging limit reached (asserted now)",)
    assert res.facts["discrete_states"]["Memory"] == ["Correctable ECC logging limit reached"]
    ierr = ipmi.parse_sdr_elist(SDR_DISCRETE.replace("Device Absent", "IERR"))
    assert judge_sensors(_ok_sensors(), discrete=ierr, rules=event_rules()).verdict \
        is Verdict.FAIL
    # Without the discrete rows the same sensors pass: the states were what failed.
    assert judge_sensors(_ok_sensors()).verdict is Verdict.PASS


def test_chassis_status_faults_and_last_power_event() -> None:
    ok = ipmi.parse_chassis_status(CHASSIS_OK)
    assert ok["Cooling/Fan Fault"] == "false" and ok["Last Power Event"] == ""
    assert judge_sensors(_ok_sensors(), chassis=ok).verdict is Verdict.PASS
    fan = ipmi.parse_chassis_status(CHASSIS_OK.replace("Cooling/Fan Fault    : false",
                                                       "Cooling/Fan Fault    : true"))
    res = judge_sensors(_ok_sensors(), chassis=fan)
    assert res.verdict is Verdict.FAIL and res.findings == (
        "chassis status: Cooling/Fan Fault is set",)
    lost = ipmi.parse_chassis_status(CHASSIS_OK.replace("Last Power Event     :",
                                                        "Last Power Event     : ac-failed"))
    res = judge_sensors(_ok_sensors(), chassis=lost)
    assert res.verdict is Verdict.WARN
    assert res.findings == ("chassis status: the last power event was ac-failed",)
    with pytest.raises(ParseError, match="no 'System Power' line"):
        ipmi.parse_chassis_status("Power Overload       : false\n")
    with pytest.raises(ParseError, match="line 1: expected 'Key : value'"):
        ipmi.parse_chassis_status("Chassis Power is on\n")


class _Docs:
    """A Redfish service as a dict of documents (what RedfishClient.get returns)."""

    def __init__(self, docs: dict[str, Any]) -> None:
        self.docs = docs

    def get(self, path: str) -> Any:
        return self.docs[path]


def _pcie(n: int, maker: str, model: str, serial: str) -> dict[str, Any]:
    return {"@odata.type": "#PCIeDevice.v1_9_0.PCIeDevice", "Id": f"0-{n}",
            "Manufacturer": maker, "Model": model, "SerialNumber": serial,
            "Status": {"State": "Enabled", "Health": "OK"}}


@pytest.mark.parametrize("collection", [False, True])
def test_gpus_listed_only_as_pcie_devices_are_compared(collection: bool) -> None:
    from nodecert.bmc.gather import RedfishSource
    sysp = "/redfish/v1/Systems/1"
    links = [{"@odata.id": f"{sysp}/PCIeDevices/0-{n}"} for n in range(3)]
    docs: dict[str, Any] = {
        f"{sysp}/Processors": {"Members": [{"@odata.id": f"{sysp}/Processors/CPU.1"}]},
        f"{sysp}/Processors/CPU.1": {"@odata.type": "#Processor.v1_7_0.Processor", "Id": "CPU.1",
                                     "ProcessorType": "CPU", "Model": "Xeon"},
        f"{sysp}/PCIeDevices/0-0": _pcie(0, "NVIDIA Corporation", "NVIDIA H100 80GB HBM3",
                                         "1654922004567"),
        f"{sysp}/PCIeDevices/0-1": _pcie(1, "Mellanox Technologies",
                                         "ConnectX-7 NDR 400Gb/s", "MT2245X"),
        f"{sysp}/PCIeDevices/0-2": _pcie(2, "NVIDIA", "NVIDIA BlueField-3 DPU", "MT2301"),
    }
    system: dict[str, Any] = {"Processors": {"@odata.id": f"{sysp}/Processors"}}
    if collection:
        system["PCIeDevices"] = {"@odata.id": f"{sysp}/PCIeDevices"}
        docs[f"{sysp}/PCIeDevices"] = {"Members": links}
    else:
        system["PCIeDevices"] = links  # the older schema: an array of links on the system
    docs[sysp] = system
    src = RedfishSource.__new__(RedfishSource)
    src.client = _Docs(docs)  # type: ignore[assignment]
    gpus = src._gpus(sysp)
    assert gpus is not None and [(g["model"], g["serial"]) for g in gpus] == [
        ("NVIDIA H100 80GB HBM3", "1654922004567")]
    os_gpus = [{"serial": "1654922004567"}, {"serial": "1654922004999"}]
    res = judge_inventory("1.0", (), bmc_gpus=gpus, os_gpus=os_gpus, bmc_nics=None,
                          os_nics=None)
    assert res.verdict is Verdict.FAIL and "the BMC sees 1 GPUs, the OS 2" in res.findings


def test_gpus_are_known_by_their_pci_ids_first_and_their_name_last() -> None:
    """A device whose only NVIDIA marker is its Name (Cisco's CIMC: no Manufacturer, no
    Model) is a GPU; a device whose functions carry vendor 0x10de with a 3D controller
    class is a GPU whatever its names say, and one whose function is NVIDIA's network
    class is not, though its Manufacturer says NVIDIA."""
    from nodecert.bmc.gather import RedfishSource
    sysp = "/redfish/v1/Chassis/1"
    cisco = {"@odata.type": "#PCIeDevice.v1_3_0.PCIeDevice", "Id": "GPU-3",
             "Name": "NVIDIA Tesla T4", "SerialNumber": "1321720012345",
             "Status": {"State": "Enabled", "Health": "OK"}}
    odd_name = {**_pcie(4, "", "", "1654922009999"), "Name": "Slot 4 device",
                "PCIeFunctions": {"@odata.id": f"{sysp}/PCIeDevices/0-4/PCIeFunctions"}}
    dpu = {**_pcie(5, "NVIDIA", "BlueField-3 SmartNIC", "MT2301"),
           "Links": {"PCIeFunctions": [{"@odata.id": f"{sysp}/PCIeDevices/0-5/F/0"}]}}
    docs: dict[str, Any] = {
        f"{sysp}/PCIeDevices/GPU-3": cisco, f"{sysp}/PCIeDevices/0-4": odd_name,
        f"{sysp}/PCIeDevices/0-5": dpu,
        f"{sysp}/PCIeDevices/0-4/PCIeFunctions": {
            "Members": [{"@odata.id": f"{sysp}/PCIeDevices/0-4/PCIeFunctions/0"}]},
        f"{sysp}/PCIeDevices/0-4/PCIeFunctions/0": {
            "@odata.type": "#PCIeFunction.v1_2_0.PCIeFunction", "VendorId": "0x10DE",
            "DeviceId": "0x2330", "ClassCode": "0x030200", "DeviceClass": "DisplayController"},
        f"{sysp}/PCIeDevices/0-5/F/0": {
            "@odata.type": "#PCIeFunction.v1_2_0.PCIeFunction", "VendorId": "0x15B3",
            "DeviceId": "0xA2DC", "ClassCode": "0x020000", "DeviceClass": "NetworkController"},
    }
    system = {"PCIeDevices": [{"@odata.id": link} for link in (
        f"{sysp}/PCIeDevices/GPU-3", f"{sysp}/PCIeDevices/0-4", f"{sysp}/PCIeDevices/0-5")]}
    src = RedfishSource.__new__(RedfishSource)
    src.client = _Docs(docs)  # type: ignore[assignment]
    gpus = src._pcie_gpus(system)
    assert [(g["id"], g["gpu_by"], g["model"]) for g in gpus] == [
        ("GPU-3", "name", "NVIDIA Tesla T4"), ("0-4", "PCI ids", "")]


def test_a_servers_own_coolant_connectors_are_its_sensors() -> None:
    """A liquid-cooled server's BMC: its chassis's ThermalSubsystem lists coolant
    connectors (DMTF's example), their readings judged against the thresholds of the
    Sensor each reading names (DMTF's mockup sensor); the connector's own health too."""
    from nodecert.bmc.gather import RedfishSource
    rack = Path(__file__).parent / "fixtures" / "real" / "redfish-rack"
    conn = json.loads((rack / "dsp2046-example-coolantconnector-a.json").read_text())
    sensor = json.loads((rack / "dmtf-mockup-public-cooling-unit-chassis-cdu-sensor-"
                                "primarysupplypressure.json").read_text())
    src_uri = sensor["@odata.id"]
    conn["SupplyPressurekPa"] = {**conn["SupplyPressurekPa"], "DataSourceUri": src_uri}
    ch = "/redfish/v1/Chassis/1"

    def read(connector: dict[str, Any], pressure: dict[str, Any]) -> list[dict[str, Any]]:
        docs = {ch: {"ThermalSubsystem": {"@odata.id": f"{ch}/ThermalSubsystem"}},
                f"{ch}/ThermalSubsystem": {"CoolantConnectors": {
                    "@odata.id": f"{ch}/ThermalSubsystem/CoolantConnectors"}},
                f"{ch}/ThermalSubsystem/CoolantConnectors": {"Members": [
                    {"@odata.id": f"{ch}/ThermalSubsystem/CoolantConnectors/A"}]},
                f"{ch}/ThermalSubsystem/CoolantConnectors/A": connector, src_uri: pressure}
        src = RedfishSource.__new__(RedfishSource)
        src.client = _Docs(docs)  # type: ignore[assignment]
        src.budget = type("B", (), {"check": lambda self, what: None})()  # type: ignore[attr-defined]
        return src._coolant(ch)

    got = read(conn, sensor)
    assert [(s["name"], s["reading"]) for s in got][:3] == [
        ("Rack Cooling Loop A (coolant connector)", None),
        ("Rack Cooling Loop A supply temperature", 14.8),
        ("Rack Cooling Loop A return temperature", 38.2)]
    pressure = next(s for s in got if s["name"].endswith("supply pressure"))
    assert (pressure["reading"], pressure["upper_critical"]) == (827.0, 1380.0)
    assert judge_sensors(got).verdict is Verdict.PASS
    over = read(conn, {**sensor, "Reading": 1400})
    r = judge_sensors(over)
    assert r.verdict is Verdict.FAIL
    assert "Rack Cooling Loop A supply pressure 1400 kPa >= upper critical 1380 kPa" in \
        r.findings
    sick = read({**conn, "Status": {"State": "Enabled", "Health": "Critical"}}, sensor)
    assert judge_sensors(sick).verdict is Verdict.FAIL
    # an air-cooled server: no ThermalSubsystem, no coolant sensors
    air = RedfishSource.__new__(RedfishSource)
    air.client = _Docs({ch: {}})  # type: ignore[assignment]
    air.budget = type("B", (), {"check": lambda self, what: None})()  # type: ignore[attr-defined]
    assert air._coolant(ch) == []


@pytest.mark.parametrize("offers_17", [True, False])
def test_ipmi_asks_for_cipher_suite_17_first_and_records_the_suite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offers_17: bool) -> None:
    """HMAC-SHA256/AES (17) where the BMC offers it; a BMC that refuses it is read with
    suite 3, and which one was used is said."""
    from nodecert.bmc.gather import IpmiSource
    from nodecert.inventory.bmc import BmcSpec
    from nodecert.transport.become import Secret
    log = tmp_path / "argv"
    tool = tmp_path / "bin" / "ipmitool"
    tool.parent.mkdir()
    refuse = "" if offers_17 else (
        'case " $* " in *" -C 17 "*) echo "Error in open session response message : '
        'no matching cipher suite" >&2; echo "Error: Unable to establish IPMI v2 / RMCP+ '
        'session" >&2; exit 1;; esac\n')
    tool.write_text(f'#!/bin/sh\necho "$*" >> {log}\n{refuse}'
                    'echo "Firmware Revision         : 1.01"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    src = IpmiSource(BmcSpec("h1", "10.0.0.9", "ipmi", 623, "admin", Secret("pw")))
    assert "1.01" in src._run("mc", "info")
    src._run("sensor")
    calls = log.read_text().splitlines()
    suites = [c.split(" -C ")[1].split()[0] for c in calls]
    if offers_17:
        assert suites == ["17", "17"] and src.cipher_note == "cipher suite 17"
    else:
        assert suites == ["17", "3", "3"]
        assert src.cipher_note.startswith("cipher suite 3: suite 17 refused")
        assert "RMCP+ session" in src.cipher_note
    assert all("pw" not in c.split() for c in calls)
