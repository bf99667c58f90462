"""Redfish resources a BMC returns (DMTF DSP0266/DSP8010 schemas): the legacy Thermal and
Power resources of a Chassis, a LogEntry collection (the SEL), a Manager, and the GPUs
and network adapters a BMC lists.

Real BMCs differ: vendors add Oem blocks, leave thresholds null, report absent sensors
with a reading of 0 (State "Absent"), write timestamps in non-ISO forms with trailing
spaces, and leave out Severity. A sensor whose reading is missing is kept with reading
None (never 0); a document that is not the resource asked for is refused.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from nodecert_node.parse import ParseError


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _status(item: dict[str, Any]) -> tuple[str, str]:
    raw = item.get("Status")
    st: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return str(st.get("State") or ""), str(st.get("Health") or "")


def _members(doc: Any, key: str, what: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ParseError(f"{what}: {key} is not a list of objects")
    return items


def _sensor(item: dict[str, Any], kind: str, reading_key: str, unit: str) -> dict[str, Any]:
    state, health = _status(item)
    reading = _num(item.get(reading_key))
    if state == "Absent":
        reading = None  # an absent sensor's 0 is not a reading
    return {"name": str(item.get("Name") or item.get("FanName") or item.get("MemberId") or "?"),
            "kind": kind, "reading": reading, "unit": unit, "state": state,
            "health": health,
            "lower_critical": _num(item.get("LowerThresholdCritical")),
            "lower_fatal": _num(item.get("LowerThresholdFatal")),
            "upper_critical": _num(item.get("UpperThresholdCritical")),
            "upper_fatal": _num(item.get("UpperThresholdFatal"))}


def _check_type(doc: Any, odata_type: str, what: str) -> None:
    t = doc.get("@odata.type", "") if isinstance(doc, dict) else ""
    if t and odata_type not in str(t):
        raise ParseError(f"{what}: the document is a {t}, not a {odata_type}")


def parse_thermal(doc: Any) -> list[dict[str, Any]]:
    """Temperatures and fans of a legacy Thermal resource."""
    _check_type(doc, "Thermal", "Redfish Thermal")
    temps = _members(doc, "Temperatures", "Redfish Thermal")
    fans = _members(doc, "Fans", "Redfish Thermal")
    out = [_sensor(t, "temperature", "ReadingCelsius", "C") for t in temps]
    for f in fans:
        unit = str(f.get("ReadingUnits") or "RPM")
        out.append(_sensor(f, "fan", "Reading", "%" if unit == "Percent" else unit))
    if not out:
        raise ParseError("Redfish Thermal: no Temperatures and no Fans")
    return out


# A coolant connector's readings (DMTF CoolantConnector): property, label, unit.
COOLANT_READINGS = (("SupplyTemperatureCelsius", "supply temperature", "C"),
                    ("ReturnTemperatureCelsius", "return temperature", "C"),
                    ("DeltaTemperatureCelsius", "temperature rise", "C"),
                    ("FlowLitersPerMinute", "flow", "L/min"),
                    ("SupplyPressurekPa", "supply pressure", "kPa"),
                    ("ReturnPressurekPa", "return pressure", "kPa"),
                    ("DeltaPressurekPa", "pressure drop", "kPa"))
# A Sensor's Thresholds, as the sensors' threshold keys.
_SENSOR_THRESHOLDS = (("UpperFatal", "upper_fatal"), ("UpperCritical", "upper_critical"),
                      ("LowerFatal", "lower_fatal"), ("LowerCritical", "lower_critical"),
                      ("UpperCaution", "upper_noncritical"),
                      ("LowerCaution", "lower_noncritical"))


def parse_coolant_connector(doc: Any, sensors: dict[str, Any] | None = None
                            ) -> list[dict[str, Any]]:
    """A server's coolant connector (Chassis/<id>/ThermalSubsystem/CoolantConnectors/<id>)
    as sensors: its own status (kind "coolant", no reading) and each reading it gives,
    with the thresholds of the Sensor its excerpt names (`sensors`: path -> document,
    where fetched). A reading it does not give is absent, never zero."""
    what = "Redfish CoolantConnector"
    _check_type(doc, "CoolantConnector", what)
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    name = str(doc.get("Name") or doc.get("Id") or "coolant connector")
    state, health = _status(doc)
    out = [{"name": f"{name} (coolant connector)", "kind": "coolant", "reading": None,
            "unit": "", "state": state, "health": health}]
    for prop, label, unit in COOLANT_READINGS:
        raw = doc.get(prop)
        if not isinstance(raw, dict):
            continue
        src = raw.get("DataSourceUri")
        sensor = (sensors or {}).get(src) if isinstance(src, str) else None
        item: dict[str, Any] = {"name": f"{name} {label}", "kind": "coolant",
                                "reading": _num(raw.get("Reading")), "unit": unit,
                                "state": "", "health": ""}
        if isinstance(sensor, dict):
            item["reading"] = _num(sensor.get("Reading")) if "Reading" in sensor \
                else item["reading"]
            item["state"], item["health"] = _status(sensor)
            raw_limits = sensor.get("Thresholds")
            limits: dict[str, Any] = raw_limits if isinstance(raw_limits, dict) else {}
            for key, mine in _SENSOR_THRESHOLDS:
                t = limits.get(key)
                item[mine] = _num(t.get("Reading")) if isinstance(t, dict) else None
        out.append(item)
    return out


def parse_power(doc: Any) -> dict[str, Any]:
    """Consumption, supplies, their redundancy and voltages of a legacy Power resource."""
    _check_type(doc, "Power", "Redfish Power")
    controls = _members(doc, "PowerControl", "Redfish Power")
    consumed = next((_num(c.get("PowerConsumedWatts")) for c in controls
                     if _num(c.get("PowerConsumedWatts")) is not None), None)
    psus = []
    for p in _members(doc, "PowerSupplies", "Redfish Power"):
        state, health = _status(p)
        psus.append({"name": str(p.get("Name") or p.get("MemberId") or "?"),
                     "capacity_w": _num(p.get("PowerCapacityWatts")),
                     "input_w": _num(p.get("PowerInputWatts")),
                     "output_w": _num(p.get("LastPowerOutputWatts")),
                     "firmware": str(p.get("FirmwareVersion") or ""),
                     "state": state, "health": health})
    redundancy = []
    for r in _members(doc, "Redundancy", "Redfish Power"):
        state, health = _status(r)
        redundancy.append({"name": str(r.get("Name") or "?"), "mode": str(r.get("Mode") or ""),
                           "min_needed": _num(r.get("MinNumNeeded")),
                           "state": state, "health": health})
    volts = [_sensor(v, "voltage", "ReadingVolts", "V")
             for v in _members(doc, "Voltages", "Redfish Power")]
    if consumed is None and not psus:
        raise ParseError("Redfish Power: neither PowerConsumedWatts nor PowerSupplies")
    return {"consumed_w": consumed, "psus": psus, "redundancy": redundancy,
            "voltages": volts}


# Timestamps as BMCs write them: ISO 8601 (DMTF), or "YYYY-MM-DD HH:MM:SS" (seen with a
# trailing space), without a zone (then read as UTC, and said so).
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_time(text: str) -> tuple[float | None, bool]:
    """(epoch seconds, had a zone) of a Redfish timestamp; (None, False) when unreadable."""
    m = _ISO.match(text.strip())
    if not m:
        return None, False
    zone = m.group(4) or ""
    try:
        t = dt.datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None, False
    offset = dt.timedelta(0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hh, mm = int(zone[1:3]), int(zone[-2:])
        offset = sign * dt.timedelta(hours=hh, minutes=mm)
    return (t.replace(tzinfo=dt.timezone.utc) - offset).timestamp(), bool(zone)


def parse_log_entries(doc: Any) -> list[dict[str, Any]]:
    """The entries of a LogEntry collection (the SEL, or another log service)."""
    _check_type(doc, "LogEntryCollection", "Redfish log entries")
    out = []
    for e in _members(doc, "Members", "Redfish log entries"):
        created = str(e.get("Created") or e.get("EventTimestamp") or "")
        when, zoned = parse_time(created)
        severity = e.get("Severity") or e.get("MessageSeverity")
        out.append({"id": str(e.get("Id") or e.get("EventId") or "?"),
                    "created": created.strip(), "time": when, "zoned": zoned,
                    "severity": str(severity) if severity else None,
                    "message": str(e.get("Message") or ""),
                    "entry_code": str(e.get("EntryCode") or ""),
                    "sensor_type": str(e.get("SensorType") or "")})
    return out


def parse_manager(doc: Any) -> dict[str, Any]:
    _check_type(doc, "Manager", "Redfish Manager")
    if not isinstance(doc, dict) or "FirmwareVersion" not in doc:
        raise ParseError("Redfish Manager: no FirmwareVersion")
    state, health = _status(doc)
    return {"firmware": str(doc["FirmwareVersion"]), "model": str(doc.get("Model") or ""),
            "state": state, "health": health}


def _part(doc: Any, odata_type: str, fields: dict[str, str]) -> dict[str, Any]:
    """A Processor or NetworkAdapter: its id, the named fields as text, its status."""
    what = f"Redfish {odata_type}"
    _check_type(doc, odata_type, what)
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    state, health = _status(doc)
    return {"id": str(doc.get("Id") or "?"),
            **{k: str(doc.get(src) or "") for k, src in fields.items()},
            "state": state, "health": health}


def parse_processor(doc: Any) -> dict[str, Any]:
    return _part(doc, "Processor", {"type": "ProcessorType", "model": "Model",
                                    "serial": "SerialNumber"})


def parse_network_adapter(doc: Any) -> dict[str, Any]:
    return _part(doc, "NetworkAdapter", {"model": "Model", "manufacturer": "Manufacturer"})


# Parts an NVIDIA PCIe device can be that are not GPUs: NICs/DPUs and switches.
_NOT_GPU = re.compile(r"connectx|bluefield|mellanox|nvswitch|switch|ethernet|infiniband|"
                      r"network|nic\b", re.IGNORECASE)


NVIDIA_VENDOR = "10de"
# PCI class codes (base class, subclass) of a GPU: display VGA-compatible, 3D controller.
_GPU_CLASSES = ("0300", "0302")


def _hex_id(raw: Any) -> str | None:
    """A Redfish PCI id ("0x10DE", "0x030200") as lower-case hex without 0x; None where
    absent or not hex."""
    text = str(raw or "").strip().lower().removeprefix("0x")
    return text if re.fullmatch(r"[0-9a-f]{4,6}", text) else None


def parse_pcie_function(doc: Any) -> dict[str, Any]:
    """A Redfish PCIeFunction: its vendor and device ids and class code (lower-case hex,
    None where the BMC gives none) and its function class name."""
    what = "Redfish PCIeFunction"
    _check_type(doc, "PCIeFunction", what)
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    return {"vendor_id": _hex_id(doc.get("VendorId")),
            "device_id": _hex_id(doc.get("DeviceId")),
            "class_code": _hex_id(doc.get("ClassCode")),
            "function_class": str(doc.get("DeviceClass") or "")}


def gpu_by_functions(functions: list[dict[str, Any]]) -> bool | None:
    """Whether a device's PCIe functions make it an NVIDIA GPU (an NVIDIA vendor id with a
    display or 3D controller class); None where no function gives both ids."""
    known = [f for f in functions if f.get("vendor_id") and (f.get("class_code") or "")[:4]]
    if not known:
        return None
    return any(f["vendor_id"] == NVIDIA_VENDOR and str(f["class_code"])[:4] in _GPU_CLASSES
               for f in known)


def parse_pcie_device(doc: Any, functions: list[dict[str, Any]] | None = None
                      ) -> dict[str, Any]:
    """A Redfish PCIeDevice: id, manufacturer, model, name, serial, status, and "gpu":
    whether it is an NVIDIA GPU, and "gpu_by" how that was known. Its functions decide
    first (PCI vendor 0x10de with a display or 3D controller class code); then the
    device's Manufacturer (an NVIDIA device that is not a NIC, DPU or switch by its
    model); its Name last (some BMCs, Cisco's CIMC among them, name the card there
    alone)."""
    part = _part(doc, "PCIeDevice", {"model": "Model", "manufacturer": "Manufacturer",
                                      "serial": "SerialNumber", "name": "Name"})
    by_ids = gpu_by_functions(functions or [])
    described = " ".join((part["model"], part["name"]))
    if by_ids is not None:
        part["gpu"], part["gpu_by"] = by_ids, "PCI ids"
    elif "nvidia" in part["manufacturer"].lower() and part["model"]:
        part["gpu"], part["gpu_by"] = not _NOT_GPU.search(part["model"]), "manufacturer"
    else:
        part["gpu"] = "nvidia" in described.lower() and not _NOT_GPU.search(described)
        part["gpu_by"] = "name"
    if not part["model"] and part["gpu"] and part["gpu_by"] == "name":
        part["model"] = part["name"]  # the card is named there alone
    return part


_BACKUP = re.compile(r"(Backup|Redundant|Inactive|Standby)\b", re.I)


def parse_software_inventory(doc: Any) -> dict[str, Any]:
    """A FirmwareInventory member (SoftwareInventory): id, name, version (None where the
    BMC gives none: never a made-up one), whether it is updateable, its status, and the
    DMTF optional fields where present. The version is the BMC's text, whole (HPE appends
    a build date: '2.55 Oct 01 2021')."""
    what = "Redfish SoftwareInventory"
    _check_type(doc, "SoftwareInventory", what)
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    ident = doc.get("Id")
    if not isinstance(ident, str) or not ident:
        link = doc.get("@odata.id")
        if not isinstance(link, str) or "/" not in link:
            raise ParseError(f"{what}: neither an Id nor an @odata.id")
        ident = link.rstrip("/").rsplit("/", 1)[-1]
    version = doc.get("Version")
    if version is not None and not isinstance(version, str):
        raise ParseError(f"{what} {ident}: Version is {type(version).__name__}, not text")
    state, health = _status(doc)
    description = str(doc.get("Description") or "")[:200]
    name = str(doc.get("Name") or "")
    return {"id": ident, "name": name, "description": description,
            # The image that does not run: a backup bank (HPE names it in Description,
            # "SystemRomBackup", and Name, "Redundant System ROM"; DMTF's State
            # StandbySpare). Kept, never judged as what runs.
            "standby": bool(_BACKUP.search(description) or name.startswith("Redundant ")
                            or state == "StandbySpare"),
            "version": version.strip() if isinstance(version, str) and version.strip()
            else None,
            "updateable": doc.get("Updateable") is True, "state": state, "health": health,
            "software_id": str(doc.get("SoftwareId") or ""),
            "lowest_supported": str(doc.get("LowestSupportedVersion") or ""),
            "release_date": str(doc.get("ReleaseDate") or "")}


def parse_bios(doc: Any) -> dict[str, Any]:
    """A Redfish Bios (current settings, or its pending Settings object): its attributes
    (text, numbers, booleans; anything else refused), the link to the pending settings
    and the apply times the BMC supports, where it says."""
    what = "Redfish Bios"
    _check_type(doc, "Bios", what)
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    attrs = doc.get("Attributes")
    if not isinstance(attrs, dict):
        raise ParseError(f"{what}: no Attributes object")
    for k, v in attrs.items():
        if not isinstance(v, (str, int, float, bool)) and v is not None:
            raise ParseError(f"{what}: attribute {k} is {type(v).__name__}, not a value")
    settings = doc.get("@Redfish.Settings")
    obj = settings.get("SettingsObject") if isinstance(settings, dict) else None
    link = obj.get("@odata.id") if isinstance(obj, dict) else None
    times = settings.get("SupportedApplyTimes") if isinstance(settings, dict) else None
    return {"attributes": dict(attrs),
            "settings": link if isinstance(link, str) and link.startswith("/redfish/v1")
            else None,
            "apply_times": [str(t) for t in times] if isinstance(times, list) else []}


def member_links(doc: Any, what: str) -> list[str]:
    """The @odata.id of each member of a collection."""
    out = []
    for m in _members(doc, "Members", what):
        link = m.get("@odata.id")
        if not isinstance(link, str) or not link.startswith("/redfish/v1/"):
            raise ParseError(f"{what}: a member without a /redfish/v1/ @odata.id: {m!r:.120}")
        out.append(link)
    return out


__all__ = ["member_links", "parse_log_entries", "parse_manager", "parse_network_adapter",
           "parse_power", "parse_processor", "parse_thermal", "parse_time"]
