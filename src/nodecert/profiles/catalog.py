"""The node's check catalog (name, order, suites, tools, description), as the node
package itself reports it (`python3 -m nodecert_node list --json`).

The control side imports only the contract from the node package; the registry is
read through the package's own command instead, once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path

from nodecert.core.errors import NodecertError


@dataclass(frozen=True)
class CheckInfo:
    """One check as the node package's catalog reports it (its @check registration):
    where it sorts, which suites run it, the tools it needs."""

    name: str
    order: int
    suites: tuple[str, ...]
    tools: tuple[str, ...]
    description: str
    module: str
    needs: tuple[str, ...] = ()


def node_package_dir() -> Path:
    spec = find_spec("nodecert_node")
    if spec is None or not spec.submodule_search_locations:
        raise NodecertError("the nodecert_node package is not installed with nodecert",
                            hint="reinstall nodecert (pip install -e . in a clone)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@cache
def checks() -> tuple[CheckInfo, ...]:
    """Every declared check, in suite order."""
    # No bytecode written beside the node package: the validators role copies that tree.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-m", "nodecert_node", "list", "--json"],
                         cwd=node_package_dir().parent, capture_output=True, text=True,
                         timeout=60, check=False, env=env)
    if out.returncode != 0:
        raise NodecertError(f"the node package could not list its checks: {out.stderr[-500:]}",
                            hint="a check module fails to import; run `python3 -m "
                                 "nodecert_node list` in validators/ to see why")
    return tuple(CheckInfo(c["name"], int(c["order"]), tuple(c["suites"]), tuple(c["tools"]),
                           c["description"], c["module"], tuple(c.get("needs") or ()))
                 for c in sorted(json.loads(out.stdout), key=lambda c: (c["order"], c["name"])))


def suite_checks(suite: str) -> tuple[str, ...]:
    return tuple(c.name for c in checks() if suite in c.suites)


def needs_of(check: str) -> tuple[str, ...]:
    """What a host must be for `check` to apply (nothing for a check the node does not
    declare: a site's suite file may name one; the node then says it is unknown)."""
    return next((c.needs for c in checks() if c.name == check), ())


__all__ = ["CheckInfo", "checks", "needs_of", "node_package_dir", "suite_checks"]
