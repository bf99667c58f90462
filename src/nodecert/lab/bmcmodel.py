"""What a lab host's BMC reads: SIMULATED temperatures, fans, supplies and power that
follow the host's simulated GPUs (their load, from the host's load file) and the lab's
faults, rendered as a Redfish resource tree and as IPMI sensors.

The numbers are those of an 8-GPU HGX server: supplies and the system's own draw by GPU
count, GPU power and temperature from the lab profile (idle and full load), inlet and
fan thresholds as such BMCs set them.

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.lab.config import HOST_HARDWARE
from nodecert.lab.simhw.nodecert_simhw.faults import Faults
from nodecert.stack.bios import find_profile
from nodecert.stack.firmware import find_recipe

GOLDEN_FIRMWARE = "1.18"
USERNAME = "nodecert"
THERMAL_TAU_S = 20.0  # as the lab's GPUs heat up under load
# (count, watts each) by GPU count: HGX 8-GPU servers ship 6 x 3 kW (N+N or 4+2).
PSUS = {8: (6, 3000), 4: (4, 2700)}
BASE_W = {8: 1150.0, 4: 700.0}  # CPUs, memory, NICs, drives and fans at rest


# IPMI names have lower-case letters: sdrcomp writes an all-capitals name in 6-bit packed
# ASCII, which ipmitool does not decode.


@dataclass(frozen=True)
class Sensor:
    """One analog IPMI sensor: its number, name, unit, raw scale and thresholds
    (lnr, lc, lnc, unc, uc, unr; None where the BMC sets none)."""

    number: int
    name: str
    kind: str  # temperature | fan | voltage | power
    m: int
    r_exp: int
    thresholds: tuple[float | None, ...]


def ipmi_sensors(fans: int) -> list[Sensor]:
    out = [Sensor(1, "Inlet Temp", "temperature", 1, 0, (None, None, None, 38, 42, 45)),
           Sensor(2, "Exhaust Temp", "temperature", 1, 0, (None, None, None, 70, 75, 80)),
           Sensor(3, "GPU Zone Temp", "temperature", 1, 0, (None, None, None, 85, 90, 95)),
           Sensor(4, "Rail 12V", "voltage", 1, -1, (10.2, 10.8, 11.4, 12.6, 13.2, 13.8)),
           Sensor(5, "Total Power", "power", 40, 0, (None,) * 6)]
    out += [Sensor(16 + k, f"Fan {k + 1}", "fan", 100, 0, (300, 500, 700, None, None, None))
            for k in range(fans)]
    return out


def psu_sensor_number(k: int) -> int:
    return 48 + k


def _jitter(*key: Any, spread: float = 1.0) -> float:
    h = zlib.crc32(repr(key).encode()) / 0xFFFFFFFF
    return (h * 2 - 1) * spread


def read_state(path: Path) -> dict[str, Any]:
    """One of a BMC's own state files (a JSON object), or {} where there is none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Model:
    """One host's BMC model: its hardware description and load, read from the host's
    directory on this machine, and the BMC's own settings (BMC_DIR/bmc.json)."""

    def __init__(self, host_dir: Path, bmc_dir: Path) -> None:
        self.host_dir = host_dir
        self.bmc_dir = bmc_dir

    def hw(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.host_dir / HOST_HARDWARE).read_text())
        return data

    def busy(self, now: float) -> dict[int, float]:
        """GPU -> seconds under load (the lab's GPU tools write the host's load file)."""
        try:
            data = json.loads((self.host_dir / "run" / "load.json").read_text())
        except (OSError, ValueError):
            return {}
        return {int(k): now - float(v.get("start", now)) for k, v in data.items()
                if float(v.get("until", 0)) > now}

    def updated_firmware(self) -> dict[str, str]:
        """FirmwareInventory Id -> the version an update set (bmcupdate keeps them)."""
        return {str(k): str(v) for k, v in read_state(self.bmc_dir / "firmware.json").items()}

    def firmware(self) -> dict[str, dict[str, Any]]:
        return firmware_members(self.hw(), self.readings()["firmware"],
                                self.updated_firmware())

    def _json(self, name: str) -> dict[str, Any]:
        return read_state(self.bmc_dir / name)

    def bios(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the BIOS attributes now, those pending for the next reset): the profile's
        values, as faults change them, as a reset applied settings since."""
        hw = self.hw()
        name = hw["profile"].get("bios_profile")
        now: dict[str, Any] = {"LogicalProc": "Enabled", "ProcTurboMode": "Enabled",
                               "BootMode": "Uefi"}
        if name:
            now.update(find_profile(str(name)).attributes)
        now.update(Faults(hw).bios())
        now.update(self._json("bios.json"))
        return now, self._json("bios-pending.json")

    def settings(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.bmc_dir / "bmc.json").read_text())
        return data

    def readings(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        hw, cfg = self.hw(), self.settings()
        faults = Faults(hw)
        prof, g = hw["profile"], hw["profile"]["gpu"]
        count = int(prof["gpu_count"])
        missing = faults.missing_gpus()
        busy = self.busy(now)
        sec = int(now)
        gpus = []
        for i in range(count):
            if i in missing:
                continue
            load_s = busy.get(i)
            rise = 1 - math.exp(-load_s / THERMAL_TAU_S) if load_s is not None else 0.0
            temp = g["idle_temp_c"] + (g["load_temp_c"] - g["idle_temp_c"]) * rise
            power = (g["power_limit_w"] * 0.93 if load_s is not None else g["idle_power_w"])
            gpus.append({"index": i, "temp": round(temp + _jitter(i, sec, "t"), 1),
                         "power": power + _jitter(i, sec, "p", spread=3)})
        load = sum(1 for x in gpus if x["index"] in busy) / max(len(gpus), 1)
        inlet = 24.0 + _jitter(sec, "in", spread=0.4)
        if faults.bmc("temp_critical") is not None:
            inlet = 44.0
        n_psu, psu_w = PSUS.get(count, (2, 2000))
        draw = BASE_W.get(count, 500.0) + 250.0 * load + sum(x["power"] for x in gpus)
        failed = faults.bmc("psu_failed")
        bad_psu = int(failed.get("psu", 1)) if failed is not None else None
        healthy = [k for k in range(1, n_psu + 1) if k != bad_psu]
        psus = [{"n": k, "capacity_w": psu_w, "failed": k == bad_psu,
                 "input_w": 0.0 if k == bad_psu else round(draw / len(healthy) / 0.94, 1)}
                for k in range(1, n_psu + 1)]
        fans = int(cfg.get("fans", 8))
        fan_fault = faults.bmc("fan_failed")
        dead = int(fan_fault.get("fan", 1)) if fan_fault is not None else None
        rpm = [0.0 if k + 1 == dead else round(5200 + 4300 * load + _jitter(k, sec, "f",
                                                                            spread=80), -2)
               for k in range(fans)]
        fw = faults.bmc("bmc_firmware")
        return {"now": now, "inlet": round(inlet, 1),
                "exhaust": round(inlet + 8 + 30 * load, 1),
                "gpu_zone": max((x["temp"] for x in gpus), default=inlet),
                "gpus": gpus, "fans": rpm, "power_w": round(draw, 0), "psus": psus,
                "p12v": 12.1, "firmware": str(fw.get("version", "1.17")) if fw is not None
                else str(cfg.get("firmware", GOLDEN_FIRMWARE)),
                "serial": hw["identity"]["system_serial"],
                "gpu_serials": {i: hw["identity"]["gpus"][i]["serial"] for i in range(count)},
                "hcas": int((prof.get("hcas") or {}).get("count", 0)),
                "sel": list(cfg.get("sel", []))}


# --- Redfish -------------------------------------------------------------------------------

def member_id(pattern: str, index: int = 0) -> str:
    """The FirmwareInventory Id a recipe's pattern names (`^CPLDMB_\\d+$` -> CPLDMB_0)."""
    return pattern.strip("^$").replace("\\d+", str(index))


def firmware_members(hw: dict[str, Any], manager_fw: str,
                     updated: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Id -> (name, version): the BMC's own firmware and every component of the host's
    recipe (one member per GPU where the component is the GPUs'), at the recipe's
    versions unless a fault says otherwise or an update set another (`updated`)."""
    out: dict[str, dict[str, Any]] = {"BMC": {"name": "BMC Firmware", "version": manager_fw}}
    name = hw["profile"].get("firmware_recipe")
    if not name:
        return out
    old = Faults(hw).old_firmware()
    count = int(hw["profile"]["gpu_count"])
    for comp in find_recipe(str(name)).components.values():
        for pattern in comp.redfish[:1]:
            per_gpu = comp.inband == "gpu_vbios"
            for i in range(count if per_gpu else 1):
                mid = member_id(pattern, i)
                out[mid] = {"name": comp.name, "version": (updated or {}).get(
                    mid, old.get(comp.name, comp.version))}
    return out


def _ref(path: str) -> dict[str, str]:
    return {"@odata.id": f"/redfish/v1/{path}".rstrip("/")}


def _collection(path: str, kind: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": f"/redfish/v1/{path}", "@odata.type": f"#{kind}.{kind}",
            "Name": kind.replace("Collection", " Collection"),
            "Members": [_ref(m) for m in members], "Members@odata.count": len(members)}


def _ok(ok: bool = True) -> dict[str, str]:
    return {"State": "Enabled", "Health": "OK" if ok else "Critical"}


def _temp(n: int, name: str, reading: float, limits: tuple[float, float],
          ctx: str) -> dict[str, Any]:
    crit, fatal = limits
    return {"@odata.id": f"/redfish/v1/Chassis/1/Thermal#/Temperatures/{n}",
            "MemberId": str(n), "Name": name, "SensorNumber": n + 1, "PhysicalContext": ctx,
            "ReadingCelsius": reading, "UpperThresholdNonCritical": crit - 4,
            "UpperThresholdCritical": crit, "UpperThresholdFatal": fatal,
            "Status": _ok(reading < crit)}


def redfish_tree(model: Model) -> dict[str, Any]:
    """Mockup path (under /redfish/v1) -> the resource's JSON."""
    r = model.readings()
    temps = [_temp(0, "Inlet Temp", r["inlet"], (42, 45), "Intake"),
             _temp(1, "Exhaust Temp", r["exhaust"], (75, 80), "Exhaust")]
    temps += [_temp(2 + k, f"GPU{x['index']} Temp", x["temp"], (90, 95), "GPU")
              for k, x in enumerate(r["gpus"])]
    fans = [{"@odata.id": f"/redfish/v1/Chassis/1/Thermal#/Fans/{k}", "MemberId": str(k),
             "Name": f"Fan {k + 1}", "Reading": rpm, "ReadingUnits": "RPM",
             "LowerThresholdNonCritical": 700, "LowerThresholdCritical": 500,
             "LowerThresholdFatal": 300, "Status": _ok(rpm > 500)}
            for k, rpm in enumerate(r["fans"])]
    psus = [{"@odata.id": f"/redfish/v1/Chassis/1/Power#/PowerSupplies/{p['n'] - 1}",
             "MemberId": str(p["n"] - 1), "Name": f"PSU{p['n']}",
             "PowerCapacityWatts": p["capacity_w"], "PowerInputWatts": p["input_w"],
             "LineInputVoltage": 0 if p["failed"] else 230, "FirmwareVersion": "02.10",
             "Status": _ok(not p["failed"])} for p in r["psus"]]
    redundant = not any(p["failed"] for p in r["psus"])
    gpu_ids = [f"GPU_SXM_{x['index'] + 1}" for x in r["gpus"]]
    tree: dict[str, Any] = {
        "": {"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
             "Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.11.0",
             "Systems": _ref("Systems"), "Chassis": _ref("Chassis"),
             "Managers": _ref("Managers"), "UpdateService": _ref("UpdateService"),
             "Tasks": _ref("TaskService")},
        "Systems": _collection("Systems", "ComputerSystemCollection", ["Systems/1"]),
        "Systems/1": {"@odata.id": "/redfish/v1/Systems/1",
                      "@odata.type": "#ComputerSystem.v1_12_0.ComputerSystem", "Id": "1",
                      "Name": "System", "SerialNumber": r["serial"],
                      "Model": "SIMULATED HGX server", "PowerState": "On",
                      "Processors": _ref("Systems/1/Processors"), "Bios": _ref("Systems/1/Bios"),
                      "Actions": {"#ComputerSystem.Reset": {
                          "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                          "ResetType@Redfish.AllowableValues": ["On", "ForceOff",
                                                                "ForceRestart"]}},
                      "Status": _ok()},
        "Systems/1/Processors": _collection(
            "Systems/1/Processors", "ProcessorCollection",
            ["Systems/1/Processors/CPU1", "Systems/1/Processors/CPU2"]
            + [f"Systems/1/Processors/{g}" for g in gpu_ids]),
        "Chassis": _collection("Chassis", "ChassisCollection", ["Chassis/1"]),
        "Chassis/1": {"@odata.id": "/redfish/v1/Chassis/1",
                      "@odata.type": "#Chassis.v1_14_0.Chassis", "Id": "1", "Name": "Chassis",
                      "Thermal": _ref("Chassis/1/Thermal"), "Power": _ref("Chassis/1/Power"),
                      "NetworkAdapters": _ref("Chassis/1/NetworkAdapters"), "Status": _ok()},
        "Chassis/1/Thermal": {"@odata.id": "/redfish/v1/Chassis/1/Thermal",
                              "@odata.type": "#Thermal.v1_6_0.Thermal", "Id": "Thermal",
                              "Name": "Thermal", "Temperatures": temps, "Fans": fans},
        "Chassis/1/Power": {
            "@odata.id": "/redfish/v1/Chassis/1/Power", "@odata.type": "#Power.v1_6_0.Power",
            "Id": "Power", "Name": "Power",
            "PowerControl": [{"@odata.id": "/redfish/v1/Chassis/1/Power#/PowerControl/0",
                              "MemberId": "0", "Name": "System Power Control",
                              "PowerConsumedWatts": r["power_w"],
                              "PowerCapacityWatts": sum(p["capacity_w"] for p in r["psus"])}],
            "PowerSupplies": psus,
            "Redundancy": [{"@odata.id": "/redfish/v1/Chassis/1/Power#/Redundancy/0",
                            "MemberId": "0", "Name": "PSU Redundancy", "Mode": "N+m",
                            "MinNumNeeded": len(r["psus"]) // 2,
                            "Status": {"State": "Enabled",
                                       "Health": "OK" if redundant else "Critical"}}],
            "Voltages": [{"@odata.id": "/redfish/v1/Chassis/1/Power#/Voltages/0",
                          "MemberId": "0", "Name": "Rail 12V", "ReadingVolts": r["p12v"],
                          "LowerThresholdCritical": 10.8, "UpperThresholdCritical": 13.2,
                          "Status": _ok()}]},
        "Chassis/1/NetworkAdapters": _collection(
            "Chassis/1/NetworkAdapters", "NetworkAdapterCollection",
            [f"Chassis/1/NetworkAdapters/NIC{k}" for k in range(r["hcas"])]),
        "Managers": _collection("Managers", "ManagerCollection", ["Managers/1"]),
        "Managers/1": {"@odata.id": "/redfish/v1/Managers/1",
                       "@odata.type": "#Manager.v1_10_0.Manager", "Id": "1", "Name": "BMC",
                       "ManagerType": "BMC", "Model": "SIMULATED BMC",
                       "FirmwareVersion": r["firmware"],
                       "LogServices": _ref("Managers/1/LogServices"), "Status": _ok()},
        "Managers/1/LogServices": _collection("Managers/1/LogServices",
                                              "LogServiceCollection",
                                              ["Managers/1/LogServices/SEL"]),
        "Managers/1/LogServices/SEL": {
            "@odata.id": "/redfish/v1/Managers/1/LogServices/SEL",
            "@odata.type": "#LogService.v1_2_0.LogService", "Id": "SEL", "Name": "SEL",
            "Entries": _ref("Managers/1/LogServices/SEL/Entries")},
        "Managers/1/LogServices/SEL/Entries": {
            **_collection("Managers/1/LogServices/SEL/Entries", "LogEntryCollection",
                          [f"Managers/1/LogServices/SEL/Entries/{e['Id']}" for e in r["sel"]]),
            "Members": [{"@odata.id": f"/redfish/v1/Managers/1/LogServices/SEL/Entries/"
                                      f"{e['Id']}",
                         "@odata.type": "#LogEntry.v1_4_0.LogEntry", "EntryType": "SEL", **e}
                        for e in r["sel"]]},
    }
    fw = firmware_members(model.hw(), r["firmware"], model.updated_firmware())
    tree["UpdateService"] = {
        "@odata.id": "/redfish/v1/UpdateService",
        "@odata.type": "#UpdateService.v1_11_0.UpdateService", "Id": "UpdateService",
        "Name": "Update Service", "ServiceEnabled": True,
        "MultipartHttpPushUri": "/redfish/v1/UpdateService/update-multipart",
        "FirmwareInventory": _ref("UpdateService/FirmwareInventory"),
        # No SimpleUpdate: this BMC takes images pushed to it, it fetches none.
        "Actions": {"Oem": {}}}
    bios_now, bios_pending = model.bios()
    tree["Systems/1/Bios"] = {
        "@odata.id": "/redfish/v1/Systems/1/Bios", "@odata.type": "#Bios.v1_2_0.Bios",
        "Id": "Bios", "Name": "BIOS Configuration Current Settings",
        "AttributeRegistry": "SIMULATED", "Attributes": bios_now,
        "@Redfish.Settings": {
            "@odata.type": "#Settings.v1_3_5.Settings",
            "SettingsObject": _ref("Systems/1/Bios/Settings"),
            "SupportedApplyTimes": ["OnReset"]}}
    tree["Systems/1/Bios/Settings"] = {
        "@odata.id": "/redfish/v1/Systems/1/Bios/Settings", "@odata.type": "#Bios.v1_2_0.Bios",
        "Id": "Settings", "Name": "BIOS Configuration Pending Settings",
        "Attributes": bios_pending}
    tree["TaskService"] = {
        "@odata.id": "/redfish/v1/TaskService", "@odata.type":
        "#TaskService.v1_2_0.TaskService", "Id": "TaskService", "Name": "Task Service",
        "ServiceEnabled": True, "Tasks": _ref("TaskService/Tasks")}
    tree["UpdateService/FirmwareInventory"] = _collection(
        "UpdateService/FirmwareInventory", "SoftwareInventoryCollection",
        [f"UpdateService/FirmwareInventory/{k}" for k in fw])
    for fid, m in fw.items():
        tree[f"UpdateService/FirmwareInventory/{fid}"] = {
            "@odata.id": f"/redfish/v1/UpdateService/FirmwareInventory/{fid}",
            "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory", "Id": fid,
            "Name": m["name"], "Version": m["version"], "Updateable": True,
            "Status": _ok()}
    for cpu in ("CPU1", "CPU2"):
        tree[f"Systems/1/Processors/{cpu}"] = {
            "@odata.id": f"/redfish/v1/Systems/1/Processors/{cpu}",
            "@odata.type": "#Processor.v1_10_0.Processor", "Id": cpu, "Name": cpu,
            "ProcessorType": "CPU", "Status": _ok()}
    for x, gid in zip(r["gpus"], gpu_ids, strict=True):
        tree[f"Systems/1/Processors/{gid}"] = {
            "@odata.id": f"/redfish/v1/Systems/1/Processors/{gid}",
            "@odata.type": "#Processor.v1_10_0.Processor", "Id": gid, "Name": gid,
            "ProcessorType": "GPU", "Model": "SIMULATED GPU",
            "SerialNumber": r["gpu_serials"][x["index"]], "Status": _ok()}
    for k in range(r["hcas"]):
        tree[f"Chassis/1/NetworkAdapters/NIC{k}"] = {
            "@odata.id": f"/redfish/v1/Chassis/1/NetworkAdapters/NIC{k}",
            "@odata.type": "#NetworkAdapter.v1_5_0.NetworkAdapter", "Id": f"NIC{k}",
            "Name": f"NIC{k}", "Manufacturer": "SIMULATED", "Model": "SIMULATED HCA",
            "Status": _ok()}
    return tree


# --- IPMI ----------------------------------------------------------------------------------

def ipmi_raw(model: Model) -> dict[str, int]:
    """Sensor name -> the raw byte ipmi_sim reads (value = raw * m * 10^r_exp)."""
    r = model.readings()
    values = {"Inlet Temp": r["inlet"], "Exhaust Temp": r["exhaust"],
              "GPU Zone Temp": r["gpu_zone"], "Rail 12V": r["p12v"], "Total Power": r["power_w"]}
    values.update({f"Fan {k + 1}": rpm for k, rpm in enumerate(r["fans"])})
    out = {}
    for s in ipmi_sensors(len(r["fans"])):
        raw = round(values[s.name] / (s.m * 10 ** s.r_exp))
        out[s.name.replace(" ", "_")] = max(0, min(255, raw))
    return out


__all__ = ["GOLDEN_FIRMWARE", "USERNAME", "Model", "Sensor", "ipmi_raw", "ipmi_sensors",
           "psu_sensor_number", "read_state", "redfish_tree"]
