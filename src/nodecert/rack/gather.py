"""The Redfish walks over a rack's management endpoints: each switch tray, power shelf
and CDU read by its own client (TLS verified, one time limit per request and one for the
whole walk), all at once; the shelves and the CDU several times, `sample_s` apart, so
that their readings are judged over consecutive samples.

A component that cannot be read is recorded as such (its error, never a reading): the
judges make it a FAIL naming it, and the other components are read all the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.bmc.redfish import BmcError, NotFound, RedfishClient
from nodecert.core.errors import InventoryError
from nodecert.inventory.bmc import BmcSpec, require_ca_file
from nodecert.rack.infra import (
    COOLANT,
    InfraError,
    Tree,
    cdu,
    link,
    members,
    power_shelf,
    rack_pdu,
    switch_tray,
)
from nodecert.transport.become import read_password_file

Get = Callable[[str], Any]
WALK_LIMIT_S = 120.0  # one component's whole walk (a switch tray: some 150 requests)
KINDS = ("switch_tray", "power_shelf", "rack_pdu", "cdu")


class _Walk:
    """GETs with a deadline; optional resources may be absent (HTTP 404)."""

    def __init__(self, get: Get, limit_s: float) -> None:
        self.get, self.tree = get, {}  # type: ignore[var-annotated]
        self.deadline = time.monotonic() + limit_s
        self.limit_s = limit_s

    def fetch(self, path: str | None, *, optional: bool = True) -> Any:
        if not path:
            return None
        if time.monotonic() > self.deadline:
            raise BmcError(f"reading it took longer than {self.limit_s:g} s; stopped at "
                           f"{path}")
        try:
            doc = self.get(path)
        except NotFound:
            if not optional:
                raise
            return None
        self.tree[path] = doc
        return doc

    def collection(self, path: str | None, *, optional: bool = True) -> list[str]:
        self.fetch(path, optional=optional)
        return members(self.tree, path) if path else []


def walk_switch_tray(get: Get, limit_s: float = WALK_LIMIT_S) -> Tree:
    w = _Walk(get, limit_s)
    for p in w.collection("/redfish/v1/Chassis", optional=False):
        w.fetch(p)
    for p in w.collection("/redfish/v1/UpdateService/FirmwareInventory"):
        w.fetch(p)
    for fabric in w.collection("/redfish/v1/Fabrics"):
        doc = w.fetch(fabric)
        for sp in w.collection(link(doc, "Switches")):
            for pp in w.collection(link(w.fetch(sp), "Ports")):
                w.fetch(pp)
        # the GPUs behind the ports (where the tray reports them): the domain's wiring
        for ep in w.collection(link(doc, "Endpoints")):
            w.fetch(ep)
    return w.tree


def walk_power_shelf(get: Get, limit_s: float = WALK_LIMIT_S) -> Tree:
    w = _Walk(get, limit_s)
    for sp in w.collection("/redfish/v1/PowerEquipment/PowerShelves", optional=False):
        shelf = w.fetch(sp) or {}
        w.fetch(link(shelf, "Metrics"))
        for ch in (shelf.get("Links") or {}).get("Chassis") or []:
            sub = w.fetch(f"{ch.get('@odata.id')}/PowerSubsystem") if isinstance(ch, dict) \
                else None
            for pp in w.collection(link(sub, "PowerSupplies")):
                w.fetch(pp)
    return w.tree


def walk_cdu(get: Get, limit_s: float = WALK_LIMIT_S) -> Tree:
    w = _Walk(get, limit_s)
    for up in w.collection("/redfish/v1/ThermalEquipment/CDUs", optional=False):
        unit = w.fetch(up) or {}
        detection = w.fetch(link(unit, "LeakDetection"))
        for dp in w.collection(link(detection, "LeakDetectors")):
            w.fetch(dp)
        for pp in w.collection(link(unit, "Pumps")):
            w.fetch(pp)
        for cp in w.collection(link(unit, "PrimaryCoolantConnectors")):
            conn = w.fetch(cp) or {}
            for prop, *_ in COOLANT:
                src = (conn.get(prop) or {}).get("DataSourceUri") \
                    if isinstance(conn.get(prop), dict) else None
                if isinstance(src, str) and src.startswith("/redfish/v1/"):
                    w.fetch(src)
    return w.tree


def walk_rack_pdu(get: Get, limit_s: float = WALK_LIMIT_S) -> Tree:
    w = _Walk(get, limit_s)
    for pp in w.collection("/redfish/v1/PowerEquipment/RackPDUs", optional=False):
        pdu = w.fetch(pp) or {}
        for cp in w.collection(link(pdu, "Mains")):
            w.fetch(cp)
    return w.tree


WALKS: dict[str, tuple[Callable[[Get, float], Tree], Callable[[Tree], dict[str, Any]]]] = {
    "switch_tray": (walk_switch_tray, switch_tray),
    "power_shelf": (walk_power_shelf, power_shelf),
    "cdu": (walk_cdu, cdu),
    "rack_pdu": (walk_rack_pdu, rack_pdu),
}


@dataclass
class Component:
    """One management endpoint of the rack and what was read of it: one entry in
    `samples` per reading (its normalised shape, or None where that sample failed)."""

    kind: str  # switch_tray | power_shelf | rack_pdu | cdu
    name: str
    address: str
    samples: list[dict[str, Any] | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "address": self.address,
                "samples": self.samples, "errors": self.errors, "requests": self.requests,
                "seconds": round(self.seconds, 2)}


def specs(rack: dict[str, Any]) -> list[tuple[str, dict[str, str], BmcSpec]]:
    """(kind, part, client spec) for every management endpoint the rack names; the
    password is read here once (InventoryError when it cannot be)."""
    parts = [("switch_tray", p) for p in rack.get("switch_trays") or []] + \
        [("power_shelf", p) for p in rack.get("power_shelves") or []] + \
        [("rack_pdu", p) for p in rack.get("pdus") or []] + \
        ([("cdu", rack["cdu"])] if rack.get("cdu") else [])
    if not parts:
        return []
    rf = rack.get("redfish") or {}
    if not rf.get("password_file"):
        raise InventoryError(f"rack {rack['name']}: nodecert_rack.redfish has no "
                             "password_file", hint="name the file holding the management "
                                                   "endpoints' password (mode 0600)")
    secret = read_password_file(Path(rf["password_file"]).expanduser(),
                                f"rack {rack['name']}: Redfish password file")
    ca = rf.get("ca_file")
    require_ca_file(ca, f"rack {rack['name']}: redfish", "the endpoints' certificates")
    return [(kind, part, BmcSpec(part["name"], part["address"], "redfish",
                                 int(rf.get("port", 443)), rf["username"], secret,
                                 ca_file=str(Path(ca).expanduser()) if ca else None,
                                 cert_sha256=rf.get("cert_sha256"),
                                 timeout_s=int(rf.get("timeout_s", 10))))
            for kind, part in parts]


def _read(kind: str, spec: BmcSpec, comp: Component, limit_s: float) -> None:
    walk, reader = WALKS[kind]
    client = RedfishClient(spec)
    t0 = time.monotonic()
    try:
        comp.samples.append(reader(walk(client.get, limit_s)))
    except (BmcError, InfraError) as exc:
        comp.samples.append(None)
        comp.errors.append(str(exc.what if isinstance(exc, BmcError) else exc))
    finally:
        client.close()
        comp.requests += len(client.calls)
        comp.seconds += time.monotonic() - t0


def read_rack(rack: dict[str, Any], *, stop: threading.Event | None = None,
              limit_s: float = WALK_LIMIT_S, say: Callable[[str], None] = lambda s: None
              ) -> list[Component]:
    """Every management endpoint of the rack: switch trays once, shelves and the CDU
    `samples` times, `sample_s` apart. Never raises for an endpoint that cannot be read."""
    todo = specs(rack)
    comps = [Component(kind, part["name"], part["address"]) for kind, part, _ in todo]
    if not todo:
        return comps
    samples, gap = int(rack.get("samples", 3)), float(rack.get("sample_s", 2))
    stop = stop or threading.Event()
    with ThreadPoolExecutor(max_workers=min(16, len(todo)),
                            thread_name_prefix="rack-redfish") as pool:
        for k in range(samples):
            t0 = time.monotonic()
            due = [(kind, spec, c) for (kind, _, spec), c in zip(todo, comps, strict=True)
                   if k == 0 or kind != "switch_tray"]
            list(pool.map(lambda a: _read(a[0], a[1], a[2], limit_s), due))
            say(f"rack {rack['name']}: sample {k + 1}/{samples} of {len(due)} management "
                f"endpoint(s) read in {time.monotonic() - t0:.1f} s")
            if k + 1 < samples and stop.wait(max(0.0, gap - (time.monotonic() - t0))):
                break
    return comps


__all__ = ["KINDS", "WALKS", "Component", "read_rack", "specs", "walk_cdu",
           "walk_power_shelf", "walk_switch_tray"]
