"""nvidia-imex-ctl -N: the IMEX domain a rack tray's IMEX daemon sees, in the R570.172
layout (legend, timestamp, nodes with their version, the connectivity matrix, the
domain state), from the rack in the host's hardware description: one node per compute
tray at its address; faults take a node DOWN (its row and column Invalid, the domain
DEGRADED) or make the query hang.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import os
import sys
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import RUN_DIR, driver_version, installed, load_hw

PID_FILE = RUN_DIR / "imex.pid"  # written by the lab's simulated nvidia-imex daemon


def daemon_running():
    """Whether the (simulated) IMEX daemon this query would talk to is running."""
    try:
        os.kill(int(PID_FILE.read_text().split()[0]), 0)
    except (OSError, ValueError, IndexError):
        return False
    return True

LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


def status(hw, version, now=None):
    rack = hw["rack"]
    faults = Faults(hw)
    down = faults.imex_down()
    trays = rack["trays"]
    t = time.localtime(now if now is not None else time.time())
    stamp = (f"{t.tm_mon}/{t.tm_mday}/{t.tm_year} "
             f"{time.strftime('%H:%M:%S', t)}.{int((now or time.time()) * 1000) % 1000:03d}")
    out = [LEGEND, stamp, "Nodes:"]
    for k, tray in enumerate(trays):
        state = "DOWN" if k in down else "READY"
        out.append(f"Node #{k:<3} - {tray['ip']:<15} - {state:<20} - Version: {version}")
    out.append("")
    out.append(" Nodes From\\To  " + "".join(f"{k:<4}" for k in range(len(trays))).rstrip())
    for a in range(len(trays)):
        row = "".join(f"{'I' if (a in down or b in down) else 'C':<4}"
                      for b in range(len(trays))).rstrip()
        out.append(f"{a:>8}        {row}")
    out.append("")
    out.append(f"Domain State: {'DEGRADED' if down else 'UP'}")
    return "\n".join(out) + "\n"


def cmd_nvidia_imex_ctl(argv):
    if "-N" not in argv:
        sys.stderr.write("usage: nvidia-imex-ctl -N [-c CONFIG]  (SIMULATED: -N only)\n")
        return 2
    hw = load_hw()
    if not hw.get("rack"):
        sys.stderr.write("nvidia-imex-ctl: could not connect to the IMEX daemon "
                         "(no IMEX domain on this host)\n")
        return 1
    if Faults(hw).imex_hang():
        while True:  # a hung query: the caller's time limit must end it
            time.sleep(3600)
    if not daemon_running():
        sys.stderr.write("nvidia-imex-ctl: could not connect to the IMEX daemon "
                         "(nvidia-imex is not running) (SIMULATED)\n")
        return 1
    inst = installed()
    version = (inst["imex"][1].split(":", 1)[-1].rsplit("-", 1)[0] if "imex" in inst
               else driver_version(inst))
    sys.stdout.write(status(hw, version or "580.95.05"))
    return 0
