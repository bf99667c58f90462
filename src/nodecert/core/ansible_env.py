"""Ansible as nodecert runs it: a private temporary directory and nodecert's own
ansible.cfg for every run (a working-directory or $HOME one is never honoured), and
host selection with Ansible's own patterns."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.core.paths import product_dir


def ansible_local_temp() -> str:
    """Ansible's local temp directory for this process: private (mkdtemp: 0700, an
    unpredictable name), removed at exit. A fixed name in a shared temp directory could
    be claimed first by another local user, who would then plant the module cache that
    Ansible loads as root."""
    current = os.environ.get("ANSIBLE_LOCAL_TEMP")
    if current and current == _LOCAL_TEMP.get("path"):
        return current
    path = tempfile.mkdtemp(prefix="nodecert-ansible-")
    atexit.register(shutil.rmtree, path, True)
    _LOCAL_TEMP["path"] = path
    os.environ["ANSIBLE_LOCAL_TEMP"] = path
    return path


_LOCAL_TEMP: dict[str, str] = {}


def ansible_config() -> Path:
    return product_dir("playbooks") / "ansible.cfg"


def ansible_quiet() -> None:
    # Ansible must not write a tmp dir into $HOME (or a shared, predictable place) as a
    # side effect of reading an inventory, and no ansible.cfg from the working directory
    # or $HOME may change how it is read: nodecert names its own configuration.
    ansible_local_temp()
    os.environ["ANSIBLE_CONFIG"] = str(ansible_config())
    os.environ.setdefault("ANSIBLE_DEPRECATION_WARNINGS", "False")


def select_hosts(inventory: Path, patterns: tuple[str, ...], known: list[str], *,
                 manager: Any = None) -> list[str]:
    """--limit as Ansible reads it: host names, groups, globs (gpu-*), `!host` to leave
    out, `&group` to intersect; commas or repeats. Each positive pattern must match a
    host of the inventory (a typo is an error, never an empty run). `manager`: Ansible's
    inventory of `inventory` where it was already parsed."""
    if not patterns:
        return sorted(known)
    if manager is None:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader

        ansible_quiet()
        manager = InventoryManager(loader=DataLoader(), sources=[str(inventory.resolve())])
    inv = manager
    for p in patterns:
        bare = p.lstrip("!&")
        if bare and not inv.get_hosts(bare):
            raise InventoryError(f"--limit {p!r} matches no host or group of the inventory",
                                 where=str(inventory),
                                 hint=f"hosts are: {', '.join(sorted(known))}")
    inv.subset(",".join(patterns))
    try:
        chosen = {h.name for h in inv.get_hosts()}
    finally:
        inv.subset(None)  # a shared inventory: the next question sees every host
    return sorted(n for n in known if n in chosen)


__all__ = ["ansible_config", "ansible_local_temp", "ansible_quiet", "select_hosts"]
