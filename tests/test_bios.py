"""BIOS profiles and bmc.bios: the shipped profile loads with its sources; a BMC's Redfish
Bios parses on real answers (Dell iDRAC 9, Cisco CIMC, the DMTF mockup, an empty pending
object); each attribute at another value FAILs naming it, one the BIOS does not report
is ERROR, a pending change is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodecert.core.errors import ManifestError, UnknownNameError
from nodecert.stack.bios import differences, find_profile, judge_bios, with_site
from nodecert_node.contract import Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse import redfish as rf

pytestmark = pytest.mark.unit

REAL = Path(__file__).parent / "fixtures" / "real" / "redfish-bios"
DELL = json.loads((REAL / "dell-idrac9-poweredge-r650-systems-bios-attributes.json")
                  .read_text())
PROFILE = find_profile("dell-poweredge-gpu")


def test_real_bios_documents_parse() -> None:
    dell = rf.parse_bios(DELL)
    assert dell["attributes"]["SysProfile"] == "PerfOptimized"
    assert dell["settings"] == "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"
    assert "OnReset" in dell["apply_times"]
    pending = rf.parse_bios(json.loads((REAL / "dell-idrac9-poweredge-r650-bios-settings-"
                                                "pending-empty.json").read_text()))
    assert pending["attributes"] == {} and pending["settings"] is None
    cisco = rf.parse_bios(json.loads((REAL / "cisco-cimc-ucsc-c220-m6n-t4-gpu-server-"
                                              "systems-bios-attributes.json").read_text()))
    assert cisco["attributes"]["CbsCmnGnbNbIOMMU"] == "Auto"
    dmtf = rf.parse_bios(json.loads((REAL / "dmtf-mockup-public-rackmount1-systems-bios.json")
                                    .read_text()))
    assert dmtf["attributes"]["ProcCoreDisable"] == 0
    assert dmtf["settings"] == "/redfish/v1/Systems/437XR1138R2/Bios/Settings"


@pytest.mark.parametrize("doc", [
    {"@odata.type": "#Bios.v1_2_0.Bios"},
    {"@odata.type": "#Bios.v1_2_0.Bios", "Attributes": {"X": {"nested": 1}}},
    {"@odata.type": "#Manager.v1_10_0.Manager", "Attributes": {}},
])
def test_what_is_no_bios_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ParseError):
        rf.parse_bios(doc)


def test_a_real_dell_bios_judged_against_the_profile() -> None:
    # the R650 is no GPU server: SR-IOV is off there, everything else as the profile wants
    res = judge_bios(PROFILE, {"attributes": rf.parse_bios(DELL)["attributes"],
                               "pending": {"SriovGlobalEnable": "Enabled"}})
    assert res.verdict is Verdict.FAIL and res.fault_code == "NC-BIOS"
    assert res.summary == ("SriovGlobalEnable is Disabled, the profile wants Enabled "
                           "(pending: Enabled at the next reset)")
    assert res.facts["sources"]["MmioAbove4Gb"] == "BIOSBAR"
    ok = dict(rf.parse_bios(DELL)["attributes"], SriovGlobalEnable="Enabled")
    assert judge_bios(PROFILE, {"attributes": ok, "pending": {}}).verdict is Verdict.PASS


def test_a_pending_change_that_breaks_the_profile_fails_before_the_reset() -> None:
    """Right now as the profile wants, but the pending settings change it at the next
    reset: FAIL, naming it; a pending object that repeats every attribute, some in
    another representation (True for "true", 1 for "1"), names only what changes."""
    ok = dict(rf.parse_bios(DELL)["attributes"], SriovGlobalEnable="Enabled")
    copied = {k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v)
              for k, v in ok.items()}  # the whole object again, numbers as text
    copied["SysProfile"] = "PerfPerWattOptimizedDapc"
    res = judge_bios(PROFILE, {"attributes": ok, "pending": copied})
    assert res.verdict is Verdict.FAIL
    assert res.findings == ("SysProfile is PerfOptimized as the profile wants, but the "
                            "BIOS's pending settings change it to PerfPerWattOptimizedDapc "
                            "at the next reset",)
    assert res.facts["pending"] == {"SysProfile": "PerfPerWattOptimizedDapc"}
    # a pending change to the wanted value, or a copy of the current values: no finding
    same = {**copied, "SysProfile": "PerfOptimized"}
    assert judge_bios(PROFILE, {"attributes": ok, "pending": same}).verdict is Verdict.PASS


def test_an_attribute_the_bios_does_not_report_is_an_error() -> None:
    attrs = {k: v for k, v in PROFILE.attributes.items() if k != "SubNumaCluster"}
    res = judge_bios(PROFILE, {"attributes": attrs, "pending": {}})
    assert res.verdict is Verdict.ERROR and "SubNumaCluster: the BIOS does not report it" \
        in res.summary
    unread = judge_bios(PROFILE, None, bmc_error="BMC not read: unreachable")
    assert unread.verdict is Verdict.ERROR and "unreachable" in unread.summary


def test_the_site_adds_attributes_and_only_reported_ones_are_set() -> None:
    site = with_site(PROFILE, {"LogicalProc": "Disabled"})
    assert site.sources["LogicalProc"] == "site"
    attrs = dict(PROFILE.attributes, LogicalProc="Enabled", SysProfile="Custom")
    assert differences(site, attrs) == {"LogicalProc": "Disabled",
                                        "SysProfile": "PerfOptimized"}
    assert differences(site, {}) == {}  # nothing absent is written
    with pytest.raises(ManifestError, match="a BIOS attribute is text"):
        with_site(PROFILE, {"X": [1]})
    with pytest.raises(UnknownNameError, match="dell-poweredge-gpu"):
        find_profile("hpe-gpu")
