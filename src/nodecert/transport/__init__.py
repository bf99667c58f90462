"""How the controller reaches a node: SSH sessions with host keys always checked (paramiko),
known_hosts read once per run, the become password read the way Ansible reads it, the
back-pressure gate for new connections, the node code as shipped (a reproducible bundle),
the event stream a node sends back, and jobs on the site's engine (Slurm, mpirun) started
from a launch host.

It may import nodecert.core and the node package's contract, nothing else.
"""
