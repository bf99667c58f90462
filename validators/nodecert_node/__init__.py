"""nodecert's node-side validators.

Runs on the GPU node with the node's own python3 (3.8+, standard library only):
gathers facts through the real tools (nvidia-smi, lspci, dmesg, dmidecode, fio,
...), parses them with pure functions, judges them against the thresholds the
control side sends, and reports one frozen Result per check.
"""

__version__ = "0.1.0"
