"""The fleet: what a node's figures say beside its peers' and beside its own past.

Owns the fleet baseline (each figure's median and robust spread per GPU model, signed),
a node judged against it (`fleet.peers`), trends over a node's runs (`fleet.trend`), the
fleet page, and the verdict files the cluster's own tools read (Kubernetes node
conditions and labels, node-problem-detector, Prometheus rules, a Grafana dashboard).

It may import every package below it (nodecert.core up to nodecert.certs, the run
records and the validation run) and the node package's contract, nothing else.
"""
