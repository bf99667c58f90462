"""dcgmi diag -r LEVEL: the DCGM diagnostic table, failing the tests the faults fail.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import driver_version, installed, load_hw, upstream, visible_gpus


def cmd_dcgmi(argv):
    hw = load_hw()
    inst = installed()
    if not argv or argv[0] != "diag":
        print("Usage: dcgmi diag -r <level>   (only 'diag' is simulated in the lab)")
        return 2
    level = 1
    for k, a in enumerate(argv):
        if a in ("-r", "--run") and k + 1 < len(argv):
            level = {"short": 1, "quick": 1, "medium": 2, "long": 3, "xlong": 4}.get(
                argv[k + 1], int(argv[k + 1]) if argv[k + 1].isdigit() else 1)
    drv = driver_version(inst)
    if drv is None:
        print("Error: Unable to complete diagnostic for group 2147483647. Return: (-17) "
              "Host engine is not valid any longer.")
        return 255
    dcgm = upstream(inst["dcgm"][1]) if "dcgm" in inst else "unknown"
    vis = visible_gpus(hw)
    g = hw["profile"]["gpu"]

    def fail_gpus(test):
        """The GPUs (as DCGM numbers them: visible index) whose faults fail `test`."""
        return sorted(vis.index(g) for g in Faults(hw).dcgm_failing_gpus(test) if g in vis)

    # (category, test, status, per-GPU failures, warnings)
    tests = []
    remap = fail_gpus("Page Retirement/Row Remap")
    for name in ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
                 "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
                 "Graphics Processes", "Inforom"):
        if name == "Page Retirement/Row Remap" and remap:
            tests.append(("Deployment", name, "Fail", remap,
                          [f"GPU {b} has uncorrectable/pending row remaps" for b in remap]))
        else:
            tests.append(("Deployment", name, "Pass", [], []))
    # A rack's compute tray runs no Fabric Manager of its own: the NVLink switch trays
    # manage its fabric, and DCGM reads the GPUs' fabric state (Completed) instead.
    if hw.get("rack"):
        tests.append(("Deployment", "Fabric Manager", "Pass", [], []))
    elif hw["profile"].get("nvswitch") and "fabric_manager" not in inst:
        tests.append(("Deployment", "Fabric Manager", "Fail", [],
                      ["Fabric Manager is not running"]))
    plan = []
    if level >= 2:
        plan += [("Integration", "PCIe"), ("Hardware", "GPU Memory")]
    if level >= 3:
        plan += [("Stress", t) for t in ("Targeted Stress", "Targeted Power",
                                         "Memory Bandwidth", "Diagnostic")]
    for cat, name in plan:
        bad = fail_gpus(name)
        tests.append((cat, name, "Fail" if bad else "Pass", bad,
                      [f"GPU {b} failed the {name} test" for b in bad]))
    status = 226 if any(t[2] == "Fail" for t in tests) else 0
    if "-j" in argv or "--json" in argv:
        print(_json(tests, dcgm, drv, [g["pci_device_id"] for _ in vis], len(vis)))
    else:
        print(_table(tests, dcgm, drv, ",".join(g["pci_device_id"] for _ in vis), level))
    return status


def _json(tests, dcgm, drv, dev_ids, ngpu):
    """DCGM 4's `dcgmi diag -j` shape: categories, tests, per-entity results, summary."""
    cats = {}
    for cat, name, st, bad, warns in tests:
        results = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i,
                    "status": "Fail" if i in bad else "Pass"} for i in range(ngpu)]
        if warns:
            results.append({"entity_group": "GPU", "entity_group_id": 1, "status": st,
                            "warnings": [{"warning": w, "error_id": 0} for w in warns]})
        cats.setdefault(cat, []).append({"name": name, "results": results,
                                         "test_summary": {"status": st}})
    return json.dumps({"DCGM Diagnostic": {"test_categories": [
        {"category": c, "tests": t} for c, t in cats.items()]},
        "metadata": {"DCGM Version": dcgm, "Driver Version Detected": drv,
                     "GPU Device IDs": ",".join(dev_ids)}, "version": dcgm}, indent=2)


def _table(tests, dcgm, drv, dev_ids, level):
    def row(a, b):
        return f"| {a:<25} | {b:<46} |"

    lines = ["Successfully ran diagnostic for group.",
             "+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Metadata  ----------+------------------------------------------------|",
             row("DCGM Version", dcgm), row("Driver Version Detected", drv),
             row("GPU Device IDs Detected", dev_ids),
             "|-----  Deployment  --------+------------------------------------------------|"]
    cat = "Deployment"
    for c, name, st, bad, warns in tests:
        if c != cat:
            cat = c
            lines.append(f"+-----  {c}  " + "-" * (19 - len(c)) +
                         "+------------------------------------------------+")
        if c == "Deployment":
            lines.append(row(name, st))
        else:
            lines.append(row(name, ("Fail - GPU: " + ", ".join(str(b) for b in bad))
                             if bad else "Pass - All"))
        lines.extend(row("Warning", w) for w in warns)
    if level < 3:
        lines.append("+-----  Stress  ------------+------------------------------------------------+")
    lines.append("+---------------------------+------------------------------------------------+")
    return "\n".join(lines)
