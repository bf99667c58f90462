"""What the integrator ordered and where it is: Ansible inventories read strictly, each
host's ordered hardware spec, the inventory variables that hold a mapping (the BMC, the
cluster engine, the GPU container, the fabric, the shared file system), a cluster's
hosts as its job engine reaches them (and the inventory's Slurm launcher), and the site
project that `nodecert init` lays out.

It may import nodecert.core, nodecert.stack and nodecert.transport (the become password
and SSH endpoints a host is reached by), nothing else.
"""
