"""The run directory: every kind of run (provision, validate, cluster, revalidate) is laid
out, written and read here, and nowhere else.

It may import nodecert.core, nodecert.stack, nodecert.transport, nodecert.inventory and the
node package's contract, nothing else.
"""
