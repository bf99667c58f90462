"""After hand-over: validate again and compare each node with its certified baseline (drift
and regression), collect the runs nodes made on their own (the timer, the apt hook), a
node's history, and re-validation as Slurm jobs.

It may import every package below it (nodecert.core up to nodecert.certs and
nodecert.cluster) and the node package's contract, nothing else.
"""
