"""nvidia-smi topo -m: the GPU matrix (NVLink or PCIe paths) and the profile's NICs, with
the legends the real tool prints.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

from nodecert_simhw.ib import hca_ports
from nodecert_simhw.state import GpuState, nvlink_ok, visible_gpus


def _nics(hw):
    """The HCAs topo -m lists (a missing one is gone). How near each GPU is to each
    (_gpu_nic): one NIC per GPU on its PCIe switch (HGX, PIX), one NIC per GPU pair behind
    two bridges (PXB), otherwise by socket (NODE, SYS)."""
    hcas = hw["profile"].get("hcas") or {}
    return [p["n"] for p in hca_ports(hw)], int(hcas.get("count", 0))  # as ibstat lists them


def _gpu_nic(hw, gpu, nic, gpus, nics):
    same_socket = ((gpu < gpus // 2) == (nic < max(1, nics // 2))
                   or hw["profile"]["host"]["sockets"] == 1)
    if nics == gpus and gpu == nic:
        return "PIX"
    if nics * 2 == gpus and gpu // 2 == nic:
        return "PXB"
    return "NODE" if same_socket else "SYS"


def smi_topo(hw, argv):
    vis = visible_gpus(hw)
    n = len(vis)
    links = hw["profile"]["gpu"].get("nvlink_links", 0)
    half = hw["profile"]["gpu_count"] // 2
    gpus = hw["profile"]["gpu_count"]
    nics, n_nics = _nics(hw)
    head = ("\t" + "\t".join(f"GPU{k}" for k in range(n))
            + "".join(f"\tNIC{k}" for k in range(len(nics)))
            + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    lines = [head]
    for a_n, a in enumerate(vis):
        cells = []
        for b in vis:
            if a == b:
                cells.append(" X ")
            elif links and nvlink_ok(hw, a) and nvlink_ok(hw, b):
                active = min(sum(1 for _, s in GpuState(hw, x, load={}).nvlinks() if s)
                             for x in (a, b))
                cells.append(f"NV{active}")
            else:
                cells.append("NODE" if (a < half) == (b < half) else "SYS")
        cells += [_gpu_nic(hw, a, c, gpus, n_nics) for c in nics]
        numa = 0 if a < half or hw["profile"]["host"]["sockets"] == 1 else 1
        per = hw["profile"]["host"]["cores_per_socket"]
        aff = f"{numa * per}-{numa * per + per - 1}"
        lines.append(f"GPU{a_n}\t" + "\t".join(cells) + f"\t{aff}\t{numa}\t\tN/A")
    for k, c in enumerate(nics):
        cells = [_gpu_nic(hw, g, c, gpus, n_nics) for g in vis]
        side = max(1, n_nics // 2)  # NICs of the first socket
        for d in nics:
            cells.append(" X " if d == c else "NODE" if (c < side) == (d < side) else "SYS")
        lines.append(f"NIC{k}\t" + "\t".join(cells) + "\t\t\t\t")
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
              "nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
              "Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
              "Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks"]
    if nics:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{k}: mlx5_{c}" for k, c in enumerate(nics)]
    print("\n".join([*lines, ""]))
    return 0
