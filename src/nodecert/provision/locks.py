"""Framework wheel locks: every wheel of a stack's environment pinned by sha256.

A stack's lock (its manifest's `framework.hashes`), or a site's in its place (the
inventory's `framework_wheel_hashes`, which the framework role takes first): how a set of
wheels differs from one, and reading a site's (`nodecert stack lock` writes a stack's:
provision/mirror.py, beside the download it locks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nodecert.core.errors import InventoryError
from nodecert.inventory.reader import hostvars
from nodecert.provision.mirror_fetch import MirrorError


def _normal(hashes: dict[str, Any]) -> dict[str, set[str]]:
    return {str(pin).lower(): {str(d).lower().removeprefix("sha256:") for d in digests}
            for pin, digests in hashes.items()}


def lock_differences(lock: dict[str, Any], wheels: dict[str, Any]) -> list[str]:
    """How a set of wheels ({"name==version": [sha256]}) differs from a stack's lock:
    a wheel the lock does not list, a locked pin missing, a digest the lock does not
    name. Empty when they are the same set."""
    want, got = _normal(lock), _normal(wheels)
    # Other bytes under a locked pin first: the likeliest sign of tampering.
    out = [f"{pin}: sha256 {', '.join(sorted(got[pin] - want[pin]))[:16]}... is not the "
           "locked one" for pin in sorted(set(want) & set(got)) if got[pin] - want[pin]]
    out += [f"{pin}: not in the lock" for pin in sorted(set(got) - set(want))]
    out += [f"{pin}: locked, but not among the wheels" for pin in sorted(set(want) - set(got))]
    return out


def read_site_lock(path: Path, stack: str) -> dict[str, list[str]]:
    """A site's lock for `stack` from a YAML file that sets `framework_wheel_hashes` as the
    inventory does (a group_vars file: {stack: {"name==version": [sha256]}})."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise MirrorError(f"{path}: cannot read the site's wheel digests: {e}") from None
    table = doc.get("framework_wheel_hashes") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise MirrorError(f"{path}: no framework_wheel_hashes mapping",
                          hint="give the inventory file that sets framework_wheel_hashes "
                               "(per stack: \"name==version\": [sha256, ...])")
    entry = table.get(stack)
    if not isinstance(entry, dict) or not entry or not all(
            isinstance(v, list) and v and all(isinstance(x, str) for x in v)
            for v in entry.values()):
        raise MirrorError(f"{path}: framework_wheel_hashes has no digests for stack {stack}",
                          hint=f"add {stack}: {{\"name==version\": [sha256, ...]}}")
    return {str(k): [str(x) for x in v] for k, v in entry.items()}


def site_wheel_locks(inventory: Path, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Per stack, the site's own lock: the inventory's framework_wheel_hashes (the framework
    role takes it in the stack's place). Hosts that give one stack two locks are refused."""
    out: dict[str, dict[str, Any]] = {}
    for name, hv in hostvars(inventory, hosts).items():
        table = hv.get("framework_wheel_hashes") or {}
        if not isinstance(table, dict):
            raise InventoryError(f"{inventory}: host {name}: framework_wheel_hashes is not a "
                                 "mapping", hint='per stack: {"name==version": [sha256]}')
        for stack_name, lock in table.items():
            if not isinstance(lock, dict):
                raise InventoryError(f"{inventory}: host {name}: framework_wheel_hashes."
                                     f"{stack_name} is not a mapping",
                                     hint='{"name==version": [sha256, ...]}')
            if out.setdefault(str(stack_name), dict(lock)) != dict(lock):
                raise InventoryError(f"{inventory}: hosts give stack {stack_name} two "
                                     "different framework_wheel_hashes",
                                     hint="one lock per stack for the whole run")
    return out


__all__ = ["lock_differences", "read_site_lock", "site_wheel_locks"]
