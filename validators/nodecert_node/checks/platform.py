"""platform.*: how the kernel and the PCIe fabric are set, which no hardware check sees.

A server whose every part is healthy still trains slowly when peer-to-peer traffic is
sent up to the root complex (ACS redirect on the PCIe switches, the IOMMU translating
DMA), the CPUs idle at a low clock (the powersave governor), the kernel moves training
memory between NUMA nodes (automatic NUMA balancing), or the NIC cannot reach GPU memory
directly (no GPUDirect RDMA path). Each check reads one setting with the tool or file the
kernel exposes it through, judges it against its profile threshold (sourced there), and
names the fix. Pure judges; the gathering is the thin `@check` functions.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from nodecert_node.context import Ctx, judge_findings, try_text, within
from nodecert_node.contract import Evidence, Limits, Result, Verdict
from nodecert_node.parse import ParseError, pci, system
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

SUITES = ("quick", "standard", "full", "lab")
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
# The kernel's boot line: "iommu: Default domain type: Translated" / "Passthrough", with
# " (set via kernel command line)" on newer kernels.
_IOMMU_LOG = re.compile(r"iommu: Default domain type: (Translated|Passthrough)")
TRANSLATING = ("DMA", "DMA-FQ")


def _devices(ctx: Ctx, ev: list[Evidence]) -> list[dict[str, Any]]:
    out = run(["lspci", "-vvv", "-nn", "-D"], timeout=ctx.timeout, name="lspci -vvv")
    ev.append(out.evidence)
    return pci.parse_lspci(out.text)


# --- platform.pcie_acs --------------------------------------------------------------------

def judge_acs(devices: list[dict[str, Any]], limits: Limits) -> Result:
    ports = pci.acs_redirecting(devices)
    detail = [f"PCIe switch port {p['slot']} ({p['port']}) redirects peer-to-peer traffic "
              f"to the root complex (ACSCtl {'+ '.join(p['redirect'])}+) in front of "
              f"{', '.join(p['behind'])}" for p in ports]
    fails: list[str] = []
    within(limits, "platform.acs_redirect_ports_max", len(ports),
           (detail[0] + (f" (+{len(ports) - 1} more ports)" if len(ports) > 1 else ""))
           if ports else "PCIe switch ports with an ACS redirect", fails)
    judged = sum(1 for d in devices if d.get("acs_ctl") is not None)
    res = judge_findings(
        "platform.pcie_acs", fails, [],
        f"no ACS redirect on the {judged} PCIe ports that report ACS", value=len(ports),
        unit="ports", thresholds=limits.pick("platform.acs_redirect_ports_max"),
        facts={"ports": ports},
        remediation="Disable ACS on the PCIe switch ports (BIOS: PCIe ACS / 'ACS Control' "
                    "off; at runtime `setpci -s <port> ECAP_ACS+0x6.w=0000`), then "
                    "re-validate." if fails else "")
    return res.with_(findings=res.findings + tuple(detail[1:])) if fails else res


@check("platform.pcie_acs", order=23, suites=SUITES, tools=("lspci",),
       description="no ACS redirect on the PCIe switch ports in front of GPUs and NICs")
def pcie_acs(ctx: Ctx) -> Result:
    ev: list[Evidence] = []
    return judge_acs(_devices(ctx, ev), ctx.limits).with_(evidence=tuple(ev))


# --- platform.iommu -----------------------------------------------------------------------

def read_iommu_groups(root: str = IOMMU_GROUPS) -> dict[str, dict[str, Any]] | None:
    """group -> {"type": the default domain's type, "devices": [slots]}; None where the
    kernel has no IOMMU groups (no IOMMU enabled)."""
    if not os.path.isdir(root) or not os.listdir(root):
        return None
    out: dict[str, dict[str, Any]] = {}
    for group in sorted(os.listdir(root)):
        try:
            with open(os.path.join(root, group, "type")) as f:
                kind = f.read().strip()
        except OSError:
            kind = ""  # kernels before 5.11 do not say
        devs = sorted(os.listdir(os.path.join(root, group, "devices"))) if os.path.isdir(
            os.path.join(root, group, "devices")) else []
        out[group] = {"type": kind, "devices": [d.lower() for d in devs]}
    return out


def judge_iommu(groups: dict[str, dict[str, Any]] | None, log_type: str | None,
                cmdline: str, endpoints: list[str], limits: Limits) -> Result:
    """`groups`: the kernel's IOMMU groups (None: no IOMMU); `log_type`: the boot log's
    default domain type where the groups do not say; `endpoints`: GPU and NIC slots."""
    translating: list[str] = []
    how = why = ""
    if groups is not None:
        for g, info in groups.items():
            mine = [d for d in info["devices"] if d in endpoints]
            if mine and info["type"] in TRANSLATING:
                translating += [f"{d} (group {g}, {info['type']})" for d in mine]
        how = f"{len(groups)} IOMMU groups"
        unknown = [g for g, i in groups.items() if not i["type"]
                   and any(d in endpoints for d in i["devices"])]
        if unknown and not translating and log_type == "Translated":
            translating, why = list(endpoints), " (the kernel's default domain is Translated)"
    elif log_type == "Translated":
        translating, why = list(endpoints), " (the kernel's default domain is Translated)"
        how = "the kernel's boot log"
    fails: list[str] = []
    within(limits, "platform.iommu_translated_max", len(translating),
           "the IOMMU translates DMA for " + ", ".join(translating[:4])
           + (f" (+{len(translating) - 4} more)" if len(translating) > 4 else "") + why, fails)
    ok = ("no IOMMU: DMA is not translated" if groups is None and log_type is None else
          f"DMA of GPUs and NICs is not translated ({how or 'passthrough'})")
    return judge_findings(
        "platform.iommu", fails, [], ok, value=len(translating), unit="devices",
        thresholds=limits.pick("platform.iommu_translated_max"),
        facts={"cmdline_iommu": [w for w in cmdline.split() if "iommu" in w],
               "log_default_domain": log_type},
        remediation="Boot with the IOMMU in passthrough (`iommu=pt`, with `intel_iommu=on` "
                    "or `amd_iommu=on` where it is needed at all) and reboot." if fails else "")


@check("platform.iommu", order=24, suites=SUITES, tools=("lspci",),
       description="the IOMMU passes GPU and NIC DMA through (or is off)")
def iommu(ctx: Ctx) -> Result:
    ev: list[Evidence] = []
    devices = _devices(ctx, ev)
    endpoints = [d["slot"] for d in pci.nvidia_gpus(devices) + pci.nics(devices)]
    log = try_text(ev, ["dmesg"], ctx, name="kernel log") or ""
    found = _IOMMU_LOG.findall(log)
    try:
        with open("/proc/cmdline") as f:
            cmdline = f.read()
    except OSError:
        cmdline = ""
    return judge_iommu(read_iommu_groups(), found[-1] if found else None, cmdline, endpoints,
                       ctx.limits).with_(evidence=tuple(ev))


# --- platform.cpu_governor ----------------------------------------------------------------

def read_sysfs_governors(root: str = "/sys/devices/system/cpu") -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for path in glob.glob(os.path.join(root, "cpu[0-9]*", "cpufreq", "scaling_governor")):
        cpu = int(os.path.basename(os.path.dirname(os.path.dirname(path)))[3:])
        try:
            with open(path) as f:
                out[cpu] = f.read().strip() or None
        except OSError:
            out[cpu] = None
    return out


def judge_governor(governors: dict[int, str | None], source: str, limits: Limits) -> Result:
    if not governors:
        return Result("platform.cpu_governor", Verdict.WARN,
                      "the kernel exposes no CPU frequency scaling (no cpufreq driver): the "
                      "governor was not measured",
                      remediation="Load the platform's cpufreq driver (intel_pstate, "
                                  "amd-pstate or acpi-cpufreq) and set the performance "
                                  "governor.")
    by: dict[str, list[int]] = {}
    for cpu, gov in sorted(governors.items()):
        by.setdefault(gov or "none", []).append(cpu)
    fails: list[str] = []
    for gov, cpus in sorted(by.items()):
        shown = ", ".join(map(str, cpus[:8])) + (f" (+{len(cpus) - 8} more)"
                                                  if len(cpus) > 8 else "")
        within(limits, "platform.cpu_governor", gov, f"CPU {shown}: governor", fails)
    return judge_findings(
        "platform.cpu_governor", fails, [],
        f"all {len(governors)} CPUs run the {next(iter(by))} governor ({source})",
        value={g: len(c) for g, c in by.items()}, unit="CPUs",
        thresholds=limits.pick("platform.cpu_governor"),
        remediation="Set the performance governor (`cpupower frequency-set -g performance`, "
                    "or the BIOS power profile 'performance'); nodecert's platform role "
                    "sets it at boot." if fails else "")


@check("platform.cpu_governor", order=25, suites=SUITES,
       description="every CPU runs the performance governor")
def cpu_governor(ctx: Ctx) -> Result:
    ev: list[Evidence] = []
    text = try_text(ev, ["cpupower", "-c", "all", "frequency-info", "-p"], ctx,
                    name="cpupower")
    if text is not None:
        try:
            return judge_governor(system.parse_cpupower_governors(text), "cpupower",
                                  ctx.limits).with_(evidence=tuple(ev))
        except ParseError:
            pass  # cpupower without a policy to show: read the kernel's files
    return judge_governor(read_sysfs_governors(), "sysfs", ctx.limits).with_(
        evidence=tuple(ev))


# --- platform.numa_balancing --------------------------------------------------------------

def judge_numa_balancing(value: str | None, limits: Limits) -> Result:
    if value is None:
        return Result("platform.numa_balancing", Verdict.PASS,
                      "the kernel has no automatic NUMA balancing (one NUMA node, or built "
                      "without it)", facts={"kernel.numa_balancing": None})
    try:
        mode = int(value.strip())
    except ValueError:
        return Result("platform.numa_balancing", Verdict.ERROR,
                      f"kernel.numa_balancing reads {value.strip()[:40]!r}, not a number",
                      fault_code="NC-PARSE")
    fails: list[str] = []
    within(limits, "platform.numa_balancing", mode, "automatic NUMA balancing "
           "(kernel.numa_balancing)", fails)
    return judge_findings(
        "platform.numa_balancing", fails, [], "automatic NUMA balancing is off",
        value=mode, thresholds=limits.pick("platform.numa_balancing"),
        facts={"kernel.numa_balancing": mode},
        remediation="Turn it off: `sysctl -w kernel.numa_balancing=0` and "
                    "`kernel.numa_balancing = 0` in /etc/sysctl.d/ (nodecert's platform "
                    "role does both)." if fails else "")


@check("platform.numa_balancing", order=26, suites=SUITES, tools=("sysctl",),
       description="automatic NUMA balancing is off")
def numa_balancing(ctx: Ctx) -> Result:
    try:
        out = run(["sysctl", "-n", "kernel.numa_balancing"], timeout=ctx.timeout,
                  name="sysctl")
    except ToolError as exc:
        if exc.kind == "failed" and "cannot stat" in (exc.evidence.output if exc.evidence
                                                      else ""):
            return judge_numa_balancing(None, ctx.limits).with_(
                evidence=(exc.evidence,) if exc.evidence else ())
        raise
    return judge_numa_balancing(out.text, ctx.limits).with_(evidence=(out.evidence,))


# --- platform.gpudirect -------------------------------------------------------------------

def judge_gpudirect(modules: dict[str, list[str]], driver_flavour: str | None,
                    fabric: bool, limits: Limits,
                    *more: dict[str, list[str]]) -> Result:
    """GPUDirect RDMA paths available: the nvidia_peermem module loaded, or dma-buf (the
    open kernel modules, which NCCL uses on kernels from 5.12). Judged only where the
    order has an RDMA fabric. `modules` (lsmod) and `more` (/proc/modules, /sys/module's
    names as rows without users) are equal evidence: a module is loaded when any listing
    shows its row or names it as another module's user. A listing that shows no nvidia
    module at all cannot show whether nvidia_peermem is loaded: ERROR, never a FAIL."""
    loaded = system.loaded_modules(modules, *more)
    paths = []
    if "nvidia_peermem" in loaded:
        paths.append("nvidia_peermem")
    if driver_flavour == "open":
        paths.append("dma-buf (open kernel modules)")
    facts = {"paths": paths, "nvidia_loaded": "nvidia" in loaded,
             "driver_flavour": driver_flavour}
    if not fabric:
        return Result("platform.gpudirect", Verdict.PASS,
                      "no RDMA fabric ordered: GPUDirect RDMA is not needed"
                      + (f" (available: {', '.join(paths)})" if paths else ""), facts=facts)
    if not paths and "nvidia" not in loaded:
        return Result("platform.gpudirect", Verdict.ERROR,
                      "the module listings show no nvidia module, so they cannot show "
                      "whether nvidia_peermem is loaded (a filtered or partial listing)",
                      facts=facts,
                      remediation="Read the full `lsmod` and /proc/modules on the node; if "
                                  "the nvidia driver is not loaded, fix that first.")
    fails: list[str] = []
    within(limits, "platform.gpudirect_paths_min", len(paths),
           "GPUDirect RDMA paths (nvidia_peermem loaded, or dma-buf with the open kernel "
           "modules)", fails)
    return judge_findings(
        "platform.gpudirect", fails, [], f"GPUDirect RDMA through {' and '.join(paths)}",
        value=len(paths), unit="paths", thresholds=limits.pick("platform.gpudirect_paths_min"),
        facts=facts,
        remediation="Load nvidia-peermem (`modprobe nvidia-peermem`, and list it in "
                    "/etc/modules-load.d/), or run the open kernel modules so NCCL can use "
                    "dma-buf." if fails else "")


@check("platform.gpudirect", order=27, suites=SUITES, tools=("lsmod",),
       description="a GPUDirect RDMA path (nvidia_peermem or dma-buf) where the order has "
                   "an RDMA fabric")
def gpudirect(ctx: Ctx) -> Result:
    out = run(["lsmod"], timeout=ctx.timeout, name="lsmod")
    try:
        with open("/proc/driver/nvidia/version") as f:
            version = f.read()
        flavour: str | None = "open" if "Open Kernel Module" in version else "proprietary"
    except OSError:
        flavour = None
    # The kernel's own lists, equal evidence to lsmod's (which reads /proc/modules too,
    # but may be a wrapper or filtered): what any of them shows loaded is loaded.
    more: list[dict[str, list[str]]] = []
    try:
        with open("/proc/modules") as f:
            more.append(system.parse_proc_modules(f.read()))
    except (OSError, ParseError):
        pass  # lsmod's own listing still stands; an unreadable extra proves nothing
    more.append({name: [] for name in ("nvidia", "nvidia_peermem")
                 if os.path.isdir(f"/sys/module/{name}")})
    return judge_gpudirect(system.parse_lsmod(out.text), flavour,
                           bool(ctx.spec.get("fabric")), ctx.limits, *more).with_(
        evidence=(out.evidence,))


