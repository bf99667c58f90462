"""Dispatch: `simhw.py TOOL [args...]` runs the emulator of TOOL.

Only the module of the tool asked for is imported: nvidia-smi runs many times a
second during a soak.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import importlib
import sys

# tool -> (module, function): one module per emulated tool.
TOOLS = {
    "lspci": ("lspci", "cmd_lspci"), "dmidecode": ("system", "cmd_dmidecode"),
    "lscpu": ("system", "cmd_lscpu"), "lsblk": ("system", "cmd_lsblk"),
    "nvidia-smi": ("smi", "cmd_nvidia_smi"), "all_reduce_perf": ("nccl", "cmd_all_reduce_perf"),
    "all_gather_perf": ("nccl", "cmd_all_gather_perf"),
    "alltoall_perf": ("nccl", "cmd_alltoall_perf"),
    "nvbandwidth": ("nvbandwidth", "cmd_nvbandwidth"), "dcgmi": ("dcgmi", "cmd_dcgmi"),
    "gpu_burn": ("gpuburn", "cmd_gpu_burn"), "dmesg": ("kernel", "cmd_dmesg"),
    "torch-worker": ("workers", "cmd_torch_worker"),
    "ibstat": ("ib", "cmd_ibstat"), "ibstatus": ("ib", "cmd_ibstatus"),
    "perfquery": ("ib", "cmd_perfquery"), "ib_write_bw": ("perftest", "cmd_ib_write_bw"),
    "show_gids": ("roce", "cmd_show_gids"), "mlnx_qos": ("roce", "cmd_mlnx_qos"),
    "nvidia-ctk": ("ctk", "cmd_nvidia_ctk"), "nvidia-cdi-hook": ("ctk", "cmd_nvidia_cdi_hook"),
    "nvidia-imex-ctl": ("imex", "cmd_nvidia_imex_ctl"),
    "lsmod": ("platform", "cmd_lsmod"), "sysctl": ("platform", "cmd_sysctl"),
    "cpupower": ("platform", "cmd_cpupower"), "modprobe": ("platform", "cmd_modprobe"),
}


def main(argv):
    if len(argv) < 2 or argv[1] not in TOOLS:
        sys.stderr.write(f"usage: simhw.py {{{','.join(TOOLS)}}} [args...]\n")
        return 2
    module, function = TOOLS[argv[1]]
    tool = getattr(importlib.import_module(f"nodecert_simhw.{module}"), function)
    try:
        return tool(argv[2:])
    except BrokenPipeError:
        return 0
    except FileNotFoundError as exc:
        sys.stderr.write(f"{argv[1]}: simulated hardware description missing: {exc}\n")
        return 1
