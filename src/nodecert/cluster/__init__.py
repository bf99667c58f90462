"""`nodecert cluster validate`: the nodes proven together. Each node's fabric counters before
and after, the pairing rounds that find a weak node, the multi-node jobs (run on Slurm
or OpenMPI through nodecert.transport's engines) and how their output is judged, the
scaling stage, the shared file system under every node at once, and the library call
behind the command.

It may import nodecert.core, nodecert.transport, nodecert.profiles, nodecert.inventory,
nodecert.runs, nodecert.validation, the node package's contract and its pure parsers,
nothing else.
"""
