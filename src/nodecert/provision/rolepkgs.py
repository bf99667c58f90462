"""The packages the site play's roles install from NVIDIA's repository besides the
stack's pins, read from the roles' own defaults (their interface), so that a mirror
built for a stack carries everything provisioning installs from that repository.

Every package a role installs is one of three kinds, and `APT_SOURCES` names which for
each package list a role's tasks install (the tests hold that no role installs a list
this table does not name):

* the stack's pins (nodecert_common's pinned_packages): in the mirror by the stack;
* a role's own pins at a version its defaults set (the container toolkit): in the
  mirror from `ROLE_PINS`;
* the OS's own packages (python3-venv, fio, ...) and what the site names itself (the
  container engine, extra GPU tools): the site's OS mirror, or `mirror build
  --extra-package`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nodecert.core import yamldoc
from nodecert.core.errors import ManifestError
from nodecert.core.paths import product_dir

# role -> (the switch that turns it on, the package list, the version every one is at)
ROLE_PINS = {"container_toolkit": ("container_toolkit_enabled", "container_toolkit_packages",
                                   "container_toolkit_version")}
# What each package list that a role's tasks install holds.
APT_SOURCES = {
    "nodecert_common_selected": "the stack's pins",
    "container_toolkit_pins": "the role's own pins (ROLE_PINS)",
    "container_toolkit_engine_packages": "the site's container engine (the OS archive)",
    "framework_system_packages": "the OS archive",
    "validators_packages": "the OS archive",
    "validators_gpu_tool_packages": "the site's GPU tools (--extra-package)",
    "nvidia_repo_retired": "removed, never installed",
}


@dataclass(frozen=True)
class RolePin:
    role: str
    name: str
    version: str


def role_pins(roles: Path | None = None) -> list[RolePin]:
    """The packages the roles that are on by default pin, at their versions."""
    roles = roles or product_dir("roles")
    out: list[RolePin] = []
    for role, (switch, packages, version) in ROLE_PINS.items():
        path = roles / role / "defaults" / "main.yml"
        d = yamldoc.load(path).value
        on, names, ver = (d.get(k) if isinstance(d, dict) else None
                          for k in (switch, packages, version))
        if not isinstance(on, bool) or not isinstance(names, list) or not ver:
            raise ManifestError(f"the role's defaults lack {switch}, {packages} or {version}",
                                where=str(path), hint="the role's interface changed: update "
                                "nodecert.provision.rolepkgs.ROLE_PINS")
        if on:
            out += [RolePin(role, str(n), str(ver)) for n in names]
    return out


__all__ = ["APT_SOURCES", "ROLE_PINS", "RolePin", "role_pins"]
