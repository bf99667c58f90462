"""What a cluster job's first rank says when a port the job was given was taken (each
task's own output is read apart by nodecert.transport.joboutput)."""

from __future__ import annotations

# What a job's first rank prints (and exits 97 with) when a port the job was given is
# already taken on its node: the job did not measure anything (ERROR), nobody is blamed.
PORT_BUSY_MARK = "=== nodecert port in use "
PORT_BUSY_RC = 97


def port_busy(output: str) -> str | None:
    """The port a job's output says was taken, or None."""
    for line in output.splitlines():
        at = line.find(PORT_BUSY_MARK)
        if at >= 0:
            port = line[at + len(PORT_BUSY_MARK):].split()[:1]
            return port[0] if port and port[0].isdigit() else "?"
    return None


__all__ = ["PORT_BUSY_MARK", "PORT_BUSY_RC", "port_busy"]
