"""The lab: isolated SSH hosts with real systemd and apt, and simulated GPUs.

Hosts are systemd-nspawn containers booted with real systemd, each on an
overlay of one shared Debian base, in a network namespace of its own on the
lab's private bridge. Their NVIDIA hardware is simulated at the hardware
boundary (lspci, nvidia-smi, ...), and everything measured there is SIMULATED.
"""
