"""The role variables for provisioning from an air-gapped mirror as `nodecert mirror
build` lays it out: its repository, its index, its key, and the wheels' digests the
framework is installed with, checked against the stack's lock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.provision.locks import lock_differences
from nodecert.provision.mirror import mirror_manifest
from nodecert.stack.manifest import Stack


def refuse_mirror_credentials(mirror: str | None) -> None:
    """A mirror URL with user:password in it is refused: it would be written down."""
    if mirror and "@" in mirror.split("://", 1)[-1].split("/", 1)[0]:
        raise InventoryError(
            "--mirror carries credentials in its URL: they would be written to the run "
            "directory and to every node's apt sources",
            hint="give the mirror URL without user:password and put the credentials in "
                 "/etc/apt/auth.conf.d on the nodes (or a netrc for pip)")


def mirror_vars(mirror: str, manifests: dict[str, Stack],
                warn: Callable[[str], None] | None = None,
                site_locks: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Role variables for a mirror laid out as `nodecert mirror build` writes it: its
    repository, its index, the repository key it carries and, when the mirror has a
    manifest, every wheel's sha256 (pip then installs with --require-hashes).

    A locked stack's `framework.hashes` decide, or the site's lock in their place (the
    inventory's framework_wheel_hashes for the stack, `site_locks`): the mirror's list
    must be the same set (else InventoryError) and is not handed on. An unlocked stack
    takes the mirror's list, which over plain http anyone on the path could have changed:
    said to `warn`."""
    base = mirror.rstrip("/")
    out: dict[str, Any] = {
        "nvidia_repo_url": f"{base}/nvidia",
        "framework_index_url": f"{base}/simple" if "://" in base else f"file://{base}/simple"}
    keys = {Path(m.repository.key_url).name for m in manifests.values()}
    if len(keys) == 1:
        out["nvidia_repo_key_url"] = f"{base}/nvidia/{keys.pop()}"
    built = mirror_manifest(base)
    if built is not None:
        if set(manifests) != {built.get("stack")}:
            raise InventoryError(f"the mirror at {mirror} holds stack {built.get('stack')}; "
                                 f"this run provisions {', '.join(sorted(manifests))}",
                                 hint="build a mirror per stack (nodecert mirror build "
                                      "--stack ...) and give the matching one")
        site = (site_locks or {}).get(str(built["stack"])) or {}
        lock = dict(site) or manifests[str(built["stack"])].framework.hashes or {}
        if lock:
            problems = lock_differences(lock, built["wheels"])
            if problems:
                raise InventoryError(
                    f"the mirror at {mirror} lists other wheels than stack {built['stack']} "
                    f"is locked to{' by the inventory' if site else ''}: "
                    + "; ".join(problems[:6]),
                    hint="rebuild the mirror from the locked stack (nodecert mirror build"
                         f"{' --wheel-hashes' if site else ''}), or find out who changed it")
            return out  # the roles install with the lock (the site's, else the stack's)
        if base.startswith("http://") and warn is not None:
            warn(f"warning: stack {built['stack']} is not locked, so the wheels' sha256 come "
                 f"from the mirror's manifest over plain http ({mirror}): anyone on the path "
                 "could change both; lock the stack (nodecert stack lock) or serve the "
                 "mirror over https")
        out["framework_wheel_hashes"] = {
            built["stack"]: {str(k): [str(x) for x in v] for k, v in built["wheels"].items()}}
    return out


__all__ = ["mirror_vars", "refuse_mirror_credentials"]
