"""The control side's half of the check contract: what the control side does with a
check's results, declared once per check and found here by the check's id.

A node check declares itself on the node (`nodecert_node.registry.check`: its id, suites,
tools, and what it needs to apply). What only the control side can do with its result is
declared in one module of `nodecert.checks`, named after the check's prefix, with
`declare()`:

- `judge`: the check is gathered on the node and judged here (against the stack
  manifest, the security bulletins, ...);
- `plots` and `summary`: how its figures appear on the certificate's page (charts, the
  summary's lines);
- `echoes`: which of its reported parameters must equal what the plan asked;
- `after_bmc`: the check is judged here once the host's checks and its BMC's readings
  are in (the firmware recipe, the BIOS profile): from a `HostReadings`, a Result, or
  None where the host asks nothing of it;
- `roles`: what the certificate and the rest of nodecert ask for by role, not by id
  (`identity`: the check that reads the hardware identity; `stack-record`: the check
  that reads what is installed; `attestation`: hardware-rooted evidence;
  `firmware-record`: the firmware bill of materials; `cabling`: the fabric against the
  cable plan; `domain-load`: what puts an NVLink domain under load, without which a
  rack is not ready; `rack-firmware`: the firmware across a rack's domain).

Consumers ask this registry (`judge()`, `plots()`, `with_role()`, ...) and never name a
check. `discover()` imports every module of `nodecert.checks` (at run time, so this
module, at the bottom of the layers, imports none of them), the way the node side finds
its checks.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from nodecert_node.contract import Result

ROLES = ("identity", "stack-record", "attestation", "firmware-record", "cabling",
         "domain-load", "rack-firmware", "topology-record", "ib-record", "roce-record")


class Voice(Protocol):
    """How a page speaks (nodecert.certs.i18n.Voice): messages and numbers."""

    def __call__(self, message: str) -> str: ...

    def localize(self, number: str) -> str: ...


@dataclass(frozen=True)
class JudgeContext:
    """What a control-side judge may use: the host, its stack (None when not known) and
    the host's plan spec (its rack, its accepted advisories, ...)."""

    host: str
    stack: Any
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class HostReadings:
    """What a host's control-side judges see once its run is over: its recipe and BIOS
    profile (None where it names none), its BMC monitor (None without a BMC; its
    readings and errors), its node's results, and what to say for a host without a
    BMC."""

    recipe: Any
    bios: Any
    monitor: Any
    results: list[Result]
    no_bmc: str = "the host has no nodecert_bmc"


@dataclass(frozen=True)
class ControlCheck:
    id: str
    module: str
    judge: Callable[[Result, JudgeContext], Result] | None = None
    plots: Callable[[dict[str, Any], Voice], list[str]] | None = None
    summary: Callable[[dict[str, Any], Voice], list[tuple[str, str]]] | None = None
    # (the result's value key, the plan's load option, its default, "equal" | "at_least")
    echoes: tuple[tuple[str, str, Any, str], ...] = ()
    roles: tuple[str, ...] = ()
    after_bmc: Callable[[HostReadings], Result | None] | None = None
    order: int = 50  # where its charts come on the page (and its after_bmc judgement)
    summary_order: int = 50  # where its summary lines come
    page: str = "node"  # the page its charts are drawn on: node, cluster or rack


REGISTRY: dict[str, ControlCheck] = {}
PACKAGE = "nodecert.checks"
PAGES = ("node", "cluster", "rack")


def declare(check_id: str, *, module: str, judge: Callable[[Result, JudgeContext], Result]
            | None = None, plots: Callable[[dict[str, Any], Voice], list[str]] | None = None,
            summary: Callable[[dict[str, Any], Voice], list[tuple[str, str]]] | None = None,
            echoes: Iterable[tuple[str, str, Any, str]] = (), roles: Iterable[str] = (),
            after_bmc: Callable[[HostReadings], Result | None] | None = None,
            order: int = 50, summary_order: int = 50, page: str = "node") -> ControlCheck:
    """Declare what the control side does with a check's results. `module` is the
    declaring module's `__name__`: a check is declared in the module named after its
    prefix, once."""
    prefix = check_id.split(".", 1)[0]
    if not module.startswith(PACKAGE + "."):
        discover()  # a declaration from elsewhere (a test's) meets the real ones
    elif module.rsplit(".", 1)[-1] != prefix:
        raise RuntimeError(f"check {check_id!r} is declared in {module}; it belongs in "
                           f"{PACKAGE}.{prefix}")
    bad = sorted(set(roles) - set(ROLES))
    if bad:
        raise RuntimeError(f"check {check_id!r}: unknown role(s) {bad}; known: {ROLES}")
    if page not in PAGES:
        raise RuntimeError(f"check {check_id!r}: unknown page {page!r}; known: {PAGES}")
    decl = ControlCheck(check_id, module, judge, plots, summary, tuple(echoes),
                        tuple(roles), after_bmc, order, summary_order, page)
    old = REGISTRY.get(check_id)
    if old is not None and old.module != module:
        raise RuntimeError(f"check {check_id!r} is declared twice ({old.module}, {module})")
    REGISTRY[check_id] = decl
    return decl


def withdraw(check_id: str) -> None:
    """Remove a declaration (a test's throwaway check)."""
    REGISTRY.pop(check_id, None)


@cache
def _import_all() -> None:
    pkg = importlib.import_module(PACKAGE)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{PACKAGE}.{info.name}")


def discover() -> dict[str, ControlCheck]:
    """Every declaration: imports the modules of nodecert.checks (once)."""
    _import_all()
    return REGISTRY


def find(check_id: str) -> ControlCheck | None:
    return discover().get(check_id)


def judged_here() -> frozenset[str]:
    """The checks the node gathers and the control side judges."""
    return frozenset(c for c, d in discover().items() if d.judge is not None)


def judge(res: Result, ctx: JudgeContext) -> Result:
    """`res` judged where the node only gathered it; any other result as it is."""
    d = find(res.check)
    return d.judge(res, ctx) if d is not None and d.judge is not None else res


def after_bmc() -> list[ControlCheck]:
    """The checks judged once a host's run and its BMC's readings are in, in order."""
    return sorted((d for d in discover().values() if d.after_bmc is not None),
                  key=lambda d: (d.order, d.id))


def with_role(role: str) -> str:
    """The id of the one check that plays `role`."""
    found = played_by(role)
    if len(found) != 1:
        raise RuntimeError(f"role {role!r} is played by {found or 'no check'}: exactly one "
                           f"check must declare it")
    return found[0]


def played_by(role: str) -> tuple[str, ...]:
    """The ids of every check that plays `role`, sorted."""
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; known: {ROLES}")
    return tuple(sorted(c for c, d in discover().items() if role in d.roles))


def result_of(results: Iterable[Any], check_id: str) -> Any:
    """The result (a Result or its dict) of check_id among results, or None."""
    for r in results:
        got = r.get("check") if isinstance(r, dict) else getattr(r, "check", None)
        if got == check_id:
            return r
    return None


def by_role(results: Iterable[Any], role: str) -> Any:
    """The result of the check that plays `role`, or None."""
    return result_of(results, with_role(role))


def plots(p: dict[str, Any], tr: Voice, page: str = "node") -> list[str]:
    """Every chart declared for `page` that the predicate's results have the data for,
    in page order. `p`: the certificate's predicate (its `results` among it)."""
    out: list[str] = []
    for d in sorted(discover().values(), key=lambda d: (d.order, d.id)):
        if d.plots is not None and d.page == page and result_of(p["results"], d.id):
            out.extend(d.plots(p, tr))
    return out


def summary(p: dict[str, Any], tr: Voice) -> list[tuple[str, str]]:
    """Every declared summary line the predicate's results have the data for."""
    out: list[tuple[str, str]] = []
    for d in sorted(discover().values(), key=lambda d: (d.summary_order, d.id)):
        if d.summary is not None and result_of(p["results"], d.id):
            out.extend(d.summary(p, tr))
    return out


def echoes(check_id: str) -> tuple[tuple[str, str, Any, str], ...]:
    d = find(check_id)
    return d.echoes if d is not None else ()


__all__ = [
    "PACKAGE",
    "PAGES",
    "REGISTRY",
    "ROLES",
    "ControlCheck",
    "HostReadings",
    "JudgeContext",
    "Voice",
    "after_bmc",
    "by_role",
    "declare",
    "discover",
    "echoes",
    "find",
    "judge",
    "judged_here",
    "played_by",
    "plots",
    "result_of",
    "summary",
    "with_role",
    "withdraw",
]
