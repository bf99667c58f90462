"""Runs: every kind of run (provision, validate, cluster, revalidate) is laid out, written
and read back here, and nowhere else. layout.py: the run-id recipe and where each file
is; store.py: the writers (a validation run's HostRun records, the inputs, provision's
inputs) and HostLink, the session's way to a host that is never saved; records.py: the
typed readers (a host's record, a finished run, a host's history, a cluster run).

It may import nodecert.core, nodecert.stack, nodecert.transport, nodecert.inventory and the
node package's contract, nothing else.
"""
