"""The lab settings a test suite uses: its own subnet, bridge, prefix and state, so that two
labs on one machine (a test's and a user's) never touch each other's objects."""

from __future__ import annotations

from typing import Any


def lab_config(tag: str, third_octet: int) -> Any:
    import ipaddress

    from nodecert.lab.config import LabConfig
    return LabConfig(subnet=ipaddress.IPv4Network(f"10.78.{third_octet}.0/24"),
                     bridge=f"nc{tag}0", prefix=f"nc{tag}", state_name=f"state-{tag}")
