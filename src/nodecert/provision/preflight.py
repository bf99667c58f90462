"""Preflight: the checks every entry point runs before touching any host.

Loads and validates the inventory, resolves the stack for each host
(``--stack`` overrides ``nodecert_stack``), and runs the stack gate once per
distinct (stack, GPU model, OS, accepted advisories) found in the inventory. The gate
judges the stack's pins and what the roles pin beside them (the container toolkit)
against the security bulletins.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from nodecert.core.ansible_env import select_hosts
from nodecert.core.errors import InventoryError
from nodecert.core.verdict import Verdict, worst
from nodecert.inventory.reader import HostSpec, load_inventory
from nodecert.provision.rolepkgs import role_pins
from nodecert.stack.compat import Matrix, default_matrix
from nodecert.stack.gate import GateReport, evaluate
from nodecert.stack.manifest import find_stack


@dataclass(frozen=True)
class PreflightReport:
    hosts: dict[str, HostSpec]
    gates: tuple[tuple[tuple[str, ...], GateReport], ...]  # (hosts covered, report)

    @property
    def verdict(self) -> Verdict:
        return worst(g.verdict for _, g in self.gates)

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": str(self.verdict),
            "hosts": sorted(self.hosts),
            "gates": [{"hosts": list(h), **g.as_dict()} for h, g in self.gates],
        }


def role_components() -> dict[str, str]:
    """What the roles that are on by default install beside the stack (component ->
    version): judged by the gate with the stack."""
    return {p.role: p.version for p in role_pins()}


def preflight(inventory: Path, stack: str | None = None, *, limit: tuple[str, ...] = (),
              today: dt.date | None = None, matrix: Matrix | None = None,
              allow_advisories: frozenset[str] = frozenset()) -> PreflightReport:
    """`allow_advisories`: accepted for every host (`--allow-advisory`), besides each
    host's own nodecert_allow_advisories."""
    matrix = matrix or default_matrix()
    hosts = load_inventory(inventory, matrix)
    if limit:
        chosen = select_hosts(inventory, limit, list(hosts))
        hosts = {n: h for n, h in hosts.items() if n in chosen}
    groups: dict[tuple[str, str, str | None, frozenset[str]], list[str]] = {}
    for name, spec in sorted(hosts.items()):
        stack_name = stack or spec.stack
        if stack_name is None:
            raise InventoryError(f"host {name}: no stack chosen",
                                 where=str(inventory),
                                 hint="pass --stack NAME or set nodecert_stack for the host")
        allowed = allow_advisories | frozenset(spec.validation.get("allow_advisories") or ())
        groups.setdefault((stack_name, spec.gpu_model, spec.os, allowed), []).append(name)
    gates = []
    others = role_components()
    for (stack_name, gpu, os_name, allowed), names in groups.items():
        report = evaluate(find_stack(stack_name, matrix=matrix), gpu=gpu, os_name=os_name,
                          today=today, matrix=matrix, others=others,
                          allow_advisories=allowed)
        gates.append((tuple(names), report))
    return PreflightReport(hosts, tuple(gates))
