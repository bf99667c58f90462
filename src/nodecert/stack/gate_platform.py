"""The gate's rules on the platform: the OS supported, every pin confirmed published for
it, and the security bulletins the stack's components are fixed against."""

from __future__ import annotations

from nodecert.core.errors import VersionError
from nodecert.core.verdict import Verdict
from nodecert.stack import advisories
from nodecert.stack.gate_rule import RuleContext, RuleResult, rule_result

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

def rule_advisories(c: RuleContext) -> list[RuleResult]:
    """Every installed component against the security bulletins' fixed releases
    (stacks/compat/advisories.yml): below one is FAIL unless the site accepted it."""
    out = []
    for component, version in (("driver", str(c.stack.driver)), *c.others):
        rule = f"security.advisories[{component}]"
        try:
            findings = advisories.judge(component, version, allowed=c.allowed)
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
                          f"{component} {version} includes every fixed release of "
                          f"{len(findings)} bulletins ({', '.join(f.advisory for f in findings)})"
                          if findings else f"no bulletin names {component}", *srcs))
    return out


__all__ = [
    "rule_advisories",
    "rule_os_supported",
    "rule_pins_confirmed",
]
