"""hardware.inventory, hardware.pcie, hardware.topology."""

from __future__ import annotations

import os
from typing import Any

from nodecert_node import gpu
from nodecert_node.context import (
    Ctx,
    Facts,
    Gathered,
    judge_findings,
    try_text,
    within,
)
from nodecert_node.contract import Limits, Result, Verdict
from nodecert_node.parse import ParseError, mlxfw, pci, system, topo
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, read_file, run, which

# --- hardware.inventory -----------------------------------------------------------------


def _macs() -> list[str]:
    """MACs of physical NICs (with a PCI device); all non-loopback ones if none is."""
    base = "/sys/class/net"
    phys: list[str] = []
    other: list[str] = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if name == "lo":
            continue
        try:
            with open(f"{base}/{name}/address") as f:
                mac = f.read().strip().lower()
        except OSError:
            continue
        if not mac or mac == "00:00:00:00:00:00":
            continue
        (phys if os.path.exists(f"{base}/{name}/device") else other).append(mac)
    return sorted(set(phys or other))


def gather_inventory(ctx: Ctx) -> Gathered:
    header, gpus, ev = gpu.inventory(ctx)
    facts: Facts = {"driver": header.get("Driver Version"), "gpus": gpus}
    ls = try_text(ev, ["lspci", "-nn", "-D"], ctx)
    facts["pci_gpus"] = [d["slot"] for d in pci.nvidia_gpus(pci.parse_lspci(ls))] if ls else None
    cpu = try_text(ev, ["lscpu"], ctx)
    facts["cpu"] = system.parse_lscpu(cpu) if cpu else None
    dmi = try_text(ev, ["dmidecode", "-t", "1", "-t", "2", "-t", "17"], ctx)
    records = system.parse_dmidecode(dmi) if dmi else []
    facts["dmi"] = system.dmi_identity(records) if records else None
    facts["dimms"] = system.dmi_memory_gb(records) if records else None
    try:
        mem = read_file("/proc/meminfo")
        facts["meminfo_total_gb"] = round(system.parse_meminfo(mem.text)["MemTotal"] / 2**30, 1)
    except OSError:
        facts["meminfo_total_gb"] = None
    blk = try_text(ev, ["lsblk", "-J", "-b", "-d", "-o", "NAME,SIZE,MODEL,SERIAL,TRAN,TYPE"], ctx)
    disks = system.parse_lsblk(blk) if blk else []
    facts["nvme"] = [d for d in disks if d["tran"] == "nvme" or str(d["name"]).startswith("nvme")]
    facts["nic_macs"] = _macs()
    # The HCAs' firmware and PSID where NVIDIA's firmware tools are installed (the
    # firmware recipe's in-band reading; ibstat gives the version without the PSID).
    mlx = try_text(ev, ["mlxfwmanager", "--query"], ctx) if which("mlxfwmanager") else None
    try:
        facts["hca_firmware"] = {d["pci"]: {"fw": d["versions"]["FW"]["current"],
                                            "psid": d["psid"]}
                                 for d in mlxfw.parse_mlx_query(mlx)} if mlx else None
    except ParseError:
        facts["hca_firmware"] = None
    return facts, ev


def identity(facts: Facts) -> dict[str, Any]:
    """The node's hardware identity, the certificate's subject."""
    dmi = facts.get("dmi") or {}
    return {"system_serial": dmi.get("system_serial", ""),
            "system_uuid": dmi.get("system_uuid", ""),
            "baseboard_serial": dmi.get("baseboard_serial", ""),
            "gpus": [{"bus_id": g["bus_id"], "serial": g.get("serial") or "",
                      "uuid": g.get("uuid") or ""} for g in facts.get("gpus", [])],
            "nic_macs": list(facts.get("nic_macs", [])),
            "nvme": [{"name": d["name"], "serial": d["serial"], "model": d["model"],
                      "size_bytes": d["size_bytes"]} for d in facts.get("nvme", [])]}


def _judge_gpus(facts: Facts, spec: dict[str, Any], limits: Limits, fails: list[str],
                warns: list[str]) -> None:
    gpus = facts["gpus"]
    want = spec.get("gpu_count")
    if want is not None and len(gpus) != int(want):
        present = ", ".join(g["bus_id"] for g in gpus)
        fails.append(f"{len(gpus)} GPUs visible to the driver, the spec orders {want} "
                     f"(present: {present})")
    pci_gpus = facts.get("pci_gpus")
    if pci_gpus is not None and len(pci_gpus) != len(gpus):
        lost = sorted(set(pci_gpus) - {g["bus_id"] for g in gpus})
        fails.append(f"{len(pci_gpus)} NVIDIA GPUs on the PCI bus but {len(gpus)} visible to "
                     f"the driver (not initialised: {', '.join(lost) or 'unknown'})")
    for g in gpus:
        within(limits, "gpu.names", g["name"],
               f"GPU {g['bus_id']} model (the spec orders {spec.get('gpu_model')})", fails)
        within(limits, "gpu.memory_mib_min", g["memory_total_mib"],
               f"GPU {g['bus_id']} memory", fails)
        if not g.get("serial") or not g.get("uuid"):
            warns.append(f"GPU {g['bus_id']} reports no serial/UUID: it cannot be bound to "
                         "the certificate")
    _judge_unique_ids(gpus, limits, fails)


def _judge_unique_ids(gpus: list[dict[str, Any]], limits: Limits, fails: list[str]) -> None:
    """Every GPU has its own UUID. A serial number names the board: one GPU's, or on a
    Grace-Blackwell tray the module's, which its two GPUs share (the model's profile says
    how many GPUs one serial may name: gpu.gpus_per_serial_max, default 1)."""
    by_uuid: dict[str, list[str]] = {}
    by_serial: dict[str, list[str]] = {}
    for g in gpus:
        if g.get("uuid"):
            by_uuid.setdefault(str(g["uuid"]), []).append(str(g["bus_id"]))
        if g.get("serial") and set(str(g["serial"])) != {"0"}:
            by_serial.setdefault(str(g["serial"]), []).append(str(g["bus_id"]))
    for uuid, buses in sorted(by_uuid.items()):
        if len(buses) > 1:
            fails.append(f"GPUs {', '.join(buses)} report the same UUID {uuid}")
    share = limits.opt("gpu.gpus_per_serial_max")
    for serial, buses in sorted(by_serial.items()):
        if len(buses) < 2:
            continue
        if share is None:
            fails.append(f"GPUs {', '.join(buses)} report the same serial number {serial}")
        elif not share.check(len(buses)).ok:
            fails.append(f"GPUs {', '.join(buses)} report the same serial number {serial}: "
                         f"{share.check(len(buses)).message}")


def _judge_nvme(nvme: list[dict[str, Any]], spec: dict[str, Any], fails: list[str]) -> None:
    """The NVMe drives against the order: at least as many, each at least as large (1%
    below the ordered size allowed: vendors' GB and the kernel's bytes round apart)."""
    if spec.get("nvme_count") is not None and len(nvme) < int(spec["nvme_count"]):
        fails.append(f"{len(nvme)} NVMe drives, the spec orders {spec['nvme_count']}")
    if spec.get("nvme_min_gb"):
        for d in nvme:
            if d["size_bytes"] < float(spec["nvme_min_gb"]) * 1e9 * 0.99:
                fails.append(f"NVMe {d['name']} is {d['size_bytes'] / 1e9:.0f} GB, the spec "
                             f"orders >= {spec['nvme_min_gb']} GB")


def judge_inventory(facts: Facts, spec: dict[str, Any], limits: Limits) -> Result:
    name = "hardware.inventory"
    fails: list[str] = []
    warns: list[str] = []
    gpus = facts["gpus"]
    if "threshold_profile" in spec and not spec["threshold_profile"]:
        warns.append(f"no threshold profile for {spec.get('gpu_model')}: the GPUs' name, "
                     "memory, PCIe, NVLink and performance are not judged against the "
                     "model's published figures, only the common thresholds apply (add "
                     f"validators/profiles/{spec.get('gpu_model')}.yml with sourced values)")
    warns.extend(limits.gap_notes("gpu.names", "gpu.memory_mib_min"))
    _judge_gpus(facts, spec, limits, fails, warns)
    cpu = facts.get("cpu")
    cores = cpu["cores"] if cpu else None
    if spec.get("cpu_cores") and cores is not None and cores < int(spec["cpu_cores"]):
        fails.append(f"{cores} CPU cores, the spec orders {spec['cpu_cores']}")
    if spec.get("cpu_model") and cpu and spec["cpu_model"] not in cpu["model"]:
        fails.append(f"CPU is {cpu['model']!r}, the spec orders {spec['cpu_model']!r}")
    dimms = facts.get("dimms")
    ram = dimms["total_gb"] if dimms and dimms["dimms"] else facts.get("meminfo_total_gb")
    ram_src = "DIMMs (dmidecode)" if dimms and dimms["dimms"] else "/proc/meminfo"
    if spec.get("ram_gb") and ram is not None:
        floor = float(spec["ram_gb"]) * (1.0 if ram_src.startswith("DIMM") else 0.95)
        if ram < floor:
            fails.append(f"{ram:g} GB RAM ({ram_src}), the spec orders {spec['ram_gb']} GB")
    nvme = facts.get("nvme", [])
    _judge_nvme(nvme, spec, fails)
    n = max(len(gpus), 1)
    if cores is not None:
        within(limits, "host.cpu_cores_per_gpu", round(cores / n, 1),
               "CPU cores per GPU (sizing rule)", warns)
    if ram is not None:
        within(limits, "host.ram_gb_per_gpu", round(ram / n, 1), "RAM per GPU (sizing rule)",
               warns)
    ident = identity(facts)
    if not ident["system_serial"] and not ident["baseboard_serial"]:
        warns.append("no DMI system or baseboard serial: the certificate is bound to GPUs, "
                     "NICs and drives only")
    value = {"gpus": len(gpus), "gpu_model": gpus[0]["name"] if gpus else None,
             "cpu_cores": cores, "cpu_model": cpu["model"] if cpu else None,
             "cpu_arch": cpu.get("arch") or None if cpu else None,
             "ram_gb": ram, "ram_source": ram_src, "nvme": len(nvme)}
    return judge_findings(
        name, fails, warns,
        f"{len(gpus)}x {value['gpu_model']}, {cores} cores, {ram:g} GB RAM, {len(nvme)} NVMe "
        "as ordered" if ram is not None else f"{len(gpus)}x {value['gpu_model']} as ordered",
        value=value, thresholds=limits.pick("gpu.names", "gpu.memory_mib_min",
                                            "host.cpu_cores_per_gpu", "host.ram_gb_per_gpu"),
        # the firmware a rack's trays must share (rack.firmware): each GPU's VBIOS
        facts={"identity": ident, "driver": facts.get("driver"),
               "vbios": {str(g.get("bus_id")): g.get("vbios") for g in gpus},
               **({"hca_firmware": facts["hca_firmware"]} if facts.get("hca_firmware")
                  else {})},
        fault_code="NC-HW-INVENTORY" if fails else "",
        remediation="Compare the node with the order: reseat or replace the missing or wrong "
                    "part, then re-run `nodecert validate`." if fails else "")


@check("hardware.inventory", order=10, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI, "lspci", "lscpu", "dmidecode", "lsblk"),
       description="GPUs, CPU, memory and NVMe against the order; the hardware identity")
def hardware_inventory(ctx: Ctx) -> Result:
    facts, ev = gather_inventory(ctx)
    return judge_inventory(facts, ctx.spec, ctx.limits).with_(evidence=tuple(ev))


# --- hardware.pcie ----------------------------------------------------------------------

def judge_pcie(gpus: list[dict[str, Any]], devices: list[dict[str, Any]],
               limits: Limits) -> Result:
    name = "hardware.pcie"
    fails: list[str] = []
    warns: list[str] = limits.gap_notes("pcie.gen", "pcie.width")
    notes: list[str] = []
    want_gen = limits.value("pcie.gen")
    want_width = limits.value("pcie.width")
    links: list[dict[str, Any]] = []
    for g in gpus:
        bus, active = g["bus_id"], g.get("pstate") in ("P0", "P1", "P2")
        gmax, gcur = g.get("pcie_gen_max"), g.get("pcie_gen_current")
        wmax, wcur = g.get("pcie_width_max"), g.get("pcie_width_current")
        links.append({"device": f"GPU {bus}", "gen": gcur, "gen_max": gmax, "width": wcur,
                      "width_max": wmax, "pstate": g.get("pstate")})
        if gmax is not None:
            within(limits, "pcie.gen", gmax, f"GPU {bus} maximum link generation (the slot, "
                   "riser or BIOS limits it)", fails)
        if wmax is not None:
            within(limits, "pcie.width", wmax, f"GPU {bus} maximum link width", fails)
        if wcur is not None and wmax is not None and wcur < wmax:
            msg = f"GPU {bus}: link trained at x{wcur} of x{wmax}"
            if active:
                fails.append(msg + " (degraded width)")
            else:
                warns.append(msg + f" while idle ({g.get('pstate')}); re-check under load")
        if gcur is not None and gmax is not None and gcur < gmax:
            if active:
                fails.append(f"GPU {bus}: link running at Gen{gcur} of Gen{gmax} in "
                             f"{g.get('pstate')} (degraded speed)")
            else:
                notes.append(f"GPU {bus}: Gen{gcur} of Gen{gmax} at idle "
                             f"({g.get('pstate')}): normal link power management")
    for d in pci.nics(devices):
        if d["sta_width"] is None or d["cap_width"] is None:
            continue
        links.append({"device": f"NIC {d['slot']}", "gen": d["sta_gen"], "gen_max": d["cap_gen"],
                      "width": d["sta_width"], "width_max": d["cap_width"]})
        bad = []
        if d["sta_width"] < d["cap_width"]:
            bad.append(f"x{d['sta_width']} of x{d['cap_width']}")
        if (d["sta_gen"] or 0) < (d["cap_gen"] or 0):
            bad.append(f"Gen{d['sta_gen']} of Gen{d['cap_gen']}")
        if bad:
            msg = f"NIC {d['slot']} ({d['name'][:60]}): link at {', '.join(bad)}"
            (fails if d["vendor_id"] == "15b3" else warns).append(msg)
    res = judge_findings(name, fails, warns,
                         f"{len(gpus)} GPU links at Gen{want_gen or '?'} x{want_width or '?'}"
                         + (f", {sum(1 for x in links if x['device'].startswith('NIC'))} NIC "
                            "links at capability"),
                         value={"links": links}, thresholds=limits.pick("pcie.gen", "pcie.width"),
                         fault_code="NC-PCIE-DEGRADED" if fails else "",
                         remediation="Reseat the GPU/riser/cable of the named device, check "
                                     "the slot's BIOS link settings, then re-run." if fails else "")
    return res.with_(findings=res.findings + tuple(notes))


@check("hardware.pcie", order=11, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI, "lspci"),
       description="each GPU's PCIe link generation and width against the model's")
def hardware_pcie(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    devices: list[dict[str, Any]] = []
    try:
        out = run(["lspci", "-vv", "-nn", "-D"], timeout=ctx.timeout)
        ev.append(out.evidence)
        devices = pci.parse_lspci(out.text)
    except ToolError as exc:
        if exc.evidence:
            ev.append(exc.evidence)
    return judge_pcie(gpus, devices, ctx.limits).with_(evidence=tuple(ev))


# --- hardware.topology ------------------------------------------------------------------

def _judge_links(facts: Facts, limits: Limits, want_links: int, fails: list[str]) -> None:
    """Each GPU's NVLinks: every one up, as many as the model has, at its speed."""
    status = facts.get("nvlink") or {}
    for idx in range(len(facts.get("gpus", []))):
        if "nvlink" in facts and idx not in status:
            fails.append(f"GPU{idx}: `nvidia-smi nvlink -s` reports no NVLink, expected "
                         f"{want_links}")
    for idx, links in sorted(status.items()):
        if isinstance(links, str):
            fails.append(f"GPU{idx}: {links}")
            continue
        down = [str(k) for k, v in enumerate(links) if v is None]
        if down:
            fails.append(f"GPU{idx}: NVLink {', '.join(down)} inactive "
                         f"({len(links) - len(down)} of {len(links)} up)")
        within(limits, "nvlink.links_per_gpu", len(links), f"GPU{idx} NVLinks reported", fails)
        for k, v in enumerate(links):
            if v is not None:
                within(limits, "nvlink.link_gbs", v, f"GPU{idx} NVLink {k} speed", fails)


def _judge_pairs(matrix: dict[str, dict[str, str]], gpus: list[str], want_links: int,
                 fails: list[str]) -> int:
    """Every GPU pair of the topology matrix on NV<want_links>; how many are."""
    pairs_ok = 0
    for a in gpus:
        for b in gpus:
            if int(b[3:]) <= int(a[3:]):
                continue
            cell = matrix[a].get(b, "?")
            n = topo.nvlink_count(cell)
            if n == 0:
                fails.append(f"{a}<->{b} talk over PCIe ({cell}), expected NV{want_links}")
            elif n < want_links:
                fails.append(f"{a}<->{b} have {n} NVLinks (NV{n}), expected NV{want_links}")
            else:
                pairs_ok += 1
    return pairs_ok


def _judge_nvswitch_fabric(facts: Facts, limits: Limits, fails: list[str]) -> None:
    """The NVSwitches on the bus, each GPU's fabric registered, Fabric Manager active."""
    got_sw = facts.get("nvswitches")
    if got_sw is not None:
        within(limits, "nvswitch.count", got_sw, "NVSwitches on the PCI bus", fails)
    for g in facts.get("gpus", []):
        st, stat = g.get("fabric_state"), g.get("fabric_status")
        if st is not None and (st != "Completed" or (stat and stat != "Success")):
            fails.append(f"GPU {g['bus_id']}: fabric state {st}/{stat}, expected "
                         "Completed/Success (Fabric Manager has not set up the NVSwitch "
                         "fabric)")
    fm = facts.get("fabricmanager")
    if fm is not None and fm != "active":
        fails.append(f"nvidia-fabricmanager service is {fm}, expected active")


def judge_topology(facts: Facts, limits: Limits) -> Result:
    name = "hardware.topology"
    fails: list[str] = []
    warns: list[str] = []
    want_links = int(limits.value("nvlink.links_per_gpu", 0) or 0)
    gap = limits.gap_notes("nvlink.links_per_gpu")
    if want_links == 0 and gap:
        # The model may or may not carry NVLink (optional bridges, multi-superchip
        # systems only): say so rather than pass an NVLink nobody looked at.
        return Result(name, Verdict.WARN, gap[0], value={"nvlink": "not judged"},
                      findings=tuple(gap))
    if want_links == 0:
        return Result(name, Verdict.PASS, "PCIe-only GPU model: no NVLink expected",
                      value={"nvlink": "not expected"}, thresholds=limits.pick(
                          "nvlink.links_per_gpu"))
    _judge_links(facts, limits, want_links, fails)
    matrix: dict[str, dict[str, str]] = facts.get("matrix") or {}
    gpus = sorted(matrix, key=lambda g: int(g[3:]))
    pairs_ok = _judge_pairs(matrix, gpus, want_links, fails)
    if limits.value("nvswitch.count"):
        _judge_nvswitch_fabric(facts, limits, fails)
    return judge_findings(
        name, fails, warns,
        f"all {pairs_ok} GPU pairs on NV{want_links}; every NVLink up"
        + (", NVSwitch fabric complete" if limits.value("nvswitch.count") else ""),
        value={"pairs_nvlink": pairs_ok, "gpus": len(gpus), "fabricmanager":
               facts.get("fabricmanager"), "nvswitches": facts.get("nvswitches")},
        thresholds=limits.pick("nvlink.links_per_gpu", "nvlink.link_gbs", "nvswitch.count"),
        fault_code="NC-NVLINK" if fails else "",
        remediation="An NVLink/NVSwitch fault needs the baseboard vendor: check Fabric "
                    "Manager logs (/var/log/fabricmanager.log), reseat, or RMA the HGX board."
                    if fails else "")


@check("hardware.topology", order=12, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI, "lspci", "systemctl"),
       description="NVLink links and speed, NVSwitches, fabric state and Fabric Manager")
def hardware_topology(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    facts: Facts = {"gpus": gpus}
    if int(ctx.limits.value("nvlink.links_per_gpu", 0) or 0) > 0:
        facts["matrix"], _, topo_ev = gpu.backend(ctx).topology(ctx)
        ev.append(topo_ev)
        facts["nvlink"], link_ev = gpu.backend(ctx).link_status(ctx)
        ev.append(link_ev)
    if ctx.limits.value("nvswitch.count"):
        ls = run(["lspci", "-nn", "-D"], timeout=ctx.timeout)
        ev.append(ls.evidence)
        facts["nvswitches"] = len(pci.nvswitches(pci.parse_lspci(ls.text)))
        try:
            st = run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout=ctx.timeout,
                     ok_codes=range(0, 256))
            ev.append(st.evidence)
            facts["fabricmanager"] = st.text.strip() or "unknown"
        except ToolError as exc:
            facts["fabricmanager"] = f"not checkable ({exc})"
    return judge_topology(facts, ctx.limits).with_(evidence=tuple(ev))


