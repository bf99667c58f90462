"""Run `systemd-nspawn ARGS...` and start it again when the container reboots.

nspawn --boot exits with 133 when the container asks for a reboot (Ansible's
`reboot` module, a driver install's reboot handler); a real server comes back,
so the lab host does too. SIGTERM is forwarded (nspawn then powers the host off).
"""

from __future__ import annotations

import signal
import subprocess
import sys

REBOOT_EXIT = 133


def main(args: list[str]) -> int:
    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        child = subprocess.Popen(["systemd-nspawn", *args])
        rc = child.wait()
        if rc != REBOOT_EXIT or stopping:
            return 0 if stopping else rc
        print("=== nodecert lab: host rebooted, starting it again", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
