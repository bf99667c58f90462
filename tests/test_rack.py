"""A rack-scale NVLink domain in the order spec: nodecert_rack read strictly, the rules
across a rack's trays, and what each tray's plan learns of its rack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecert.core.errors import InventoryError
from nodecert.inventory.rack import kinds, parse_rack
from nodecert.inventory.reader import check_inventory, load_inventory

TRAY = ("nodecert_gpu_model=GB200 nodecert_gpu_count=4 nodecert_cpu_cores=144 "
        "nodecert_ram_gb=960 nodecert_nvme_count=4")


def _rack(**over: Any) -> dict[str, Any]:
    return {"name": "rack-a1", "kind": "GB200-NVL72", "gpus": 72,
            "switch_trays": [{"name": f"nvsw-{i:02d}", "address": f"10.10.5.{20 + i}"}
                             for i in range(1, 10)],
            "power_shelves": [{"name": "ps-01", "address": "10.10.5.31"}],
            "cdu": {"name": "cdu-01", "address": "10.10.5.41"},
            "redfish": {"username": "nodecert", "password_file": "/etc/nodecert/rack.pass",
                        "ca_file": "/etc/nodecert/rack-ca.pem"}, **over}


def _inventory(tmp_path: Path, trays: int, rack: dict[str, Any], *,
               extra: str = "", other: dict[str, Any] | None = None) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    lines = ["[rack_a1]"] + [f"tray{i:02d} ansible_host=10.0.0.{i + 1} {TRAY}"
                             for i in range(trays)]
    if other is not None:
        lines += ["[rack_b1]", f"tray00 {TRAY}"]
        (inv / "group_vars" / "rack_b1.yml").write_text(yaml.safe_dump({"nodecert_rack": other}))
    (inv / "hosts.ini").write_text("\n".join(lines) + "\n" + extra)
    (inv / "group_vars" / "rack_a1.yml").write_text(yaml.safe_dump({"nodecert_rack": rack}))
    return inv


def _problems(inv: Path) -> list[str]:
    return [f"{p.host}: {p.what}" for p in check_inventory(inv).problems]


def test_a_full_rack_is_read_and_each_tray_knows_its_rack(tmp_path: Path) -> None:
    specs = load_inventory(_inventory(tmp_path, 18, _rack()))
    rack = specs["tray07"].validation["rack"]
    assert rack["kind"] == "GB200-NVL72" and rack["imex"] is True and rack["gpus"] == 72
    assert rack["trays"] == [f"tray{i:02d}" for i in range(18)]
    # each tray's address: IMEX lists addresses, the node names the tray it lacks
    assert rack["tray_addresses"] == {f"tray{i:02d}": f"10.0.0.{i + 1}" for i in range(18)}
    assert [s["name"] for s in rack["switch_trays"]][:2] == ["nvsw-01", "nvsw-02"]
    assert rack["cdu"] == {"name": "cdu-01", "address": "10.10.5.41"}


def test_a_rack_without_management_endpoints_needs_no_credentials() -> None:
    spec, why = parse_rack({"name": "r", "kind": "GB200-NVL36", "gpus": 36})
    assert why is None and spec is not None
    assert spec["redfish"] is None and spec["firmware"] == {} and spec["samples"] == 3
    spec, why = parse_rack(_rack(firmware={"driver": 580.95}))
    assert spec is not None and spec["firmware"] == {"driver": "580.95"}
    assert spec["redfish"] == {"username": "nodecert", "password_file":
                               "/etc/nodecert/rack.pass", "ca_file": "/etc/nodecert/rack-ca.pem",
                               "port": 443, "timeout_s": 10}


def test_a_partial_build_says_how_many_gpus_it_has(tmp_path: Path) -> None:
    specs = load_inventory(_inventory(tmp_path, 9, _rack(gpus=36)))
    assert specs["tray00"].validation["rack"]["gpus"] == 36


@pytest.mark.parametrize(("trays", "rack", "other", "wanted"), [
    (19, _rack(), None, "tray18: rack rack-a1 lists 19 compute trays; a GB200-NVL72 holds 18"),
    (17, _rack(), None, "tray00: rack rack-a1 expects 72 GPUs; its 17 trays order 68"),
    (2, _rack(gpus=8), _rack(name="rack-b1", gpus=4),
     "tray00: is a compute tray of two racks: rack-a1 (group rack_a1), rack-b1 "
     "(group rack_b1)"),
])
def test_racks_that_cannot_be_are_refused_naming_the_host(
        tmp_path: Path, trays: int, rack: dict[str, Any], other: dict[str, Any] | None,
        wanted: str) -> None:
    problems = _problems(_inventory(tmp_path, trays, rack, other=other))
    assert wanted in problems, problems
    with pytest.raises(InventoryError):
        load_inventory(_inventory(tmp_path / "again", trays, rack, other=other))


def test_trays_that_describe_their_rack_differently_are_refused(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, 2, _rack(gpus=8))
    host_vars = inv / "host_vars"
    host_vars.mkdir()
    (host_vars / "tray01.yml").write_text(yaml.safe_dump(
        {"nodecert_rack": _rack(gpus=8, imex=False)}))
    assert "tray01: describes rack rack-a1 differently from tray00 (imex)" in _problems(inv)


@pytest.mark.parametrize(("raw", "why"), [
    (_rack(kind="GB200-NVL144"), "kind 'GB200-NVL144' is not one of GB200-NVL36, "
                                 "GB200-NVL72, GB300-NVL72"),
    (_rack(gpus=73), "gpus must be 1..72 for a GB200-NVL72, got 73"),
    (_rack(switch_trays=[{"name": "nvsw-01", "address": "10.1.1.1"}] * 2),
     "switch_trays: nvsw-01 named twice"),
    (_rack(switch_trays=[{"name": f"s{i}", "address": "10.1.1.1"} for i in range(10)]),
     "switch_trays lists 10, a GB200-NVL72 has 9"),
    (_rack(switch_trays=[{"name": "nvsw-01", "address": "10.1.1.1; reboot"}]),
     "switch_trays nvsw-01: address '10.1.1.1; reboot' is not a host name or IP address"),
    (_rack(power_shelves=[{"name": "ps-01", "address": "10.1.1.2", "slot": 3}]),
     "power_shelves: each entry unknown key(s) slot (known: address, name)"),
    (_rack(imex="yes"), "imex must be true, false or compute-domains (the customer's "
                        "Kubernetes runs IMEX), got 'yes'"),
    ({"name": "r", "kind": "GB200-NVL72", "switch": []}, "unknown key(s) switch"),
    (_rack(redfish=None), "redfish (username, password_file, ca_file or cert_sha256) must "
                          "be set"),
    (_rack(redfish={"username": "u", "password_file": "/p"}),
     "redfish: a Redfish BMC needs exactly one of ca_file"),
    (_rack(redfish={"username": "u", "ca_file": "/c", "address": "10.1.1.1"}),
     "redfish: unknown key(s) address"),
    (_rack(firmware={"bmc": "1.0"}), "firmware: unknown key(s) bmc"),
    (_rack(firmware={"driver": ["580.1", "580.2"]}),
     "firmware: driver must be one version string"),
    (_rack(samples=0), "samples must be an integer 1..60, got 0"),
])
def test_a_bad_rack_spec_says_what_is_wrong(raw: dict[str, Any], why: str) -> None:
    spec, got = parse_rack(raw)
    assert spec is None and got is not None and why in got, got


def test_a_tray_of_the_wrong_model_or_count_is_named(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, 1, _rack(gpus=4),
                     extra="[rack_a1:vars]\n")
    text = (inv / "hosts.ini").read_text().replace("nodecert_gpu_count=4",
                                                   "nodecert_gpu_count=8")
    (inv / "hosts.ini").write_text(text)
    assert "tray00: orders 8 GPUs; a GB200-NVL72 tray carries 4" in _problems(inv)


def test_every_kind_names_its_sources() -> None:
    from nodecert.inventory.rack import KINDS_FILE
    data = yaml.safe_load(KINDS_FILE.read_text())
    for name, kind in data["kinds"].items():
        for ref in kind["source"].split(", "):
            assert ref in data["sources"], (name, ref)
            src = data["sources"][ref]
            # a public source, or the project's policy with its rationale
            assert str(src.get("url", "")).startswith("https://") or \
                len(str(src.get("policy", ""))) > 80, (name, ref)
    nvl72 = kinds()["GB200-NVL72"]
    assert nvl72.trays_max * nvl72.gpus_per_tray == 72
    # the wiring adds up: every chip's ports take one link of every GPU
    assert nvl72.switch_trays_max * nvl72.switch_chips_per_tray == nvl72.nvlinks_per_gpu
