"""What a BMC reports, read out of band: over Redfish (preferred) or IPMI (ipmitool
lanplus), normalised to one shape for the judges (bmcjudge):

    {"sensors": [...], "power": {...} | None, "sel": [...], "firmware": str | None,
     "gpus": [...] | None, "nics": [...] | None, "firmware_inventory": [...] | None,
     "firmware_error": str (why the inventory was not read, where it was not)}

and one power/temperature sample at a time while the node's checks run.

Long because both sources live here side by side (Redfish: discovery, sensors, power,
the event log, parts, the firmware inventory and the BIOS; IPMI: the same read with
ipmitool), so that what each reports is normalised to one shape in one place.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Protocol

from nodecert.bmc.redfish import BmcError, NotFound, RedfishClient
from nodecert.inventory.bmc import BmcSpec
from nodecert_node.contract import Evidence
from nodecert_node.parse import ParseError
from nodecert_node.parse import ipmitool as ipmi
from nodecert_node.parse import redfish as rf

# IPMI's generic redundancy states (event/reading type 0Bh), as ipmitool prints them: a
# power-supply sensor with one of these is the supplies' redundancy, never a supply.
REDUNDANCY_STATES = {
    "fully redundant": "OK",
    "redundancy lost": "Critical",
    "redundancy degraded": "Warning",
    "non-redundant: sufficient from redundant": "Warning",
    "non-redundant: sufficient from insufficient": "Warning",
    "non-redundant: insufficient resources": "Critical",
    "redundancy degraded from fully redundant": "Warning",
    "redundancy degraded from non-redundant": "Warning",
}
READING = re.compile(r"^-?\d+(?:\.\d+)? (?:Watts|Volts|Amps|degrees C|RPM|percent)$")
# The power supply's own sensor-specific states (sensor type 08h, offsets 0-6).
SUPPLY_STATES = ("presence detected", "failure detected", "predictive failure",
                 "power supply ac lost", "ac lost or out-of-range",
                 "ac out-of-range, but present", "config error")


def ipmi_supplies(rows: list[dict[str, Any]], capacity_w: float | None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`sdr type "Power Supply"` rows into supplies and redundancy groups.

    A row with a redundancy state is the supplies' redundancy; a row with the supply's
    own states (or none asserted: nothing present) is a supply; every other row (a
    reading in watts or volts, "State Asserted", "No Reading") is another sensor of the
    supplies and judged with the sensors, never taken for a supply."""
    psus: list[dict[str, Any]] = []
    redundancy: list[dict[str, Any]] = []
    for r in rows:
        # a reading printed beside the states ("95 Watts, Presence detected") is set apart
        named = [s for s in r["states"] if not READING.match(s)]
        states = [s.lower() for s in named]
        modes = [s for s in named if s.lower() in REDUNDANCY_STATES]
        if modes:
            worst = max((REDUNDANCY_STATES[m.lower()] for m in modes),
                        key=("OK", "Warning", "Critical").index)
            redundancy.append({"name": r["name"], "mode": ", ".join(modes), "health": worst,
                               "state": "Enabled"})
        elif (r.get("status") != "ns" and all(s in SUPPLY_STATES for s in states)
              and (states or len(named) == len(r["states"]))):
            psus.append({
                "name": r["name"], "capacity_w": capacity_w, "input_w": None,
                "output_w": None, "firmware": "",
                "state": "Enabled" if "presence detected" in states else "Absent",
                "health": "Critical" if any(s in states for s in (
                    "failure detected", "power supply ac lost", "ac lost or out-of-range"))
                else "Warning" if any(s in states for s in (
                    "predictive failure", "ac out-of-range, but present", "config error"))
                else "OK"})
    return psus, redundancy


class BmcSource(Protocol):
    evidence: list[Evidence]

    def snapshot(self) -> dict[str, Any]: ...

    def sample(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


# nodecert policy: a GPU server's BMC lists a handful of systems, processors, PCIe
# devices and adapters (an HGX board: 8 GPUs, 2 CPUs, ~30 PCIe functions); 512 members
# leaves room for any real one, and a collection past it is refused rather than read
# one request per member. One full read of a BMC (the snapshot) gets 120 s in all: a
# slow or hostile BMC errors its own checks instead of holding the host's run.
MAX_MEMBERS = 512
SNAPSHOT_BUDGET_S = 120.0


class ReadBudget:
    """The time one full read of a BMC may take: started by a snapshot, looked at
    before each request or ipmitool run."""

    def __init__(self, seconds: float = SNAPSHOT_BUDGET_S) -> None:
        self.seconds = seconds
        self._deadline: float | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self._deadline = time.monotonic() + self.seconds
        try:
            yield
        finally:
            self._deadline = None

    def check(self, before: str) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise BmcError(f"reading the BMC took longer than the {self.seconds:g} s one "
                           f"full read may take (stopped before {before})",
                           hint="check the BMC's load and network; a BMC this slow cannot "
                                "vouch for the node")


def _capped(links: list[str], what: str) -> list[str]:
    if len(links) > MAX_MEMBERS:
        raise BmcError(f"the BMC lists {len(links)} {what}, more than the {MAX_MEMBERS} "
                       "nodecert reads from one collection: refused")
    return links


def _first(get: Any, root: dict[str, Any], key: str) -> str | None:
    link = (root.get(key) or {}).get("@odata.id") if isinstance(root.get(key), dict) else None
    if not link:
        return None
    links = _capped(rf.member_links(get(link), key), key)
    return links[0] if links else None


def _link(doc: dict[str, Any], key: str) -> str | None:
    v = doc.get(key)
    return v.get("@odata.id") if isinstance(v, dict) else None


class RedfishSource:
    """Service root -> the first System, Chassis and Manager (a GPU server's BMC lists
    its board first; a site with another layout names nothing else here)."""

    budget = ReadBudget()  # never started: each source gets its own in __init__

    def __init__(self, spec: BmcSpec) -> None:
        self.client = RedfishClient(spec)
        self.evidence: list[Evidence] = []
        self.firmware_error = ""
        self.bios_error = ""
        self._paths: dict[str, str | None] | None = None
        self.budget = ReadBudget()

    def _fetch(self, path: str) -> Any:
        self.budget.check(f"GET {path}")
        return self.client.get(path)

    def _discover(self) -> dict[str, str | None]:
        if self._paths is None:
            root = self._fetch("/redfish/v1")
            if not isinstance(root, dict):
                raise BmcError("the Redfish service root is not a JSON object")
            self._paths = {"system": _first(self._fetch, root, "Systems"),
                           "chassis": _first(self._fetch, root, "Chassis"),
                           "manager": _first(self._fetch, root, "Managers"),
                           "update": _link(root, "UpdateService")}
        return self._paths

    def _get(self, name: str, path: str) -> Any:
        doc = self._fetch(path)
        self.evidence.append(self.client.evidence(name, path, doc))
        return doc

    def _sel(self, manager: str) -> list[dict[str, Any]]:
        services = self._fetch(f"{manager}/LogServices")
        links = _capped(rf.member_links(services, "LogServices"), "LogServices")
        sel = [x for x in links if x.rstrip("/").rsplit("/", 1)[-1].upper() == "SEL"]
        if not sel and not links:
            return []
        service = self._fetch((sel or links)[0])
        entries = _link(service, "Entries") if isinstance(service, dict) else None
        if not entries:
            raise BmcError(f"log service {(sel or links)[0]} has no Entries")
        return rf.parse_log_entries(self._get("sel", entries))

    def _gpus(self, system: str) -> list[dict[str, Any]] | None:
        doc = self._fetch(system)
        if not isinstance(doc, dict):
            return None
        procs = _link(doc, "Processors")
        out = [rf.parse_processor(self._fetch(p))
               for p in _capped(rf.member_links(self._fetch(procs), "Processors"),
                                "Processors")] if procs else []
        gpus = [p for p in out if p["type"] == "GPU"]
        return gpus or self._pcie_gpus(doc) or None

    def _pcie_gpus(self, system: dict[str, Any]) -> list[dict[str, Any]]:
        """GPUs a BMC lists only as PCIe devices: the system's PCIeDevices (an array of
        links in older schemas, a collection in newer ones) that are NVIDIA GPUs."""
        raw = system.get("PCIeDevices")
        if isinstance(raw, list):
            links = [str(m.get("@odata.id")) for m in raw
                     if isinstance(m, dict) and m.get("@odata.id")]
        elif isinstance(raw, dict) and raw.get("@odata.id"):
            links = rf.member_links(self._fetch(str(raw["@odata.id"])), "PCIeDevices")
        else:
            return []
        devices = []
        for link in _capped(links, "PCIeDevices"):
            doc = self._fetch(link)
            devices.append(rf.parse_pcie_device(doc, self._pcie_functions(doc)))
        return [{**d, "type": "GPU"} for d in devices if d["gpu"]]

    def _pcie_functions(self, device: Any) -> list[dict[str, Any]]:
        """A device's PCIe functions (their ids decide what the device is): the
        PCIeFunctions collection (newer schemas) or Links.PCIeFunctions (older)."""
        if not isinstance(device, dict):
            return []
        coll = device.get("PCIeFunctions")
        if isinstance(coll, dict) and coll.get("@odata.id"):
            links = rf.member_links(self._fetch(str(coll["@odata.id"])), "PCIeFunctions")
        else:
            listed = (device.get("Links") or {}).get("PCIeFunctions") \
                if isinstance(device.get("Links"), dict) else None
            links = [str(m["@odata.id"]) for m in listed or []
                     if isinstance(m, dict) and m.get("@odata.id")]
        return [rf.parse_pcie_function(self._fetch(f))
                for f in _capped(links, "PCIeFunctions")]

    def _nics(self, chassis: str) -> list[dict[str, Any]] | None:
        doc = self._fetch(chassis)
        adapters = _link(doc, "NetworkAdapters") if isinstance(doc, dict) else None
        if not adapters:
            return None
        return [rf.parse_network_adapter(self._fetch(a))
                for a in _capped(rf.member_links(self._fetch(adapters), "NetworkAdapters"),
                                 "NetworkAdapters")]

    def _firmware(self, update: str | None) -> list[dict[str, Any]] | None:
        """Every FirmwareInventory member (None where the BMC has no UpdateService)."""
        if not update:
            self.firmware_error = "the service root lists no UpdateService"
            return None
        try:
            service = self._fetch(update)
            inv = _link(service, "FirmwareInventory") if isinstance(service, dict) else None
            if not inv:
                self.firmware_error = f"{update} lists no FirmwareInventory"
                return None
            collection = self._get("firmware inventory", inv)
            members = [rf.parse_software_inventory(self._fetch(link)) for link in
                       _capped(rf.member_links(collection, "FirmwareInventory"),
                               "FirmwareInventory members")]
        except (ParseError, NotFound) as exc:
            # one broken member must not cost the sensors, the log and the power
            self.firmware_error = f"the firmware inventory could not be read: {exc}"
            return None
        self.evidence.append(Evidence.of(
            "firmware versions", f"GET {inv}/*", 200,
            "\n".join(f"{m['id']}\t{m['version']}" for m in members)))
        return members

    def _coolant(self, chassis: str) -> list[dict[str, Any]]:
        """A liquid-cooled server's own coolant connectors (its chassis's
        ThermalSubsystem), as sensors; none where the BMC lists none (air-cooled)."""
        doc = self._fetch(chassis)
        sub = _link(doc, "ThermalSubsystem") if isinstance(doc, dict) else None
        if not sub:
            return []
        try:
            coll = _link(self._fetch(sub), "CoolantConnectors")
            if not coll:
                return []
            out: list[dict[str, Any]] = []
            for link in _capped(rf.member_links(self._fetch(coll), "CoolantConnectors"),
                                "CoolantConnectors"):
                conn = self._fetch(link)
                sensors: dict[str, Any] = {}
                for prop, _, _ in rf.COOLANT_READINGS:
                    raw = conn.get(prop) if isinstance(conn, dict) else None
                    src = raw.get("DataSourceUri") if isinstance(raw, dict) else None
                    if isinstance(src, str) and src.startswith("/redfish/v1/"):
                        # a sensor not found: the excerpt's own reading stands, unlimited
                        with contextlib.suppress(NotFound):
                            sensors[src] = self._fetch(src)
                out += rf.parse_coolant_connector(conn, sensors)
            return out
        except NotFound:
            return []

    def _bios(self, system: str | None) -> dict[str, Any] | None:
        """The system's BIOS settings and those pending for its next reset (None where
        the BMC lists no Bios: bios_error says why)."""
        doc = self._fetch(system) if system else None
        link = _link(doc, "Bios") if isinstance(doc, dict) else None
        if not link:
            self.bios_error = "the system lists no Bios"
            return None
        try:
            bios = rf.parse_bios(self._get("bios", link))
            pending: dict[str, Any] = {}
            if bios["settings"]:
                try:
                    pending = rf.parse_bios(self._fetch(bios["settings"]))["attributes"]
                except NotFound:
                    pending = {}
        except (ParseError, NotFound) as exc:
            self.bios_error = f"the BIOS settings could not be read: {exc}"
            return None
        return {"attributes": bios["attributes"], "pending": pending,
                "settings": bios["settings"]}

    def snapshot(self) -> dict[str, Any]:
        with self.budget.running():
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        p = self._discover()
        if not p["chassis"] or not p["manager"]:
            raise BmcError("the Redfish service lists no Chassis or no Manager")
        try:
            sensors = rf.parse_thermal(self._get("thermal", f"{p['chassis']}/Thermal"))
            power = rf.parse_power(self._get("power", f"{p['chassis']}/Power"))
            manager = rf.parse_manager(self._get("manager", p["manager"]))
            coolant = self._coolant(p["chassis"])
            return {"sensors": sensors + power["voltages"] + coolant, "power": power,
                    "sel": self._sel(p["manager"]), "firmware": manager["firmware"],
                    "gpus": self._gpus(p["system"]) if p["system"] else None,
                    "nics": self._nics(p["chassis"]),
                    "firmware_inventory": self._firmware(p.get("update")),
                    "firmware_error": self.firmware_error,
                    "bios": self._bios(p["system"]), "bios_error": self.bios_error}
        except ParseError as exc:
            raise BmcError(f"the BMC's Redfish answer is not what the schema says: {exc}") \
                from None

    def sample(self) -> dict[str, Any]:
        p = self._discover()
        power = rf.parse_power(self._fetch(f"{p['chassis']}/Power"))
        temps = rf.parse_thermal(self._fetch(f"{p['chassis']}/Thermal"))
        return {"t": round(time.time(), 1), "power_w": power["consumed_w"],
                "temps": {s["name"]: s["reading"] for s in temps
                          if s["kind"] == "temperature" and s["reading"] is not None}}

    def close(self) -> None:
        self.client.close()


# RMCP+ cipher suites: 17 authenticates with HMAC-SHA256 and encrypts with AES-CBC-128
# (IPMI v2.0 rev 1.1 errata, table 22-20); 3 with HMAC-SHA1, the suite every IPMI 2.0
# BMC has. The stronger one is asked for first; the one used is recorded.
CIPHER_SUITES = (17, 3)


class IpmiSource:
    """ipmitool over RMCP+ (lanplus, cipher suite 17 where the BMC offers it, else 3);
    the password reaches ipmitool in its environment (-E), never on its command line."""

    def __init__(self, spec: BmcSpec, cipher: int | None = None) -> None:
        self.spec = spec
        # None until the first command settled it (17, or 3 when 17 was refused).
        self.cipher = cipher
        self.cipher_note = f"cipher suite {cipher} (set)" if cipher is not None else ""
        self.evidence: list[Evidence] = []
        self.budget = ReadBudget()

    def _run(self, *args: str, keep: bool = True) -> str:
        if self.cipher is not None:
            return self._run_with(self.cipher, args, keep)
        try:
            out = self._run_with(CIPHER_SUITES[0], args, keep)
        except BmcError as first:
            if "gave no answer" in first.args[0]:
                raise
            try:
                out = self._run_with(CIPHER_SUITES[1], args, keep)
            except BmcError:
                raise first from None
            self.cipher = CIPHER_SUITES[1]
            self.cipher_note = (f"cipher suite {CIPHER_SUITES[1]}: suite "
                                f"{CIPHER_SUITES[0]} refused ({first.args[0][-120:]})")
            return out
        self.cipher = CIPHER_SUITES[0]
        self.cipher_note = f"cipher suite {CIPHER_SUITES[0]}"
        return out

    def _run_with(self, cipher: int, args: tuple[str, ...], keep: bool) -> str:
        self.budget.check(f"ipmitool {' '.join(args)}")
        argv = ["ipmitool", "-I", "lanplus", "-H", self.spec.address, "-p",
                str(self.spec.port), "-U", self.spec.username, "-E", "-C", str(cipher),
                "-N", str(min(self.spec.timeout_s, 10)), "-R", "1", *args]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": "UTC", "LC_ALL": "C",
               "IPMI_PASSWORD": self.spec.password.reveal()}
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=env,
                               timeout=self.spec.timeout_s * 3, check=False)
        except FileNotFoundError:
            raise BmcError("ipmitool is not installed on the controller",
                           hint="install ipmitool (Debian/Ubuntu: apt-get install "
                                "ipmitool), or use protocol: redfish") from None
        except subprocess.TimeoutExpired:
            raise BmcError(f"BMC {self.spec.describe()}: ipmitool {' '.join(args)} gave no "
                           f"answer within {self.spec.timeout_s * 3} s") from None
        if p.returncode != 0:
            err = (p.stderr or p.stdout).strip().splitlines()
            why = err[-1] if err else f"exit status {p.returncode}"
            hint = ("check nodecert_bmc.username and the BMC password"
                    if "RAKP" in why or "session" in why.lower() else
                    "check the BMC's address and that IPMI over LAN is enabled")
            raise BmcError(f"BMC {self.spec.describe()}: ipmitool {' '.join(args)} failed: "
                           f"{why[:200]}", hint=hint)
        if keep:
            shown = " ".join(a for a in argv if a != self.spec.password.reveal())
            self.evidence.append(Evidence.of(f"ipmitool {' '.join(args)}", shown,
                                             p.returncode, p.stdout,
                                             time.monotonic() - t0))
        return p.stdout

    def snapshot(self) -> dict[str, Any]:
        with self.budget.running():
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        try:
            sensors = ipmi.parse_sensor(self._run("sensor"))
            psu_rows = ipmi.parse_sdr_elist(self._run("sdr", "type", "Power Supply"))
            sel = ipmi.parse_sel(self._run("sel", "elist"))
            mc = ipmi.parse_mc_info(self._run("mc", "info"))
        except ParseError as exc:
            raise BmcError(f"BMC {self.spec.describe()}: ipmitool's output is not what "
                           f"nodecert reads: {exc}") from None
        watts = [s for s in sensors if s["kind"] == "power" and s["reading"] is not None]
        psus, redundancy = ipmi_supplies(psu_rows, self.spec.psu_capacity_w)
        power = {"consumed_w": max((s["reading"] for s in watts), default=None),
                 "psus": psus, "redundancy": redundancy, "voltages": []}
        return {"sensors": sensors, "power": power, "sel": sel,
                "firmware": mc.get("Firmware Revision"), "gpus": None, "nics": None,
                "firmware_inventory": None,
                "firmware_error": "IPMI has no firmware inventory (read it over Redfish)",
                "bios": None, "bios_error": "IPMI does not report BIOS settings (read them "
                                            "over Redfish)",
                "discrete": self._optional("sdr elist", ipmi.parse_sdr_elist, "sdr", "elist"),
                "chassis": self._optional("chassis status", ipmi.parse_chassis_status,
                                          "chassis", "status"),
                "session": f"IPMI 2.0 lanplus, {self.cipher_note}"}

    def _optional(self, what: str, parse: Any, *args: str) -> Any:
        """A reading some BMCs do not implement: None (and said in the result's facts)
        when the BMC refuses it; output that answers but does not read is an error."""
        try:
            text = self._run(*args)
        except BmcError:
            return None
        try:
            return parse(text)
        except ParseError as exc:
            raise BmcError(f"BMC {self.spec.describe()}: ipmitool {what}'s output is not what "
                           f"nodecert reads: {exc}") from None

    def sample(self) -> dict[str, Any]:
        sensors = ipmi.parse_sensor(self._run("sensor", keep=False))
        watts = [s["reading"] for s in sensors if s["kind"] == "power"
                 and s["reading"] is not None]
        return {"t": round(time.time(), 1), "power_w": max(watts) if watts else None,
                "temps": {s["name"]: s["reading"] for s in sensors
                          if s["kind"] == "temperature" and s["reading"] is not None}}

    def close(self) -> None:
        return None


def source_for(spec: BmcSpec) -> BmcSource:
    return RedfishSource(spec) if spec.protocol == "redfish" else IpmiSource(spec)


__all__ = [
    "CIPHER_SUITES",
    "MAX_MEMBERS",
    "REDUNDANCY_STATES",
    "SNAPSHOT_BUDGET_S",
    "SUPPLY_STATES",
    "BmcSource",
    "IpmiSource",
    "ReadBudget",
    "RedfishSource",
    "ipmi_supplies",
    "source_for",
]
