"""What a lab rack's management endpoints report: an NVLink switch tray, a power shelf
and a coolant distribution unit (CDU) as Redfish resource trees, in the shapes of DMTF's
schemas and public mockups (public-power-shelf, public-cooling-unit), with SIMULATED
readings that move a little from second to second and the lab's faults applied.

A component's state is its directory's `component.json` ({kind, name, faults}), read
again at every render so a test can inject a fault into a running endpoint. A switch
tray's component also lists the rack's GPU UUIDs (`gpus`, in tray order): each of its
switch chips has one link from every GPU, GPU g on port g+1, each GPU a fabric Endpoint
that the port names.

  port_down {switch, port}   an NVLink port of the switch tray down
  nvlink_crossed {switch, port, to}  the port's cable lands on the GPU of port `to`
  firmware {version}         the component reports another firmware version
  psu_failed {bay}           a shelf's supply failed (Critical, input lost)
  shelf_failed               the shelf itself Critical
  leak {detector}            a CDU leak detector trips (Moisture or Overflow)
  coolant_hot                the CDU's supply temperature above its critical threshold
  pump_failed {pump}         a CDU pump failed

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

SWITCHES_PER_TRAY = 2  # NVLink switch chips in an NVL72 switch tray
PORTS_PER_SWITCH = 72  # NVLink ports per chip: 9 trays x 2 x 72 = 72 GPUs x 18 links
FIRMWARE = {"switch_tray": "35.2014.1676", "switch_bmc": "25.06.3", "power_shelf": "1.2.1",
            "cdu": "3.2.0"}
BAYS = 6
# The CDU's readings: key -> (property, sensor id, reading, unit, thresholds)
COOLANT = {
    "supply_temp": ("SupplyTemperatureCelsius", "PrimarySupplyTemp", 30.0, "Cel",
                    {"UpperCaution": 40.0, "UpperCritical": 45.0}),
    "return_temp": ("ReturnTemperatureCelsius", "PrimaryReturnTemp", 40.0, "Cel",
                    {"UpperCaution": 55.0, "UpperCritical": 60.0}),
    "flow": ("FlowLitersPerMinute", "PrimaryFlow", 42.0, "L/min",
             {"LowerCaution": 30.0, "LowerCritical": 20.0}),
    "supply_pressure": ("SupplyPressurekPa", "PrimarySupplyPressure", 827.0, "kPa",
                        {"UpperCaution": 1240.0, "UpperCritical": 1380.0}),
}


def _id(path: str) -> dict[str, str]:
    return {"@odata.id": f"/redfish/v1/{path}"}


def _equipment_root(name: str, service: str, members: str) -> dict[str, Any]:
    """The service root of a rack's power or cooling endpoint and its equipment service
    (PowerEquipment with PowerShelves, ThermalEquipment with CDUs), as DMTF's schema
    lays them out."""
    return {"": {"@odata.id": "/redfish/v1", "Id": "RootService", "Name": name,
                 service: _id(service), "Chassis": _id("Chassis")},
            service: {"@odata.id": f"/redfish/v1/{service}",
                      members: _id(f"{service}/{members}")}}


def _coll(path: str, kind: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": f"/redfish/v1/{path}", "@odata.type": f"#{kind}.{kind}",
            "Name": kind, "Members": [_id(m) for m in members],
            "Members@odata.count": len(members)}


def _status(ok: bool = True, *, warn: bool = False) -> dict[str, str]:
    return {"State": "Enabled", "Health": "OK" if ok and not warn else
            "Warning" if ok else "Critical"}


def _wobble(name: str, key: str, now: float, spread: float) -> float:
    """A reading's second-to-second movement: deterministic, within +-spread."""
    phase = zlib.crc32(f"{name}/{key}".encode()) % 1000 / 1000 * 2 * math.pi
    return spread * math.sin(now / 7.0 + phase)


def _serial(name: str) -> str:
    return f"SIM{zlib.crc32(name.encode()) % 10**9:09d}"


def _gpu_endpoints(tree: dict[str, Any], gpus: tuple[str, ...]) -> list[str]:
    """Each GPU behind the tray's ports as a fabric endpoint (DMTF Endpoint: the processor
    it connects, identified by its UUID), added to the tree; their paths, in GPU order."""
    eps = [f"Fabrics/NVLink/Endpoints/GPU_{g}" for g in range(len(gpus))]
    if gpus:
        tree["Fabrics/NVLink/Endpoints"] = _coll("Fabrics/NVLink/Endpoints",
                                                 "EndpointCollection", eps)
    for g, (ep, uuid) in enumerate(zip(eps, gpus, strict=True)):
        tree[ep] = {"@odata.id": f"/redfish/v1/{ep}",
                    "@odata.type": "#Endpoint.v1_8_0.Endpoint", "Id": f"GPU_{g}",
                    "Name": f"GPU {g}", "EndpointProtocol": "NVLink",
                    "ConnectedEntities": [{"EntityType": "Processor", "EntityRole": "Both"}],
                    "Identifiers": [{"DurableName": uuid.removeprefix("GPU-"),
                                     "DurableNameFormat": "UUID"}]}
    return eps


def _port(path: str, p: int, down: bool, endpoint: str | None) -> dict[str, Any]:
    """One NVLink port: up (or down), naming the GPU endpoint its link reaches."""
    return {"@odata.id": f"/redfish/v1/{path}", "@odata.type": "#Port.v1_11_0.Port",
            "Id": f"acp{p}", "PortProtocol": "NVLink", "PortType": "BidirectionalPort",
            "LinkStatus": "LinkDown" if down else "LinkUp", "LinkState": "Enabled",
            "CurrentSpeedGbps": 0 if down else 400, "Status": _status(not down),
            **({"Links": {"AssociatedEndpoints": [_id(endpoint)]}} if endpoint else {})}


def switch_tray(name: str, faults: dict[str, Any], ports: int = PORTS_PER_SWITCH,
                gpus: tuple[str, ...] = ()) -> dict[str, Any]:
    """gpus: the rack's GPU UUIDs in tray order; port p of each switch chip carries one
    link of GPU p-1 (one link from every GPU to every chip)."""
    fw = (faults.get("firmware") or {}).get("version", FIRMWARE["switch_tray"])
    down = faults.get("port_down") or {}
    crossed = faults.get("nvlink_crossed") or {}
    tree: dict[str, Any] = {
        "": {"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
             "Id": "RootService", "Name": f"{name} (SIMULATED NVLink switch tray)",
             "Chassis": _id("Chassis"), "Fabrics": _id("Fabrics"),
             "UpdateService": _id("UpdateService")},
        "Chassis": _coll("Chassis", "ChassisCollection", ["Chassis/Tray"]),
        "Chassis/Tray": {"@odata.id": "/redfish/v1/Chassis/Tray",
                         "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": "Tray",
                         "Name": "NVLink Switch Tray", "ChassisType": "Shelf",
                         "Manufacturer": "NVIDIA", "Model": "NVLink Switch Tray (SIMULATED)",
                         "SerialNumber": _serial(name), "Status": _status()},
        "UpdateService": {"@odata.id": "/redfish/v1/UpdateService", "Id": "UpdateService",
                          "FirmwareInventory": _id("UpdateService/FirmwareInventory")},
        "UpdateService/FirmwareInventory": _coll(
            "UpdateService/FirmwareInventory", "SoftwareInventoryCollection",
            ["UpdateService/FirmwareInventory/BMC"]),
        "UpdateService/FirmwareInventory/BMC": {
            "@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC",
            "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory", "Id": "BMC",
            "Name": "Switch tray BMC", "Version": FIRMWARE["switch_bmc"], "Updateable": True,
            "Status": _status()},
        "Fabrics": _coll("Fabrics", "FabricCollection", ["Fabrics/NVLink"]),
        "Fabrics/NVLink": {"@odata.id": "/redfish/v1/Fabrics/NVLink",
                           "@odata.type": "#Fabric.v1_3_0.Fabric", "Id": "NVLink",
                           "FabricType": "NVLink", "Status": _status(),
                           "Switches": _id("Fabrics/NVLink/Switches"),
                           **({"Endpoints": _id("Fabrics/NVLink/Endpoints")} if gpus else {})},
    }
    eps = _gpu_endpoints(tree, gpus)
    sws = [f"Fabrics/NVLink/Switches/NVSwitch_{s}" for s in range(SWITCHES_PER_TRAY)]
    tree["Fabrics/NVLink/Switches"] = _coll("Fabrics/NVLink/Switches", "SwitchCollection", sws)
    for s, sw in enumerate(sws):
        tree[sw] = {"@odata.id": f"/redfish/v1/{sw}", "@odata.type": "#Switch.v1_9_0.Switch",
                    "Id": sw.rsplit("/", 1)[-1], "SwitchType": "NVLink",
                    "FirmwareVersion": fw, "Status": _status(), "Ports": _id(f"{sw}/Ports")}
        names = [f"{sw}/Ports/acp{p}" for p in range(1, ports + 1)]
        tree[f"{sw}/Ports"] = _coll(f"{sw}/Ports", "PortCollection", names)
        for p, port in enumerate(names, 1):
            # a crossed cable: the port's link lands on the GPU planned for port `to`
            g = (int(crossed.get("to", p + 1)) if crossed.get("switch") == s and
                 crossed.get("port") == p else p) - 1
            tree[port] = _port(port, p, down.get("switch") == s and down.get("port") == p,
                               eps[g] if 0 <= g < len(eps) else None)
    return tree


def power_shelf(name: str, faults: dict[str, Any], now: float) -> dict[str, Any]:
    fw = (faults.get("firmware") or {}).get("version", FIRMWARE["power_shelf"])
    failed_bay = (faults.get("psu_failed") or {}).get("bay")
    shelf_bad = bool(faults.get("shelf_failed"))
    base = "PowerEquipment/PowerShelves/1"
    ch = "Chassis/PowerShelf/PowerSubsystem"
    conditions = [{"MessageId": "Power.1.0.PowerSupplyFailed", "Severity": "Critical",
                   "Message": "The power shelf has failed: its output is off.",
                   "OriginOfCondition": _id(base)}] if shelf_bad else []
    tree: dict[str, Any] = {
        **_equipment_root(f"{name} (SIMULATED power shelf)", "PowerEquipment",
                          "PowerShelves"),
        "PowerEquipment/PowerShelves": _coll("PowerEquipment/PowerShelves",
                                             "PowerDistributionCollection", [base]),
        base: {"@odata.id": f"/redfish/v1/{base}",
               "@odata.type": "#PowerDistribution.v1_6_0.PowerDistribution", "Id": "1",
               "EquipmentType": "PowerShelf", "Name": name, "FirmwareVersion": fw,
               "Manufacturer": "nodecert lab", "Model": "SIMULATED 33 kW shelf",
               "SerialNumber": _serial(name),
               "Status": {**_status(not shelf_bad), "Conditions": conditions},
               "Metrics": _id(f"{base}/Metrics"),
               "Links": {"Chassis": [_id("Chassis/PowerShelf")]}},
        f"{base}/Metrics": {"@odata.id": f"/redfish/v1/{base}/Metrics", "Id": "Metrics",
                            "PowerWatts": {"Reading": 0.0 if shelf_bad else round(
                                24000 + _wobble(name, "w", now, 400), 1)}},
        ch: {"@odata.id": f"/redfish/v1/{ch}",
             "@odata.type": "#PowerSubsystem.v1_1_3.PowerSubsystem", "Id": "PowerSubsystem",
             "CapacityWatts": 33000,
             "PowerSupplyRedundancy": [{"RedundancyType": "NPlusM", "MaxSupportedInGroup": BAYS,
                                        "MinNeededInGroup": BAYS - 1,
                                        "RedundancyGroup": [_id(f"{ch}/PowerSupplies/Bay{b}")
                                                            for b in range(1, BAYS + 1)],
                                        "Status": _status(failed_bay is None)}],
             "PowerSupplies": _id(f"{ch}/PowerSupplies"), "Status": _status(not shelf_bad)},
        f"{ch}/PowerSupplies": _coll(f"{ch}/PowerSupplies", "PowerSupplyCollection",
                                     [f"{ch}/PowerSupplies/Bay{b}" for b in range(1, BAYS + 1)]),
    }
    for b in range(1, BAYS + 1):
        bad = failed_bay == b
        tree[f"{ch}/PowerSupplies/Bay{b}"] = {
            "@odata.id": f"/redfish/v1/{ch}/PowerSupplies/Bay{b}",
            "@odata.type": "#PowerSupply.v1_6_0.PowerSupply", "Id": f"Bay{b}",
            "Name": f"Power Supply Bay {b}", "Status": _status(not bad),
            "LineInputStatus": "LossOfInput" if bad else "Normal",
            "FirmwareVersion": "1.00", "PowerCapacityWatts": 5500, "HotPluggable": True}
    return tree


def cdu(name: str, faults: dict[str, Any], now: float) -> dict[str, Any]:
    fw = (faults.get("firmware") or {}).get("version", FIRMWARE["cdu"])
    leak = (faults.get("leak") or {}).get("detector")
    pump_bad = (faults.get("pump_failed") or {}).get("pump")
    unit = "ThermalEquipment/CDUs/1"
    conn = f"{unit}/PrimaryCoolantConnectors/1"
    values = {k: base + _wobble(name, k, now, 0.02 * base)
              for k, (_, _, base, _, _) in COOLANT.items()}
    if faults.get("coolant_hot"):
        values["supply_temp"] = 47.0 + _wobble(name, "hot", now, 0.5)
    conds = [{"MessageId": "Environmental.1.2.PumpFailed", "Severity": "Critical",
              "Message": f"Pump '{pump_bad}' has failed.",
              "OriginOfCondition": _id(f"{unit}/Pumps/{pump_bad}")}] if pump_bad else []
    tree: dict[str, Any] = {
        **_equipment_root(f"{name} (SIMULATED CDU)", "ThermalEquipment", "CDUs"),
        "ThermalEquipment/CDUs": _coll("ThermalEquipment/CDUs", "CoolingUnitCollection",
                                       [unit]),
        unit: {"@odata.id": f"/redfish/v1/{unit}",
               "@odata.type": "#CoolingUnit.v1_5_0.CoolingUnit", "Id": "1",
               "EquipmentType": "CDU", "Name": name, "FirmwareVersion": fw,
               "Manufacturer": "nodecert lab", "Model": "SIMULATED in-rack CDU",
               "SerialNumber": _serial(name),
               "Status": {**_status(not (pump_bad or leak)), "Conditions": conds},
               "PrimaryCoolantConnectors": _id(f"{unit}/PrimaryCoolantConnectors"),
               "Pumps": _id(f"{unit}/Pumps"), "LeakDetection": _id(f"{unit}/LeakDetection")},
        f"{unit}/LeakDetection": {
            "@odata.id": f"/redfish/v1/{unit}/LeakDetection",
            "@odata.type": "#LeakDetection.v1_2_0.LeakDetection", "Id": "LeakDetection",
            "Status": _status(not leak),
            "LeakDetectorGroups": [{"GroupName": "Detectors in the CDU",
                                    "Status": _status(not leak),
                                    "Detectors": [
                                        {"DataSourceUri": f"/redfish/v1/Chassis/CDU/"
                                                          f"LeakDetectors/{d}",
                                         "DeviceName": f"{d} Leak Detector",
                                         "DetectorState": "Critical" if leak == d else "OK"}
                                        for d in ("Moisture", "Overflow")]}]},
        f"{unit}/Pumps": _coll(f"{unit}/Pumps", "PumpCollection",
                               [f"{unit}/Pumps/1", f"{unit}/Pumps/2"]),
        f"{unit}/PrimaryCoolantConnectors": _coll(f"{unit}/PrimaryCoolantConnectors",
                                                  "CoolantConnectorCollection", [conn]),
        conn: {"@odata.id": f"/redfish/v1/{conn}",
               "@odata.type": "#CoolantConnector.v1_3_0.CoolantConnector", "Id": "1",
               "Name": "Main supply from facility", "Status": _status(),
               **{prop: {"Reading": round(values[k], 1),
                         "DataSourceUri": f"/redfish/v1/Chassis/CDU/Sensors/{sid}"}
                  for k, (prop, sid, _, _, _) in COOLANT.items()}},
    }
    for p in (1, 2):
        tree[f"{unit}/Pumps/{p}"] = {"@odata.id": f"/redfish/v1/{unit}/Pumps/{p}",
                                     "@odata.type": "#Pump.v1_2_0.Pump", "Id": str(p),
                                     "PumpType": "Liquid", "Status": _status(pump_bad != p),
                                     "PumpSpeedPercent": {"Reading": 0.0 if pump_bad == p
                                                          else 38.5}}
    for k, (_, sid, _, unit_name, limits) in COOLANT.items():
        tree[f"Chassis/CDU/Sensors/{sid}"] = {
            "@odata.id": f"/redfish/v1/Chassis/CDU/Sensors/{sid}",
            "@odata.type": "#Sensor.v1_12_0.Sensor", "Id": sid, "Reading": round(values[k], 1),
            "ReadingUnits": unit_name, "Status": _status(),
            "Thresholds": {t: {"Reading": v} for t, v in limits.items()}}
    return tree


def tree(component: dict[str, Any], now: float) -> dict[str, Any]:
    """Mockup path (under /redfish/v1) -> the resource's JSON, for one component."""
    kind, name, faults = component["kind"], component["name"], component.get("faults") or {}
    if kind == "switch_tray":
        return switch_tray(name, faults, int(component.get("ports", PORTS_PER_SWITCH)),
                           tuple(component.get("gpus") or ()))
    if kind == "power_shelf":
        return power_shelf(name, faults, now)
    if kind == "cdu":
        return cdu(name, faults, now)
    raise ValueError(f"unknown rack component kind {kind!r}")


__all__ = ["FIRMWARE", "PORTS_PER_SWITCH", "tree"]
