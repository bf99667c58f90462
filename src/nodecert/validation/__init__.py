"""`nodecert validate`: each host's plan, the SSH protocol with a node (ship the node code,
send the plan, read its events), the runs of many hosts in parallel under the connection
gate, and their progress at one host or a thousand.

It may import nodecert.core, nodecert.stack, nodecert.transport, nodecert.profiles,
nodecert.inventory, nodecert.runs, nodecert.bmc and the node package's contract, nothing
else.
"""
