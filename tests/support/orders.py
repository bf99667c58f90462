"""A valid host of an order, for the inventories tests write: one eight-GPU H200 server
with the CPU, memory and drives the sample inventories order. A test then spells only
what it varies (its address, a recipe, a stack, a bad setting)."""

from __future__ import annotations

H200_SERVER = ("nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 nodecert_cpu_cores=112 "
               "nodecert_ram_gb=2048 nodecert_nvme_count=8")


def h200_host(name: str, address: str, *variables: str) -> str:
    """An inventory host line: `name ansible_host=address <the H200 order> <variables>`."""
    return " ".join((name, f"ansible_host={address}", H200_SERVER, *variables))
