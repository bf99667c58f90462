"""One check contract on both sides: a check declares once what applies it (the node's
declaration), and the control side finds what it does with the check's results (judge,
page, echoes, roles) in nodecert.core.checks. A throwaway check written here plugs in
without touching any other module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodecert.certs import html
from nodecert.core import checks
from nodecert.profiles import catalog, thresholds
from nodecert.validation import echoes, plan
from nodecert_node import registry
from nodecert_node.contract import NEEDS, Plan, Result, Verdict

PROBE = "probe.thing"


@pytest.fixture
def probe() -> Iterator[str]:
    """A control-side check declared by a test, withdrawn after it."""
    def judge(res: Result, ctx: checks.JudgeContext) -> Result:
        limit = float(ctx.spec.get("probe_max", 1.0))
        bad = isinstance(res.value, int | float) and res.value > limit
        return res.with_(verdict=Verdict.FAIL if bad else Verdict.PASS,
                         summary=f"{ctx.host}: {res.value} against at most {limit:g}")

    def chart(p: dict[str, Any], tr: checks.Voice) -> list[str]:
        r = checks.result_of(p["results"], PROBE)
        return [f"<svg data-kind='probe'>{tr('probe')} {r['value']}</svg>"]

    def line(p: dict[str, Any], tr: checks.Voice) -> list[tuple[str, str]]:
        value = checks.result_of(p["results"], PROBE)["value"]
        return [("probe figure", tr.localize(f"{value:,}"))]

    def after(h: checks.HostReadings) -> Result | None:
        return None if h.recipe is None else Result(PROBE + "_bmc", Verdict.PASS, "read")

    checks.declare(PROBE, module="tests.probe", judge=judge, plots=chart, summary=line,
                   echoes=(("size", "gemm_size", 8192, "equal"),), order=5, summary_order=5)
    checks.declare(PROBE + "_bmc", module="tests.probe", after_bmc=after)
    yield PROBE
    checks.withdraw(PROBE)
    checks.withdraw(PROBE + "_bmc")


def test_a_throwaway_control_side_check_plugs_in_everywhere(probe: str) -> None:
    # judged here: a live run (session) and a collected run (revalidate) ask the registry
    assert probe in checks.judged_here()
    ctx = checks.JudgeContext("h1", None, {"probe_max": 2})
    got = checks.judge(Result(probe, Verdict.PASS, "gathered", value=3), ctx)
    assert got.verdict is Verdict.FAIL and got.summary == "h1: 3 against at most 2"
    assert checks.judge(Result(probe, Verdict.PASS, "gathered", value=1), ctx).verdict \
        is Verdict.PASS
    other = Result("health.gpu", Verdict.WARN, "as the node judged it")
    assert checks.judge(other, ctx) is other
    # on the page: its chart before every other one, its line first in the summary
    bmc = {"check": "bmc.power", "verdict": "PASS",
           "facts": {"samples": [{"t": 0, "power_w": 5200.0}, {"t": 5, "power_w": 6400.0}]}}
    p = {"results": [{"check": probe, "verdict": "FAIL", "value": 12345}, bmc]}
    charts = html.plots(p)
    assert charts[0] == "<svg data-kind='probe'>probe 12345</svg>"
    assert any("bmc-power" in c for c in charts[1:])
    assert html.energy(p)[0] == ("probe figure", "12,345")
    assert html.plots({"results": [bmc]})[0] != charts[0]  # no result: no chart
    # its echoes are held against the plan
    run_plan = Plan(run_id="r", host="h1", suite="quick", checks=[probe],
                    options={"load": {"gemm_size": 4096}})
    held = echoes.held_to_plan(Result(probe, Verdict.PASS, "ok", value={"size": 8192}),
                               run_plan)
    assert held.verdict is Verdict.FAIL and held.fault_code == "NC-PLAN-MISMATCH"
    # judged once the BMC's readings are in, where the host asks for it
    after = [d.id for d in checks.after_bmc()]
    assert after.index(PROBE + "_bmc") > after.index("firmware.recipe")
    decl = checks.find(PROBE + "_bmc")
    assert decl is not None and decl.after_bmc is not None
    assert decl.after_bmc(checks.HostReadings(None, None, None, [])) is None
    readings = checks.HostReadings(object(), None, None, [])
    assert decl.after_bmc(readings) == Result(PROBE + "_bmc", Verdict.PASS, "read")


def test_a_declaration_in_the_wrong_place_or_twice_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"belongs in nodecert\.checks\.load"):
        checks.declare("load.other", module="nodecert.checks.fabric")
    with pytest.raises(RuntimeError, match="declared twice"):
        checks.declare("load.burnin", module="tests.elsewhere")
    with pytest.raises(RuntimeError, match="unknown role"):
        checks.declare("probe.x", module="tests.probe", roles=("identiy",))
    with pytest.raises(RuntimeError, match="unknown page"):
        checks.declare("probe.x", module="tests.probe", page="fleet")
    assert "load.other" not in checks.REGISTRY and "probe.x" not in checks.REGISTRY
    assert checks.find("load.burnin") is not None  # the real one untouched


def test_each_role_is_asked_for_never_a_check_name() -> None:
    assert checks.with_role("identity") == "hardware.inventory"
    assert checks.with_role("stack-record") == "stack.conformance"
    assert checks.with_role("attestation") == "attestation.gpu"
    assert checks.played_by("domain-load") == ("rack.allreduce", "rack.sweep")
    for role in checks.ROLES:
        assert checks.played_by(role), f"no check plays {role}"
    checks.declare("probe.identity", module="tests.probe", roles=("identity",))
    try:
        with pytest.raises(RuntimeError, match="exactly one check"):
            checks.with_role("identity")
    finally:
        checks.withdraw("probe.identity")
    with pytest.raises(KeyError):
        checks.with_role("firmware")


def test_every_control_side_declaration_is_a_check_something_runs() -> None:
    # a node check, a BMC check or a cluster/rack stage's: never a stale name
    node = {c.name for c in catalog.checks()}
    for cid, d in checks.discover().items():
        assert d.module == f"nodecert.checks.{cid.split('.', 1)[0]}", cid
        assert cid in node or cid.split(".", 1)[0] in {"bmc", "firmware", "rack", "fabric"}, \
            cid


def test_what_a_check_needs_to_apply_is_declared_with_it() -> None:
    assert set(plan.HAS) == set(NEEDS)
    assert catalog.needs_of("domain.imex") == ("rack", "rack-imex")
    assert catalog.needs_of("attestation.gpu") == ("attestation",)
    assert catalog.needs_of("health.gpu") == ()
    assert catalog.needs_of("no.such") == ()

    def fn(ctx: Any) -> Result:
        return Result("storage.x", Verdict.PASS, "")
    fn.__module__ = "nodecert_node.checks.storage"
    with pytest.raises(RuntimeError, match=r"needs \['racks'\]"):
        registry.check("storage.x", description="x", order=1, needs=("racks",))(fn)
    assert "storage.x" not in registry.REGISTRY
    # the quick suite names the domain's checks; a server in no rack gets none of them
    assert "domain.fabric" in thresholds.suite("quick").checks
