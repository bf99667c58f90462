"""The BMC, out of band: a Redfish client with the BMC's certificate verified, what the BMC
reports read over Redfish or IPMI, the pure judges of its sensors, event log, power
headroom and firmware, and the monitor that samples it beside a node's run.

It may import nodecert.core, nodecert.profiles, nodecert.inventory (where the BMC is and how
it is reached), nodecert.runs (what the node's own checks saw, when it was last
certified), the node package's contract and its pure parsers, nothing else.
"""
