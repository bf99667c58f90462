"""`nodecert validate`: each host's plan, the runners that start a node's run and read its
events (SSH: ship the node code, send the plan; Slurm: the same as a job on the node),
the runs of many hosts in parallel under the connection gate, and their progress at one
host or a thousand.

It may import nodecert.core, nodecert.stack, nodecert.transport, nodecert.profiles,
nodecert.inventory, nodecert.runs, nodecert.bmc and the node package's contract, nothing
else.
"""
