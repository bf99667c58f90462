"""The gate's rules on the platform: the OS supported, every pin confirmed published for
it, and the advisories (security bulletins, correctness defects) the stack's components
are fixed against."""

from __future__ import annotations

import re

from nodecert.core.errors import VersionError
from nodecert.core.verdict import Verdict
from nodecert.stack import advisories
from nodecert.stack.gate_rule import RuleContext, RuleResult, rule_result
from nodecert.stack.manifest import Stack

# --- OS ------------------------------------------------------------------------------------

def _os_names(c: RuleContext) -> list[str]:
    return [c.os] if c.os else list(c.stack.os)


def rule_os_supported(c: RuleContext) -> list[RuleResult]:
    rule = "os.supported"
    if c.os is None:
        return [rule_result(rule, Verdict.PASS, f"stack pins packages for {', '.join(c.stack.os)}")]
    if c.os in c.stack.os:
        n = len(c.stack.os[c.os].packages)
        return [rule_result(rule, Verdict.PASS, f"stack pins {n} packages for {c.os}")]
    return [rule_result(rule, Verdict.FAIL,
               f"stack pins no packages for {c.os}; it supports {', '.join(c.stack.os)}")]


def rule_pins_confirmed(c: RuleContext) -> list[RuleResult]:
    out = []
    for os_name in _os_names(c):
        pins = c.stack.os.get(os_name)
        if pins is None:
            continue
        rule = f"os.pins-confirmed[{os_name}]"
        unconfirmed = [p for p in pins.packages if not p.confirmed]
        srcs = tuple(dict.fromkeys(s for p in unconfirmed for s in p.sources))
        if unconfirmed:
            listed = ", ".join(p.pin for p in unconfirmed)
            out.append(rule_result(rule, Verdict.WARN,
                          f"{len(unconfirmed)} of {len(pins.packages)} pins were not seen "
                          f"published: {listed}; confirm each with `apt-cache madison <name>` "
                          "before freezing", *srcs))
        else:
            srcs = tuple(dict.fromkeys(s for p in pins.packages for s in p.sources))
            out.append(rule_result(rule, Verdict.PASS,
                          f"all {len(pins.packages)} pins on {os_name} are confirmed", *srcs))
    return out



# --- security ------------------------------------------------------------------------------

_WHEEL = re.compile(r"^nvidia-(cublas)(?:-cu\d+)?==(\S+)$")


def libraries(stack: Stack, table: advisories.Advisories) -> list[tuple[str, str, str]]:
    """(component, version, where) of the libraries an advisory may name that the stack
    brings: its CUDA toolkit's own (the release table.bundled says the toolkit ships) and
    its framework's wheels (PyTorch brings its own cuBLAS)."""
    out = [(b.component, b.version, f"CUDA {stack.cuda}")
           for b in table.shipped_with(str(stack.cuda))]
    for pin in stack.framework.hashes:
        m = _WHEEL.match(pin)
        if m:
            out.append((m.group(1), m.group(2), f"the framework's {pin.split('==')[0]}"))
    return out


def rule_advisories(c: RuleContext) -> list[RuleResult]:
    """Every installed component against the advisories' fixed releases (security
    bulletins and correctness defects, stacks/compat/advisories.yml): below one is FAIL
    unless the site accepted it."""
    out = []
    table = advisories.default_advisories()
    judged = [(k, v, "") for k, v in (("driver", str(c.stack.driver)), *c.others)]
    for component, version, where in judged + libraries(c.stack, table):
        rule = f"security.advisories[{component}]"
        if where:
            rule = f"{rule} ({where})"
        try:
            findings = advisories.judge(component, version, allowed=c.allowed, table=table)
        except VersionError as exc:
            out.append(rule_result(rule, Verdict.WARN, f"{component} {version}: {exc}; not judged "
                          "against the security bulletins"))
            continue
        srcs = tuple(dict.fromkeys(s for f in findings for s in f.sources))
        bad = [f for f in findings if f.verdict > Verdict.PASS]
        if bad:
            out.append(rule_result(rule, advisories.worst_findings(findings),
                          "; ".join(f.message for f in bad), *srcs))
        else:
            out.append(rule_result(rule, Verdict.PASS,
                          f"{component} {version} is clear of {len(findings)} "
                          f"advisor{'y' if len(findings) == 1 else 'ies'} "
                          f"({'; '.join(f.message for f in findings)})"
                          if findings else f"no advisory names {component}", *srcs))
    return out


__all__ = [
    "libraries",
    "rule_advisories",
    "rule_os_supported",
    "rule_pins_confirmed",
]
