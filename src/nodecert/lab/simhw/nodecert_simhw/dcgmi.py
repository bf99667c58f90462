"""dcgmi diag -r LEVEL: the DCGM diagnostic table, failing the tests the faults fail.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

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

    def row(a, b):
        return f"| {a:<25} | {b:<46} |"

    def fail_gpus(test):
        """The GPUs (as DCGM numbers them: visible index) whose faults fail `test`."""
        return sorted(vis.index(g) for g in Faults(hw).dcgm_failing_gpus(test) if g in vis)

    lines = ["Successfully ran diagnostic for group.",
             "+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Metadata  ----------+------------------------------------------------|",
             row("DCGM Version", dcgm), row("Driver Version Detected", drv),
             row("GPU Device IDs Detected", ",".join(g["pci_device_id"] for _ in vis)),
             "|-----  Deployment  --------+------------------------------------------------|"]
    remap = fail_gpus("Page Retirement/Row Remap")
    for name in ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
                 "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
                 "Graphics Processes", "Inforom"):
        if name == "Page Retirement/Row Remap" and remap:
            lines.append(row(name, "Fail"))
            for b in remap:
                lines.append(row("Warning", f"GPU {b} has uncorrectable/pending row remaps"))
        else:
            lines.append(row(name, "Pass"))
    if hw["profile"].get("nvswitch") and "fabric_manager" not in inst:
        lines.append(row("Fabric Manager", "Fail"))
        lines.append(row("Warning", "Fabric Manager is not running"))
    status = 1 if remap else 0

    def section(title, tests):
        nonlocal status
        lines.append(f"+-----  {title}  " + "-" * (19 - len(title)) +
                     "+------------------------------------------------+")
        for name in tests:
            bad = fail_gpus(name)
            if bad:
                status = 1
                lines.append(row(name, "Fail - GPU: " + ", ".join(str(b) for b in bad)))
                for b in bad:
                    lines.append(row("Warning", f"GPU {b} failed the {name} test"))
            else:
                lines.append(row(name, "Pass - All"))
    if level >= 2:
        section("Integration", ["PCIe"])
        section("Hardware", ["GPU Memory"])
    if level >= 3:
        section("Stress", ["Targeted Stress", "Targeted Power", "Memory Bandwidth",
                           "Diagnostic"])
    else:
        lines.append("+-----  Stress  ------------+------------------------------------------------+")
    lines.append("+---------------------------+------------------------------------------------+")
    print("\n".join(lines))
    return 226 if status else 0
