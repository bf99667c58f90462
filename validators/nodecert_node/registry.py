"""The check registry: every check declares itself once, in the module named after its
prefix (`checks/dcgm.py` holds `dcgm.*`).

A declaration names the check, its place in a suite (`order`: cheap, read-only
checks first, loads last), the suites that include it, the tools it runs, what the host
must be for it to apply (`needs`, from contract.NEEDS: the control side plans it only
for such a host), a one-line description, and the function that gathers and judges.
The suites' check lists come from these declarations alone. `discover()` imports every
public module of the `checks` package, so adding a check never means editing the runner.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from nodecert_node.context import NoGpu
from nodecert_node.contract import NEEDS, Evidence, Result, Verdict, error_result
from nodecert_node.parse import ParseError
from nodecert_node.tools import ToolError


@dataclass(frozen=True)
class CheckSpec:
    name: str
    fn: Callable[[Any], Result]  # Ctx -> Result (gather, then a pure judge)
    description: str
    order: int
    suites: tuple[str, ...]
    tools: tuple[str, ...]
    module: str
    needs: tuple[str, ...] = ()


REGISTRY: dict[str, CheckSpec] = {}


def check(name: str, *, description: str, order: int, suites: tuple[str, ...] = (),
          tools: tuple[str, ...] = (), needs: tuple[str, ...] = ()
          ) -> Callable[[Callable[[Any], Result]], Callable[[Any], Result]]:
    """Declare a check. Its module must be named after the check's prefix."""
    prefix = name.split(".", 1)[0]
    unknown = sorted(set(needs) - set(NEEDS))
    if unknown:
        raise RuntimeError(f"check {name!r} needs {unknown}: not among {sorted(NEEDS)}")

    def deco(fn: Callable[[Any], Result]) -> Callable[[Any], Result]:
        module = fn.__module__
        if module.rsplit(".", 1)[-1] != prefix:
            raise RuntimeError(f"check {name!r} is declared in {module}; it belongs in "
                               f"nodecert_node.checks.{prefix}")
        register(CheckSpec(name, fn, description, order, tuple(suites), tuple(tools), module,
                           tuple(needs)))
        return fn
    return deco


def register(spec: CheckSpec) -> None:
    """Add a check (check() does this for the modules of nodecert_node.checks)."""
    if spec.name in REGISTRY and REGISTRY[spec.name].fn is not spec.fn:
        raise RuntimeError(f"check {spec.name!r} is declared twice")
    REGISTRY[spec.name] = spec


def discover() -> dict[str, CheckSpec]:
    """Import every public module of nodecert_node.checks (each declares its checks)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checks")
    for info in sorted(pkgutil.iter_modules([path]), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"nodecert_node.checks.{info.name}")
    return REGISTRY


def run_check(name: str, ctx: Any) -> Result:
    """Run one check in this process; whatever happens, return a Result (never raise)."""
    start = time.monotonic()
    spec = discover().get(name)
    if spec is None:
        return error_result(name, f"unknown check {name!r}", fault_code="NC-UNKNOWN-CHECK",
                            remediation=f"Known checks: {', '.join(sorted(REGISTRY))}.")
    try:
        res = spec.fn(ctx)
    except NoGpu as exc:
        res = Result(name, Verdict.FAIL, str(exc), evidence=tuple(exc.evidence),
                     fault_code=exc.code, remediation=exc.fix)
    except ToolError as exc:
        what = {"timeout": "NC-TOOL-TIMEOUT", "missing": "NC-TOOL-MISSING"}.get(
            exc.kind, "NC-TOOL-FAILED")
        res = error_result(name, str(exc), evidence=(exc.evidence,) if exc.evidence else (),
                           fault_code=what)
    except ParseError as exc:
        res = error_result(name, f"could not read the tool output: {exc}",
                           fault_code="NC-PARSE")
    except Exception:  # a crash in one check must never abort the suite
        tb = traceback.format_exc()
        res = error_result(name, f"check crashed: {tb.strip().splitlines()[-1]}",
                           evidence=(Evidence.of("traceback", "", None, tb),),
                           fault_code="NC-CHECK-CRASH")
    return res.with_(duration_s=time.monotonic() - start)


__all__ = ["REGISTRY", "CheckSpec", "check", "discover", "register", "run_check"]
