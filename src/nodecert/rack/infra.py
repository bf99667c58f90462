"""What a rack's management endpoints report over Redfish, normalised for the judges.
Pure: each reader takes the documents a walk fetched (`{path: document}`) and never
guesses -- a property a document lacks stays None, never zero or "OK".

The shapes (DMTF schemas: Chassis, SoftwareInventory, Switch, Port, PowerDistribution,
PowerSubsystem, PowerSupply, CoolingUnit, LeakDetection, CoolantConnector, Pump, Sensor):

  switch tray  {"serial", "model", "health", "state", "firmware": {id: version},
                "switches": [{"id", "firmware", "health", "state", "ports": [{"id", "link",
                "state", "health", "protocol", "speed_gbps", "gpus", "unnamed"}]}],
                "endpoints": bool}  gpus: the UUIDs (lower case, no "GPU-") of the
                fabric endpoints a port's Links name; unnamed: those without a UUID;
                endpoints: whether the tray reports any (absent, the wiring is not known)
  power shelf  {"shelves": [{"id", "serial", "firmware", "health", "state",
                "conditions", "supplies": [{"id", "health", "state", "line_input",
                "firmware"}], "redundancy": [{"type", "min", "health"}]}]}
  rack pdu     {"pdus": [{"id", "serial", "firmware", "health", "state", "conditions",
                "mains": [{"id", "breaker", "health", "state"}]}]}
  cdu          {"units": [{"id", "serial", "firmware", "health", "state", "conditions",
                "leaks": [{"name", "state", "type", "health", "status_state", "source"}],
                "pumps": [{"id", "health", "state"}],
                "readings": [READING]}]}
  READING      {"key", "label", "value", "unit", "source", "thresholds":
                {"upper_critical", "upper_caution", "lower_critical", "lower_caution"}}
"""

from __future__ import annotations

import math
from typing import Any

Tree = dict[str, Any]  # Redfish path -> its document, as a walk fetched it

# A coolant connector's readings: (property, key, label, unit).
COOLANT = (("SupplyTemperatureCelsius", "supply_temp_c", "supply temperature", "C"),
           ("ReturnTemperatureCelsius", "return_temp_c", "return temperature", "C"),
           ("DeltaTemperatureCelsius", "delta_temp_c", "temperature rise", "C"),
           ("FlowLitersPerMinute", "flow_lpm", "flow", "L/min"),
           ("SupplyPressurekPa", "supply_pressure_kpa", "supply pressure", "kPa"),
           ("ReturnPressurekPa", "return_pressure_kpa", "return pressure", "kPa"),
           ("DeltaPressurekPa", "delta_pressure_kpa", "pressure drop", "kPa"))
THRESHOLDS = (("UpperCritical", "upper_critical"), ("UpperFatal", "upper_critical"),
              ("UpperCaution", "upper_caution"), ("LowerCritical", "lower_critical"),
              ("LowerFatal", "lower_critical"), ("LowerCaution", "lower_caution"))


class InfraError(ValueError):
    """A document that is not what its path must hold (refused, never guessed)."""


def members(tree: Tree, path: str) -> list[str]:
    """A collection's member paths, in the order the service lists them."""
    doc = tree.get(path)
    if doc is None:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("Members"), list):
        raise InfraError(f"{path} is not a Redfish collection (no Members list)")
    out = []
    for m in doc["Members"]:
        ref = m.get("@odata.id") if isinstance(m, dict) else None
        if not isinstance(ref, str) or not ref.startswith("/redfish/v1/"):
            raise InfraError(f"{path}: a member without an @odata.id under /redfish/v1")
        out.append(ref)
    return out


def link(doc: Any, key: str) -> str | None:
    ref = doc.get(key) if isinstance(doc, dict) else None
    ref = ref.get("@odata.id") if isinstance(ref, dict) else None
    return ref if isinstance(ref, str) and ref.startswith("/redfish/v1/") else None


def _text(doc: dict[str, Any], key: str) -> str | None:
    v = doc.get(key)
    return str(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None


def _status(doc: dict[str, Any]) -> dict[str, Any]:
    raw = doc.get("Status")
    st: dict[str, Any] = raw if isinstance(raw, dict) else {}
    conds = [c for c in st.get("Conditions") or [] if isinstance(c, dict)]
    return {"health": _text(st, "Health"), "state": _text(st, "State"),
            "health_rollup": _text(st, "HealthRollup"),
            "conditions": [{"severity": _text(c, "Severity"), "message": _text(c, "Message"),
                            "origin": link(c, "OriginOfCondition")} for c in conds]}


def _doc(tree: Tree, path: str) -> dict[str, Any]:
    doc = tree.get(path)
    if not isinstance(doc, dict):
        raise InfraError(f"{path}: no document" if doc is None else f"{path}: not an object")
    return doc


def number(raw: Any) -> float | None:
    """A reading: a finite JSON number, else None (a string, null, NaN is not a value)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw) if math.isfinite(raw) else None


# --- switch tray ------------------------------------------------------------------------

def switch_tray(tree: Tree) -> dict[str, Any]:
    chassis = [_doc(tree, p) for p in members(tree, "/redfish/v1/Chassis")]
    first = chassis[0] if chassis else {}
    firmware = {}
    for p in members(tree, "/redfish/v1/UpdateService/FirmwareInventory"):
        d = _doc(tree, p)
        firmware[_text(d, "Id") or p.rsplit("/", 1)[-1]] = _text(d, "Version")
    switches = []
    reported = False
    for fabric in members(tree, "/redfish/v1/Fabrics"):
        reported = reported or bool(link(_doc(tree, fabric), "Endpoints"))
        for sp in members(tree, link(_doc(tree, fabric), "Switches") or ""):
            sw = _doc(tree, sp)
            ports = []
            for pp in members(tree, link(sw, "Ports") or ""):
                port = _doc(tree, pp)
                ports.append({"id": _text(port, "Id") or pp.rsplit("/", 1)[-1],
                              "link": _text(port, "LinkStatus"),
                              "protocol": _text(port, "PortProtocol"),
                              "speed_gbps": number(port.get("CurrentSpeedGbps")),
                              **_endpoints(tree, port),
                              **{k: v for k, v in _status(port).items()
                                 if k in ("health", "state")}})
            switches.append({"id": _text(sw, "Id") or sp.rsplit("/", 1)[-1],
                             "firmware": _text(sw, "FirmwareVersion"),
                             **{k: v for k, v in _status(sw).items()
                                if k in ("health", "state")}, "ports": ports})
    return {"serial": _text(first, "SerialNumber"), "model": _text(first, "Model"),
            **{k: v for k, v in _status(first).items() if k in ("health", "state")},
            "firmware": firmware, "switches": switches, "endpoints": reported}


def gpu_uuid(raw: str) -> str:
    """A GPU's UUID as both sides compare it: nvidia-smi says GPU-<uuid>, a Redfish
    endpoint's UUID identifier the bare <uuid>."""
    raw = raw.strip().lower()
    return raw[4:] if raw.startswith("gpu-") else raw


def _endpoints(tree: Tree, port: dict[str, Any]) -> dict[str, list[str]]:
    """The GPUs a port's Links name (AssociatedEndpoints: each a fabric Endpoint whose
    Identifiers hold the processor's UUID), and the endpoints that name none."""
    raw = port.get("Links")
    links: dict[str, Any] = raw if isinstance(raw, dict) else {}
    gpus: list[str] = []
    unnamed: list[str] = []
    refs = links.get("AssociatedEndpoints")
    for ref in refs if isinstance(refs, list) else []:
        path = ref.get("@odata.id") if isinstance(ref, dict) else None
        ep = tree.get(path) if isinstance(path, str) else None
        idents = ep.get("Identifiers") if isinstance(ep, dict) else None
        ids = [i for i in idents if isinstance(i, dict) and i.get("DurableNameFormat") ==
               "UUID" and isinstance(i.get("DurableName"), str)] \
            if isinstance(idents, list) else []
        if ids:
            gpus.append(gpu_uuid(ids[0]["DurableName"]))
        else:
            unnamed.append(str(path))
    return {"gpus": gpus, "unnamed": unnamed}


# --- power shelf ------------------------------------------------------------------------

def power_shelf(tree: Tree) -> dict[str, Any]:
    shelves = []
    for sp in members(tree, "/redfish/v1/PowerEquipment/PowerShelves"):
        shelf = _doc(tree, sp)
        chassis = [c.get("@odata.id") for c in (shelf.get("Links") or {}).get("Chassis") or []
                   if isinstance(c, dict)]
        supplies: list[dict[str, Any]] = []
        redundancy: list[dict[str, Any]] = []
        for ch in chassis:
            sub = tree.get(f"{ch}/PowerSubsystem")
            if not isinstance(sub, dict):
                continue
            for r in sub.get("PowerSupplyRedundancy") or []:
                if isinstance(r, dict):
                    redundancy.append({"type": _text(r, "RedundancyType"),
                                       "min": r.get("MinNeededInGroup"),
                                       **{k: v for k, v in _status(r).items()
                                          if k in ("health", "state")}})
            for pp in members(tree, link(sub, "PowerSupplies") or ""):
                psu = _doc(tree, pp)
                supplies.append({"id": _text(psu, "Id") or pp.rsplit("/", 1)[-1],
                                 "line_input": _text(psu, "LineInputStatus"),
                                 "firmware": _text(psu, "FirmwareVersion"),
                                 **{k: v for k, v in _status(psu).items()
                                    if k in ("health", "state")}})
        metrics = tree.get(link(shelf, "Metrics") or "")
        watts = (metrics or {}).get("PowerWatts") if isinstance(metrics, dict) else None
        shelves.append({"id": _text(shelf, "Id") or sp.rsplit("/", 1)[-1],
                        "serial": _text(shelf, "SerialNumber"),
                        "firmware": _text(shelf, "FirmwareVersion"), **_status(shelf),
                        "power_w": number(watts.get("Reading")) if isinstance(watts, dict)
                        else None,
                        "supplies": supplies, "redundancy": redundancy})
    return {"shelves": shelves}


# --- coolant distribution unit ------------------------------------------------------------

def _reading(tree: Tree, doc: dict[str, Any], prop: str, key: str, *, label: str,
             unit: str) -> dict[str, Any] | None:
    raw = doc.get(prop)
    if not isinstance(raw, dict):
        return None
    source = raw.get("DataSourceUri") if isinstance(raw.get("DataSourceUri"), str) else None
    sensor = tree.get(source) if source else None
    thresholds: dict[str, float] = {}
    value = number(raw.get("Reading"))
    if isinstance(sensor, dict):
        # The sensor is the reading's own record: its value is the newer one when both
        # were fetched, and its Thresholds are the equipment's limits for it.
        value = number(sensor.get("Reading")) if "Reading" in sensor else value
        for name, k in THRESHOLDS:
            t = (sensor.get("Thresholds") or {}).get(name)
            v = number(t.get("Reading")) if isinstance(t, dict) else None
            if v is not None and k not in thresholds:
                thresholds[k] = v
    return {"key": key, "label": label, "value": value, "unit": unit, "source": source,
            "thresholds": thresholds}


def _leak_detectors(tree: Tree, path: str | None) -> list[dict[str, Any]]:
    """Every leak detector a LeakDetection resource names: each member of its
    LeakDetectors collection (its type, state and status), and the detectors its groups
    summarise that no member stands for (by name). A detector whose own record was read
    is judged on that record."""
    detection = tree.get(path or "")
    if not isinstance(detection, dict):
        return []
    out: list[dict[str, Any]] = []
    for dp in members(tree, link(detection, "LeakDetectors") or ""):
        d = tree.get(dp)
        if not isinstance(d, dict):
            continue
        st = _status(d)
        out.append({"name": _text(d, "Name") or _text(d, "Id") or dp.rsplit("/", 1)[-1],
                    "state": _text(d, "DetectorState"),
                    "type": _text(d, "LeakDetectorType"),
                    "health": st["health"], "status_state": st["state"], "source": dp})
    seen = {str(x["name"]).lower() for x in out}
    for group in detection.get("LeakDetectorGroups") or []:
        for d in (group.get("Detectors") or []) if isinstance(group, dict) else []:
            if not isinstance(d, dict):
                continue
            name = _text(d, "DeviceName") or _text(d, "DataSourceUri") or "leak detector"
            if name.lower() not in seen:
                out.append({"name": name, "state": _text(d, "DetectorState"), "type": None,
                            "health": None, "status_state": None,
                            "source": _text(d, "DataSourceUri")})
    return out


# --- rack PDUs (PowerDistribution, EquipmentType RackPDU) ---------------------------------

def rack_pdu(tree: Tree) -> dict[str, Any]:
    """{"pdus": [{"id", "serial", "firmware", "health", "state", "conditions",
    "mains": [{"id", "breaker", "health", "state"}]}]}: every PDU the endpoint lists
    under PowerEquipment/RackPDUs and its mains circuits."""
    pdus = []
    for pp in members(tree, "/redfish/v1/PowerEquipment/RackPDUs"):
        pdu = _doc(tree, pp)
        mains = []
        for cp in members(tree, link(pdu, "Mains") or ""):
            c = tree.get(cp)
            if isinstance(c, dict):
                st = _status(c)
                mains.append({"id": _text(c, "Id") or cp.rsplit("/", 1)[-1],
                              "breaker": _text(c, "BreakerState"),
                              "health": st["health"], "state": st["state"]})
        pdus.append({"id": _text(pdu, "Id") or pp.rsplit("/", 1)[-1],
                     "serial": _text(pdu, "SerialNumber"),
                     "firmware": _text(pdu, "FirmwareVersion"), **_status(pdu),
                     "mains": mains})
    return {"pdus": pdus}


def cdu(tree: Tree) -> dict[str, Any]:
    units = []
    for up in members(tree, "/redfish/v1/ThermalEquipment/CDUs"):
        unit = _doc(tree, up)
        leaks = _leak_detectors(tree, link(unit, "LeakDetection"))
        pumps = []
        for pp in members(tree, link(unit, "Pumps") or ""):
            pump = _doc(tree, pp)
            pumps.append({"id": _text(pump, "Id") or pp.rsplit("/", 1)[-1],
                          **{k: v for k, v in _status(pump).items()
                             if k in ("health", "state")}})
        readings = []
        for cp in members(tree, link(unit, "PrimaryCoolantConnectors") or ""):
            conn = _doc(tree, cp)
            name = _text(conn, "Name") or f"connector {cp.rsplit('/', 1)[-1]}"
            for prop, key, label, u in COOLANT:
                r = _reading(tree, conn, prop, f"{cp.rsplit('/', 1)[-1]}.{key}",
                             label=f"{name}: {label}", unit=u)
                if r is not None:
                    readings.append(r)
        units.append({"id": _text(unit, "Id") or up.rsplit("/", 1)[-1],
                      "serial": _text(unit, "SerialNumber"),
                      "firmware": _text(unit, "FirmwareVersion"), **_status(unit),
                      "leaks": leaks, "pumps": pumps, "readings": readings})
    return {"units": units}


__all__ = ["COOLANT", "InfraError", "Tree", "cdu", "link", "members", "number",
           "power_shelf", "rack_pdu", "switch_tray"]
