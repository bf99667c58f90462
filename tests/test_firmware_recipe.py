"""Firmware recipes: the shipped recipes load with their sources; a BMC's Redfish
FirmwareInventory parses on real answers (HPE iLO 5, Cisco CIMC, the DMTF mockup) and
their variants; a host's readings judged against its recipe: a component behind FAILs
naming where it was read, found and wanted; one nothing reports is ERROR, never PASS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert.bmc.gather import RedfishSource
from nodecert.core.errors import InventoryError, ManifestError, UnknownNameError
from nodecert.inventory.bmc import BmcSpec
from nodecert.lab.bmcmodel import firmware_members, member_id
from nodecert.lab.hardware import profile
from nodecert.stack.firmware import (
    find_recipe,
    inband_readings,
    judge_recipe,
    list_recipes,
    same_version,
    with_overrides,
)
from nodecert.transport.become import Secret
from nodecert_node.contract import Result, Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse import redfish as rf
from support.orders import h200_host

pytestmark = pytest.mark.unit

REAL = Path(__file__).parent / "fixtures" / "real" / "redfish-fw"


def real(name: str) -> Any:
    return json.loads((REAL / name).read_text())


# --- the recipes -------------------------------------------------------------------------------

def test_the_shipped_recipes_load_with_sourced_components() -> None:
    recipes = {r.name: r for r in list_recipes()}
    assert set(recipes) >= {"dgx-gb200-compute-tray", "dgx-gb300-compute-tray",
                            "dgx-h200-motherboard"}
    gb200 = recipes["dgx-gb200-compute-tray"]
    assert gb200.components["gpu"].version == "97.00.B9.00.69"
    assert gb200.components["gpu"].inband == "gpu_vbios"
    assert gb200.components["cx7"].version == "28.46.3048" and "FWGB200" in gb200.sources
    assert all(r.sources for r in recipes.values())


def test_an_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="dgx-gb200-compute-tray"):
        find_recipe("dgx-gb100")


@pytest.mark.parametrize(("body", "words"), [
    ("components: {bmc: {version: '1.0'}}", "neither where the BMC reports it"),
    ("components: {bmc: {version: '1.0', redfish: ['(']}}", "not a regular expression"),
    ("components: {bmc: {version: '1.0', inband: bios}}", "bios"),
    ("components: {}", "at least one component"),
])
def test_a_broken_recipe_is_refused_naming_the_file(tmp_path: Path, body: str,
                                                    words: str) -> None:
    path = tmp_path / "site.yml"
    path.write_text("schema: nodecert.firmware-recipe/v1\nname: site\ntitle: t\n"
                    f"gpu_models: [H200-SXM]\nsource: [FWDGXH]\n{body}\n")
    with pytest.raises(ManifestError) as exc:
        find_recipe(str(path))
    assert words in str(exc.value) and "site.yml" in str(exc.value.where or "")


def test_a_site_overrides_a_version_or_a_whole_component() -> None:
    base = find_recipe("dgx-h200-motherboard")
    site = with_overrides(base, {"cpld_mb": "0.2.1.9", "bmc": {
        "version": "24.09.17", "redfish": ["^BMC$"]}})
    assert site.components["cpld_mb"].version == "0.2.1.9"
    assert site.components["cpld_mb"].redfish == base.components["cpld_mb"].redfish
    assert site.components["bmc"].redfish == ("^BMC$",) and site.overridden == ("bmc",
                                                                                 "cpld_mb")
    with pytest.raises(ManifestError, match="does not say where"):
        with_overrides(base, {"bmc": "24.09.17"})
    with pytest.raises(ManifestError, match="expected a version"):
        with_overrides(base, {"bmc": ["24.09.17"]})


# --- Redfish FirmwareInventory -------------------------------------------------------------

@pytest.mark.parametrize(("name", "ident", "version"), [
    ("hpe-ilo5-proliant-dl360-gen10-plus-firmwareinventory-1-ilo5-2.55.json", "1",
     "2.55 Oct 01 2021"),
    ("hpe-ilo5-proliant-dl360-gen10-plus-firmwareinventory-2-system-rom-u46-1.56.json", "2",
     "U46 v1.56 (11/29/2021)"),
    ("cisco-cimc-ucsc-c220-m6n-firmwareinventory-bios.json", "BIOS",
     "C225M6.4.2.2b.0.0509222122"),
    ("cisco-cimc-ucsc-c220-m6n-firmwareinventory-cimc-4.2-2a.json", "CIMC", "4.2(2a)"),
    ("dmtf-mockup-public-rackmount1-firmwareinventory-bmc.json", "BMC", "1.45.455b66-rev4"),
])
def test_real_firmware_inventory_members(name: str, ident: str, version: str) -> None:
    m = rf.parse_software_inventory(real(name))
    assert m["id"] == ident and m["version"] == version


def test_the_backup_rom_is_kept_and_never_judged_as_what_runs() -> None:
    """HPE lists the active System ROM and its backup bank ("SystemRomBackup", "Redundant
    System ROM", an older version): a recipe matching both judges the active one only,
    and keeps the backup in its bill of materials."""
    active = rf.parse_software_inventory(real(
        "hpe-ilo5-proliant-dl360-gen10-plus-firmwareinventory-2-system-rom-u46-1.56.json"))
    backup = rf.parse_software_inventory(real(
        "hpe-ilo5-proliant-dl360-gen10-plus-firmwareinventory-11-redundant-system-rom-"
        "u46-1.42.json"))
    assert (active["description"], active["standby"]) == ("SystemRomActive", False)
    assert (backup["description"], backup["standby"]) == ("SystemRomBackup", True)
    from nodecert.stack.firmware import Component, Recipe, judge_recipe
    rom = Component("system_rom", "U46 v1.56", redfish=("^(2|11)$",))
    recipe = Recipe("hpe", "t", ("H100",), ("S",), {"system_rom": rom})
    r = judge_recipe(recipe, [active, backup], None)
    assert r.verdict is Verdict.PASS, r.findings
    assert r.facts["bom"]["system_rom"] == {
        "wanted": "U46 v1.56", "found": {"BMC 2": "U46 v1.56 (11/29/2021)"},
        "standby": {"BMC 11": "U46 v1.42 (05/26/2021)"}}
    # the backup alone never stands in for what runs
    r = judge_recipe(recipe, [backup], None)
    assert r.verdict is Verdict.ERROR and "nothing reports it" in r.summary
    # DMTF's word for a backup image: State StandbySpare
    spare = rf.parse_software_inventory({**real(
        "dmtf-mockup-public-rackmount1-firmwareinventory-bmc.json"),
        "Status": {"State": "StandbySpare", "Health": "OK"}})
    assert spare["standby"] is True


def test_the_dmtf_member_keeps_its_optional_fields() -> None:
    m = rf.parse_software_inventory(real("dmtf-mockup-public-rackmount1-firmwareinventory-"
                                         "bmc.json"))
    assert m["lowest_supported"] == "1.30.367a12-rev1" and m["updateable"] is True
    assert m["software_id"] == "1624A9DF-5E13-47FC-874A-DF3AFF143089"


def test_real_firmware_inventory_collections() -> None:
    hpe = rf.member_links(real("hpe-ilo5-proliant-dl360-gen10-plus-firmwareinventory-"
                               "collection-25-members.json"), "FirmwareInventory")
    assert len(hpe) == 25 and hpe[0] == "/redfish/v1/UpdateService/FirmwareInventory/1"
    cisco = rf.member_links(real("cisco-cimc-ucsc-c220-m6n-firmwareinventory-collection-"
                                 "with-gpu.json"), "FirmwareInventory")
    assert cisco[-1].endswith("/UCSC-GPU-T4-16-slot-3")


@given(st.dictionaries(st.sampled_from(["Description", "Oem", "Manufacturer", "ReleaseDate",
                                        "@odata.etag", "RelatedItem"]),
                       st.text(max_size=20), max_size=4),
       st.one_of(st.none(), st.text(min_size=1, max_size=30)))
def test_a_member_with_more_or_less_keeps_its_version(extra: dict[str, str],
                                                      version: str | None) -> None:
    doc: dict[str, Any] = {"@odata.type": "#SoftwareInventory.v1_2_0.SoftwareInventory",
                           "@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/X1",
                           **extra}
    if version is not None:
        doc["Version"] = version
    m = rf.parse_software_inventory(doc)
    assert m["id"] == "X1"  # from the @odata.id where there is no Id
    assert m["version"] == (version.strip() or None if version is not None else None)


@pytest.mark.parametrize("doc", [
    {"@odata.type": "#Manager.v1_10_0.Manager", "Id": "1", "Version": "1"},
    {"@odata.type": "#SoftwareInventory.v1_2_0.SoftwareInventory", "Id": "1", "Version": 2},
    {"@odata.type": "#SoftwareInventory.v1_2_0.SoftwareInventory", "Version": "2"},
    ["not", "an", "object"],
])
def test_what_is_no_firmware_member_is_refused(doc: Any) -> None:
    with pytest.raises(ParseError):
        rf.parse_software_inventory(doc)


def _source(tree: dict[str, Any]) -> RedfishSource:
    src = RedfishSource(BmcSpec("h1", "127.0.0.1", "redfish", 443, "u", Secret("p")))

    def fetch(path: str) -> Any:
        return tree[path]
    src._fetch = fetch  # type: ignore[method-assign]
    return src


def test_the_source_reads_every_member_and_a_broken_one_costs_only_the_inventory() -> None:
    base = "/redfish/v1/UpdateService"
    tree = {base: {"FirmwareInventory": {"@odata.id": f"{base}/FirmwareInventory"}},
            f"{base}/FirmwareInventory": real("dmtf-mockup-public-rackmount1-"
                                              "firmwareinventory-collection.json"),
            f"{base}/FirmwareInventory/BMC": real("dmtf-mockup-public-rackmount1-"
                                                  "firmwareinventory-bmc.json"),
            f"{base}/FirmwareInventory/BIOS": real("dmtf-mockup-public-rackmount1-"
                                                   "firmwareinventory-bios.json")}
    links = rf.member_links(tree[f"{base}/FirmwareInventory"], "x")
    for link in links:
        tree.setdefault(link, {"@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory",
                               "@odata.id": link, "Version": "9"})
    src = _source(tree)
    got = src._firmware(base)
    assert got is not None and {m["id"] for m in got} >= {"BMC", "BIOS"}
    assert src.evidence[-1].name == "firmware versions"
    tree[f"{base}/FirmwareInventory/BMC"] = {**tree[f"{base}/FirmwareInventory/BMC"],
                                            "Version": 7}
    broken = _source(tree)
    assert broken._firmware(base) is None
    assert "Version is int" in broken.firmware_error
    assert _source({})._firmware(None) is None


# --- the judgement ---------------------------------------------------------------------------

H200 = find_recipe("dgx-h200-motherboard")
GB200 = find_recipe("dgx-gb200-compute-tray")


def _members(recipe_profile: str, **old: str) -> list[dict[str, Any]]:
    hw = {"profile": profile(recipe_profile),
          "faults": [{"kind": "firmware_old", "component": c, "version": v}
                     for c, v in old.items()]}
    return [{"id": k, "name": m["name"], "version": m["version"]}
            for k, m in firmware_members(hw, "1.18").items()]


def test_every_component_at_its_version_passes_with_its_bill_of_materials() -> None:
    res = judge_recipe(H200, _members("h200-sxm-8"), None)
    assert res.verdict is Verdict.PASS
    assert res.summary == "all 4 components of dgx-h200-motherboard at the recipe's versions " \
                          "(4 readings)"
    assert res.facts["bom"]["cpld_mb"] == {"wanted": "0.2.1.6",
                                           "found": {"BMC CPLDMB_0": "0.2.1.6"}}


def test_a_component_behind_fails_naming_where_found_and_wanted() -> None:
    res = judge_recipe(H200, _members("h200-sxm-8", erot_bmc="00.04.0011.0000_n00"), None)
    assert res.verdict is Verdict.FAIL and res.fault_code == "NC-FIRMWARE"
    assert res.summary == ("erot_bmc: BMC EROT_BMC_0 runs 00.04.0011.0000_n00, the recipe "
                           "wants 00.04.0018.0000_n00")


def test_a_component_nothing_reports_is_an_error_never_a_pass() -> None:
    members = [m for m in _members("h200-sxm-8") if m["id"] != "CPLDMID_0"]
    res = judge_recipe(H200, members, None)
    assert res.verdict is Verdict.ERROR and res.fault_code == "NC-FIRMWARE-UNREAD"
    assert res.summary.startswith("cpld_mid: nothing reports it (no FirmwareInventory member "
                                  "matches ^CPLDMID_\\d+$)")
    unread = judge_recipe(H200, None, None, bmc_error="BMC not read: unreachable")
    assert unread.verdict is Verdict.ERROR
    assert "the BMC was not read (BMC not read: unreachable)" in unread.summary
    blank = [dict(m, version=None) if m["id"] == "CPLDMB_0" else m
             for m in _members("h200-sxm-8")]
    assert "cpld_mb: BMC CPLDMB_0 reports no version" in judge_recipe(H200, blank,
                                                                      None).findings


def test_in_band_readings_are_judged_with_the_bmcs() -> None:
    inband = {"gpu_vbios": {"GPU 00000008:01:00.0": "97.00.B9.00.69",
                            "GPU 00000009:01:00.0": "97.00.88.00.01"},
              "hca_firmware": {"HCA mlx5_0": "28.46.3048"}}
    res = judge_recipe(GB200, [], inband)  # a BMC that lists nothing of the recipe
    assert res.verdict is Verdict.ERROR  # its out-of-band components: nothing reports them
    assert "gpu: GPU 00000009:01:00.0 runs 97.00.88.00.01, the recipe wants 97.00.B9.00.69" \
        in res.findings
    assert res.facts["bom"]["cx7"]["found"] == {"HCA mlx5_0": "28.46.3048"}


def test_the_node_results_give_the_in_band_readings() -> None:
    results = [Result("hardware.inventory", Verdict.PASS, "ok",
                      facts={"vbios": {"0000:18:00.0": "96.00.74.00.1C"}}),
               Result("net.ib", Verdict.PASS, "ok",
                      value={"ports": [{"ca": "mlx5_0", "firmware": "28.41.1000"},
                                       {"ca": "mlx5_0", "firmware": "28.41.1000"}]}),
               Result("net.roce", Verdict.ERROR, "not run", value={"ports": [{"ca": "x"}]})]
    assert inband_readings(results) == {"gpu_vbios": {"GPU 0000:18:00.0": "96.00.74.00.1C"},
                                        "hca_firmware": {"HCA mlx5_0": "28.41.1000"}}
    assert inband_readings([]) is None


@pytest.mark.parametrize(("found", "wanted", "same"), [
    ("2.55 Oct 01 2021", "2.55", True), ("2.55", "2.55", True), ("2.551", "2.55", False),
    ("U46 v1.56 (11/29/2021)", "U46 v1.56", True), ("25.06-A", "25.06-B", False),
])
def test_a_vendor_date_after_the_version_is_the_same_version(found: str, wanted: str,
                                                             same: bool) -> None:
    assert same_version(found, wanted) is same


def test_lab_member_ids_follow_the_recipes_patterns() -> None:
    assert member_id("^HGX_FW_GPU_\\d+$", 3) == "HGX_FW_GPU_3"
    ids = {m["id"] for m in _members("h200-sxm-8")}
    assert ids == {"BMC", "CPLDMB_0", "CPLDMID_0", "EROT_BIOS_0", "EROT_BMC_0"}


def test_validate_refuses_an_unknown_recipe_before_any_connection(tmp_path: Path) -> None:
    from nodecert.validation.run import ValidateRequest, open_new_run

    inv = tmp_path / "inv.ini"
    host = h200_host("gpu-01", "192.0.2.10", "nodecert_nvme_min_gb=3500",
                     "nodecert_firmware_recipe=dgx-h999")
    inv.write_text(f"[gpu]\n{host}\n")
    with pytest.raises(InventoryError, match="host gpu-01: unknown firmware recipe"):
        open_new_run(ValidateRequest(inv, runs_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# --- NVIDIA firmware tools (in band) ---------------------------------------------------------

MLX = Path(__file__).parent / "fixtures" / "real" / "mlxfw"


def test_real_flint_query() -> None:
    from nodecert_node.parse import mlxfw

    got = mlxfw.parse_flint_query((MLX / "cx7-mt4129-ndr-flint-d-pciconf0-query-fw-"
                                          "28.42.1000-before-update.txt").read_text())
    assert got["fw_version"] == "28.42.1000" and got["psid"] == "MT_0000001244"
    assert got["rom_info"] == ["type=UEFI version=14.35.15 cpu=AMD64,AARCH64",
                               "type=PXE version=3.7.500 cpu=AMD64"]  # wrapped onto 2 lines
    assert got["security"] == "secure-fw"
    # the card's identity: base GUID and MAC with how many follow each
    assert (got["base_guid"], got["guids"]) == ("e09d730300126474", 16)
    assert (got["base_mac"], got["macs"]) == ("e09d73126474", 16)
    with pytest.raises(ParseError, match="no FW Version"):
        mlxfw.parse_flint_query("-E- Cannot open Device: /dev/mst/mt4129_pciconf0\n")


@pytest.mark.parametrize(("row", "guid"), [
    ("Base GUID:             N/A                     16", None),
    ("Base GUID:             E09D730300126474", "e09d730300126474"),
    ("Base GUID:             0xe09d730300126474        4", "e09d730300126474"),
])
def test_flint_base_guid_variants(row: str, guid: str | None) -> None:
    from nodecert_node.parse import mlxfw
    text = (MLX / "cx7-mt4129-ndr-flint-d-pciconf0-query-fw-28.42.1000-before-update.txt"
            ).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Base GUID"))
    assert mlxfw.parse_flint_query(text.replace(line, row))["base_guid"] == guid


def test_a_base_guid_that_is_no_guid_is_refused() -> None:
    from nodecert_node.parse import mlxfw
    text = (MLX / "cx7-mt4129-ndr-flint-d-pciconf0-query-fw-28.42.1000-before-update.txt"
            ).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Base MAC"))
    with pytest.raises(ParseError, match="Base MAC 'e09d7312 16' is not 12 hex digits"):
        mlxfw.parse_flint_query(text.replace(line, "Base MAC:              e09d7312 16"))


def test_real_mlxup_query_with_padded_columns_and_the_update_log_after() -> None:
    from nodecert_node.parse import mlxfw

    devs = mlxfw.parse_mlx_query((MLX / "cx7-2x-single-port-mlxup-query-update-required-"
                                        "28.42-to-28.43-then-flash.txt").read_text())
    assert [d["pci"] for d in devs] == ["/dev/mst/mt4129_pciconf1", "/dev/mst/mt4129_pciconf0"]
    assert devs[0]["versions"]["FW"] == {"current": "28.42.1000", "available": "28.43.1014"}
    assert devs[0]["versions"]["PXE"] == {"current": "3.7.0500", "available": None}
    assert devs[1]["status"] == "Update required" and devs[1]["psid"] == "MT_0000001244"


@given(st.sampled_from(["Up to date", "Update required", "No matching image found"]),
       st.integers(min_value=0, max_value=8))
def test_mlxfwmanager_blocks_with_other_status_and_padding(status: str, pad: int) -> None:
    from nodecert_node.parse import mlxfw

    text = (f"Device #1:\n----------\n\n  Device Type:      ConnectX7\n"
            f"  PSID:             MT_0000000838\n  PCI Device Name:  0000:e6:00.0\n"
            f"  Versions:         Current        Available{' ' * pad}\n"
            f"     FW             28.39.3560     N/A{' ' * pad}\n\n  Status:           {status}\n")
    (d,) = mlxfw.parse_mlx_query(text)
    assert d["versions"]["FW"] == {"current": "28.39.3560", "available": None}
    assert d["status"] == status
    with pytest.raises(ParseError, match="no FW version row"):
        mlxfw.parse_mlx_query(text.replace("     FW ", "     XX "))


def test_the_firmware_tools_readings_are_preferred_over_ibstats() -> None:
    results = [Result("hardware.inventory", Verdict.PASS, "ok", facts={
        "vbios": {}, "hca_firmware": {"/dev/mst/mt4129_pciconf0": {
            "fw": "28.46.3048", "psid": "MT_0000001244"}}}),
        Result("net.ib", Verdict.PASS, "ok",
               value={"ports": [{"ca": "mlx5_0", "firmware": "28.46.3048"}]})]
    assert inband_readings(results)["hca_firmware"] == {  # type: ignore[index]
        "HCA /dev/mst/mt4129_pciconf0": "28.46.3048"}
