#!/usr/bin/python3
"""Simulated NVIDIA GPU hardware for nodecert lab hosts. SIMULATED -- NOT REAL HARDWARE.

The launcher of the simulator: `simhw.py TOOL [args...]`. The emulators live in the
package `nodecert_simhw/` beside this file, one module per tool (lspci, nvidia-smi,
all_reduce_perf, nvbandwidth, dcgmi, gpu_burn, dmesg, dmidecode/lscpu/lsblk and the
framework workers), with one table of the faults they play (`faults.py`). Runs inside
a lab host with its own python3 (3.8+, standard library only); the lab copies this
file and the package to /usr/lib/nodecert-lab/.

Given the host's hardware description (/etc/nodecert-lab/hardware.json: profile +
injected faults) and the packages installed (/usr/share/nodecert-lab/installed/*.json,
dropped by the simulated NVIDIA packages), it prints what the real tools print, in
their exact formats. GPU temperatures, clocks and power follow the load.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nodecert_simhw.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
