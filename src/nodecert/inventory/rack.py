"""A rack-scale NVLink domain in the order spec: the inventory's `nodecert_rack` mapping,
set on every compute tray of the rack (usually in the rack's group_vars).

    nodecert_rack:
      name: rack-a1                # the rack (NVLink domain) this host is a compute tray of
      kind: GB200-NVL72            # a kind of rack-kinds.yml (docs/rack.md lists them)
      gpus: 72                     # GPUs the domain must have (a partial build says fewer)
      imex: true                   # an IMEX domain is expected (default: the kind's);
                                   #   compute-domains: the customer's Kubernetes runs
                                   #   IMEX (DRA ComputeDomains), the host service is off
      switch_trays:                # the NVLink switch trays and their management address
        - {name: nvsw-01, address: 10.10.5.21}
      power_shelves:
        - {name: ps-01, address: 10.10.5.31}
      pdus:                        # optional: rack PDUs (Redfish PowerEquipment/RackPDUs)
        - {name: pdu-01, address: 10.10.5.51}
      cdu: {name: cdu-01, address: 10.10.5.41}   # optional: the rack's coolant unit
      redfish:                     # how the switch trays, shelves and CDU are read
        username: nodecert
        password_file: /etc/nodecert/rack.pass
        ca_file: /etc/nodecert/rack-ca.pem       # or cert_sha256 (one of the two)
      firmware:                    # optional: the rack's recipe, component -> version
        driver: "580.95.05"        #   driver, gpu_vbios, switch_tray, power_shelf, cdu
      samples: 3                   # optional: consecutive readings of the coolant and
      sample_s: 2                  #   power figures, and the seconds between them

Every tray of one rack must describe it alike; a host in two racks, more trays than the
kind holds, GPUs that do not add up, a switch tray named twice or more switch trays than
the kind has are refused, each with the host and the fix. A host without `nodecert_rack`
is in no NVLink domain: it is never judged on IMEX or a clique.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from nodecert.core.yamldoc import keyed
from nodecert.inventory.bmc import parse_bmc
from nodecert_node.contract import COMPUTE_DOMAINS

KEYS = {"name", "kind", "gpus", "imex", "switch_trays", "power_shelves", "pdus", "cdu",
        "redfish",
        "firmware", "samples", "sample_s"}
# The rack's management endpoints share one set of credentials: a BMC's keys, less the
# address (each switch tray, shelf and CDU has its own) and what only a server has.
REDFISH_KEYS = {"username", "password_file", "ca_file", "cert_sha256", "port", "timeout_s"}
FIRMWARE_KEYS = ("driver", "gpu_vbios", "switch_tray", "power_shelf", "cdu")
PART_KEYS = {"name", "address"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
KINDS_FILE = Path(__file__).with_name("rack-kinds.yml")


@dataclass(frozen=True)
class RackKind:
    """A kind of rack that `nodecert_rack` may name (inventory/rack-kinds.yml): how many
    trays and GPUs it holds, its NVLink switch layout and whether it runs IMEX."""

    name: str
    trays_max: int
    gpus_per_tray: int
    gpu_models: tuple[str, ...]
    switch_trays_max: int
    imex: bool
    switch_chips_per_tray: int  # NVLink switch chips in one switch tray
    nvlinks_per_gpu: int  # one to each switch chip of a full domain


@cache
def kinds() -> dict[str, RackKind]:
    data = yaml.safe_load(KINDS_FILE.read_text())
    return {name: RackKind(name, int(k["trays_max"]), int(k["gpus_per_tray"]),
                           tuple(k["gpu_models"]), int(k["switch_trays_max"]), bool(k["imex"]),
                           int(k["switch_chips_per_tray"]), int(k["nvlinks_per_gpu"]))
            for name, k in data["kinds"].items()}


def _parts(raw: Any, key: str) -> tuple[list[dict[str, str]] | None, str | None]:
    if raw is None:
        return [], None
    if not isinstance(raw, list):
        return None, f"{key} must be a list of {{name, address}}, got {raw!r}"
    out = []
    for item in raw:
        part, why = _part(item, key)
        if part is None:
            return None, why
        out.append(part)
    names = [p["name"] for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return None, f"{key}: {', '.join(twice)} named twice"
    return out, None


def _part(raw: Any, key: str) -> tuple[dict[str, str] | None, str | None]:
    item, why = keyed(raw, PART_KEYS)
    if item is None:
        return None, f"{key}: each entry {why}"
    name, address = str(item.get("name", "")), str(item.get("address", ""))
    if not _NAME.match(name):
        return None, f"{key}: {name!r} is not a plain name"
    if not _ADDRESS.match(address):
        return None, f"{key} {name}: address {address!r} is not a host name or IP address"
    return {"name": name, "address": address}, None


def parse_rack(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong), for one host's nodecert_rack."""
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    name, kind_name = str(raw.get("name", "")), str(raw.get("kind", ""))
    if not _NAME.match(name):
        return None, f"name {name!r} is not a plain rack name"
    kind = kinds().get(kind_name)
    if kind is None:
        return None, f"kind {kind_name!r} is not one of {', '.join(sorted(kinds()))}"
    gpus = raw.get("gpus", kind.trays_max * kind.gpus_per_tray)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or \
            not 1 <= gpus <= kind.trays_max * kind.gpus_per_tray:
        return None, (f"gpus must be 1..{kind.trays_max * kind.gpus_per_tray} for a "
                      f"{kind_name}, got {gpus!r}")
    imex = raw.get("imex", kind.imex)
    if not isinstance(imex, bool) and imex != COMPUTE_DOMAINS:
        return None, (f"imex must be true, false or {COMPUTE_DOMAINS} (the customer's "
                      f"Kubernetes runs IMEX), got {imex!r}")
    spec: dict[str, Any] = {"name": name, "kind": kind_name, "gpus": gpus, "imex": imex}
    for key in ("switch_trays", "power_shelves", "pdus"):
        parts, why = _parts(raw.get(key), key)
        if parts is None:
            return None, why
        spec[key] = parts
    if len(spec["switch_trays"]) > kind.switch_trays_max:
        return None, (f"switch_trays lists {len(spec['switch_trays'])}, a {kind_name} has "
                      f"{kind.switch_trays_max}")
    spec["cdu"] = None
    if raw.get("cdu") is not None:
        spec["cdu"], why = _part(raw["cdu"], "cdu")
        if spec["cdu"] is None:
            return None, why
    spec["redfish"], why = _redfish(raw.get("redfish"), spec)
    if why:
        return None, why
    spec["firmware"], why = _firmware(raw.get("firmware"))
    if why:
        return None, why
    for key, default, low, high in (("samples", 3, 1, 60), ("sample_s", 2, 1, 600)):
        v = raw.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            return None, f"{key} must be an integer {low}..{high}, got {v!r}"
        spec[key] = v
    return spec, None


def _redfish(raw: Any, spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The management endpoints' credentials (parsed as a BMC's); required as soon as the
    rack names a switch tray, a power shelf or a CDU, since they are read over Redfish."""
    parts = spec["switch_trays"] or spec["power_shelves"] or spec["pdus"] or spec["cdu"]
    if raw is None:
        return None, ("redfish (username, password_file, ca_file or cert_sha256) must be "
                      "set: the switch trays, power shelves, PDUs and CDU are read over "
                      "Redfish"
                      if parts else None)
    item, why = keyed(raw, REDFISH_KEYS)
    if item is None:
        return None, f"redfish: {why}"
    parsed, why = parse_bmc({**item, "address": "rack", "protocol": "redfish"})
    if parsed is None:
        return None, f"redfish: {why}"
    return {k: v for k, v in parsed.items() if k in REDFISH_KEYS}, None


def _firmware(raw: Any) -> tuple[dict[str, str] | None, str | None]:
    if raw is None:
        return {}, None
    item, why = keyed(raw, set(FIRMWARE_KEYS))
    if item is None:
        return None, f"firmware: {why}"
    out = {}
    for k, v in item.items():
        if isinstance(v, (dict, list, bool)) or v is None or not str(v).strip():
            return None, f"firmware: {k} must be one version string, got {v!r}"
        out[k] = str(v).strip()
    return out, None


@dataclass
class TrayInfo:
    """What the cross-host rules need of one host: its rack spec as parsed, the racks its
    own variables and groups name (more than one: a tray in two racks), its order."""

    host: str
    rack: dict[str, Any]
    named_by: dict[str, str]  # rack name -> where it is set (host, group NAME)
    gpu_model: str
    gpu_count: int


def rack_problems(trays: list[TrayInfo]) -> list[tuple[str, str, str]]:
    """(host, what is wrong, how to fix) for every rule a set of trays breaks. Pure."""
    out: list[tuple[str, str, str]] = []
    by_rack: dict[str, list[TrayInfo]] = {}
    for t in trays:
        if len(t.named_by) > 1:
            where = ", ".join(f"{n} ({w})" for n, w in sorted(t.named_by.items()))
            out.append((t.host, f"is a compute tray of two racks: {where}",
                        "set nodecert_rack for one rack only (a tray sits in one rack)"))
            continue
        by_rack.setdefault(t.rack["name"], []).append(t)
    for name, members in sorted(by_rack.items()):
        first = members[0]
        kind = kinds()[first.rack["kind"]]
        for t in members[1:]:
            if t.rack != first.rack:
                diff = sorted(k for k in set(t.rack) | set(first.rack)
                              if t.rack.get(k) != first.rack.get(k))
                out.append((t.host, f"describes rack {name} differently from {first.host} "
                                    f"({', '.join(diff)})",
                            "set nodecert_rack once, in the rack's group_vars"))
        hosts = sorted(t.host for t in members)
        if len(members) > kind.trays_max:
            out.append((hosts[kind.trays_max], f"rack {name} lists {len(members)} compute "
                        f"trays; a {kind.name} holds {kind.trays_max}",
                        "move the extra hosts to their own rack"))
        for t in members:
            if t.gpu_model not in kind.gpu_models:
                out.append((t.host, f"orders {t.gpu_model} GPUs; a {kind.name} tray carries "
                                    f"{', '.join(kind.gpu_models)}",
                            "fix nodecert_gpu_model or the rack's kind"))
            elif t.gpu_count != kind.gpus_per_tray:
                out.append((t.host, f"orders {t.gpu_count} GPUs; a {kind.name} tray carries "
                                    f"{kind.gpus_per_tray}",
                            "fix nodecert_gpu_count"))
        total = sum(t.gpu_count for t in members)
        if total != first.rack["gpus"]:
            out.append((first.host, f"rack {name} expects {first.rack['gpus']} GPUs; its "
                                    f"{len(members)} trays order {total}",
                        "list every compute tray of the rack in the inventory, or set the "
                        "rack's gpus to what was built"))
    return out


__all__ = ["FIRMWARE_KEYS", "KEYS", "REDFISH_KEYS", "RackKind", "TrayInfo",
           "kinds",
           "parse_rack", "rack_problems"]
