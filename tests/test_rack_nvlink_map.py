"""rack.nvlink_map: an NVL72's 1,296 GPU-to-switch-chip links read from the switch trays'
Redfish trees (the lab's model of nine switch trays, walked as a rack run walks them) and
judged against the trays' GPUs: wired as the kind says it passes; a crossed cable, a
foreign GPU, a tray with one chip each named; links that were not mapped never pass."""

from __future__ import annotations

import copy
from typing import Any

from nodecert.lab import rackmodel
from nodecert.rack import infra
from nodecert.rack.gather import walk_switch_tray
from nodecert.rack.judge_nvlink import judge_nvlink_map
from nodecert_node.contract import Verdict

TRAYS = [f"tray{i:02d}" for i in range(1, 19)]
RACK = {"name": "rack-a1", "kind": "GB200-NVL72", "gpus": 72, "trays": TRAYS,
        "switch_trays": [{"name": f"nvsw-{k:02d}", "address": f"10.0.5.{k}"}
                         for k in range(1, 10)]}


def _uuid(t: int, g: int) -> str:
    return f"GPU-{t:08x}-0000-4000-8000-{g:012x}"


def _gpus_of() -> dict[str, list[dict[str, Any]] | None]:
    """Each tray's GPUs as its run's hardware identity names them (nvidia-smi's UUIDs)."""
    return {h: [{"bus_id": f"0008:0{g}:00.0", "uuid": _uuid(t, g)} for g in range(4)]
            for t, h in enumerate(TRAYS, 1)}


RACK_GPUS = tuple(_uuid(t, g) for t in range(1, 19) for g in range(4))


def _read(name: str, faults: dict[str, Any] | None = None,
          gpus: tuple[str, ...] = RACK_GPUS) -> dict[str, Any]:
    """One switch tray's tree, walked as a rack run walks it, then read."""
    tree = {f"/redfish/v1/{rel}".rstrip("/"): doc for rel, doc in rackmodel.tree(
        {"kind": "switch_tray", "name": name, "faults": faults or {}, "gpus": list(gpus)},
        0.0).items()}
    walked = walk_switch_tray(lambda path: copy.deepcopy(tree.get(path)))
    return infra.switch_tray(walked)


def _comps(**special: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for part in RACK["switch_trays"]:
        s = special[part["name"]] if part["name"] in special else _read(part["name"])
        out.append({"kind": "switch_tray", "name": part["name"], "address": part["address"],
                    "samples": [s], "errors": [] if s else ["timed out"]})
    return out


def test_an_nvl72_wired_as_its_kind_passes() -> None:
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(), 2)
    assert r is not None and r.verdict == Verdict.PASS, r.findings[:3]
    assert {k: r.value[k] for k in ("switch_chips", "gpus", "links", "gpus_per_tray")} == {
        "switch_chips": 18, "gpus": 72, "links": 1296, "gpus_per_tray": 4}
    # the page's grid: each tray's GPUs linked as planned to each chip
    assert len(r.value["grid"]) == 18 and all(
        len(row) == 18 and set(row.values()) == {4} for row in r.value["grid"].values())
    assert r.summary == ("72 GPUs each linked once to each of 18 NVLink switch chips "
                         "(1296 links as the GB200-NVL72 is wired)")


def test_the_walk_reads_the_gpu_behind_every_port() -> None:
    s = _read("nvsw-01")
    assert s["endpoints"] is True and len(s["switches"]) == 2
    ports = s["switches"][1]["ports"]
    assert len(ports) == 72 and ports[4]["id"] == "acp5"
    # the endpoint's bare UUID read as nvidia-smi's GPU-<uuid> compares
    assert ports[4]["gpus"] == [infra.gpu_uuid(_uuid(2, 0))] and ports[4]["unnamed"] == []


def test_a_crossed_cable_names_both_gpus_by_tray_port_and_chip() -> None:
    crossed = _read("nvsw-03", {"nvlink_crossed": {"switch": 1, "port": 5, "to": 6}})
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-03": crossed}), 2)
    assert r is not None and r.verdict == Verdict.FAIL
    assert r.findings == (
        "switch tray nvsw-03 switch NVSwitch_1 ports acp5, acp6: all to tray tray02 GPU "
        "0008:01:00.0 (each GPU has one link to each switch chip)",
        "tray tray02 GPU 0008:00:00.0: no NVLink to switch tray nvsw-03 switch NVSwitch_1")
    assert r.value["links"] == 1294 and r.fault_code == "NC-RACK-NVLINK-MAP"
    # on the grid: tray02 has 2 of its 4 GPUs linked as planned to that chip
    grid = r.value["grid"]
    assert grid["tray02"]["nvsw-03/NVSwitch_1"] == 2
    assert sum(v != 4 for row in grid.values() for v in row.values()) == 1


def test_a_gpu_that_is_none_of_the_racks_is_named() -> None:
    other = list(RACK_GPUS)
    other[9] = "GPU-deadbeef-0000-4000-8000-000000000000"  # a tray's board from elsewhere
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-07": _read("nvsw-07",
                                                                      gpus=tuple(other))}), 2)
    assert r is not None and r.verdict == Verdict.FAIL
    assert ("switch tray nvsw-07 switch NVSwitch_0 port acp10: GPU "
            "deadbeef-0000-4000-8000-000000000000 is none of the rack's trays' GPUs"
            in r.findings)
    assert "tray tray03 GPU 0008:01:00.0: no NVLink to switch tray nvsw-07 switch " \
           "NVSwitch_1" in r.findings
    assert len(r.findings) == 4  # the foreign GPU and the missing one, on each chip


def test_a_switch_tray_with_one_chip_is_named() -> None:
    one = _read("nvsw-02")
    one["switches"] = one["switches"][:1]
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-02": one}), 2)
    assert r is not None and r.verdict == Verdict.FAIL
    assert r.findings[0] == ("switch tray nvsw-02: reports 1 NVLink switch chips; a "
                             "GB200-NVL72 switch tray has 2")


def test_links_that_were_not_mapped_never_pass() -> None:
    # a switch tray not read: ERROR naming it, never a pass over the rest
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-04": None}), 2)
    assert r is not None and r.verdict == Verdict.ERROR
    assert r.summary == ("switch tray nvsw-04 (10.0.5.4) cannot be read: timed out: its "
                         "switch chips' links are not mapped")
    assert r.fault_code == "NC-NOT-MEASURED"
    # a tray whose run did not report its GPUs
    gpus = _gpus_of() | {"tray05": None}
    r = judge_nvlink_map(RACK, gpus, _comps(), 2)
    assert r is not None and r.verdict == Verdict.ERROR  # its GPUs never called foreign
    assert r.findings == ("tray tray05: its GPUs are not known (not measured): their "
                          "links are not mapped",)
    # an endpoint that names no UUID: that link is not mapped
    s = _read("nvsw-09")
    s["switches"][0]["ports"][0] |= {"gpus": [], "unnamed": ["/redfish/v1/Fabrics/x/E1"]}
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-09": s}), 2)
    assert r is not None and r.verdict == Verdict.FAIL  # its GPU has no mapped link there
    assert "switch tray nvsw-09 switch NVSwitch_0 port acp1: its endpoint " \
           "/redfish/v1/Fabrics/x/E1 names no GPU UUID: the link is not mapped" in r.findings


def test_switch_trays_that_report_no_wiring_leave_it_not_judged() -> None:
    bare = {p["name"]: _read(p["name"], gpus=()) for p in RACK["switch_trays"]}
    assert all(not s["endpoints"] for s in bare.values())
    assert judge_nvlink_map(RACK, _gpus_of(), _comps(**bare), 2) is None
    assert judge_nvlink_map({**RACK, "switch_trays": []}, _gpus_of(), [], 2) is None
    # ... but one tray that reports it, beside eight that do not: not a pass
    some = dict(bare, **{"nvsw-01": _read("nvsw-01")})
    r = judge_nvlink_map(RACK, _gpus_of(), _comps(**some), 2)
    assert r is not None and r.verdict == Verdict.ERROR
    assert r.findings == tuple(f"switch tray nvsw-{k:02d}: reports no GPU behind its ports: "
                               "its links are not mapped" for k in range(2, 10))
    assert (r.value["switch_chips"], r.value["gpus"], r.value["links"]) == (2, 72, 144)


def test_the_rack_page_draws_the_wiring_with_the_crossed_link_in_red() -> None:
    from nodecert.core import checks
    ok = judge_nvlink_map(RACK, _gpus_of(), _comps(), 2)
    crossed = judge_nvlink_map(RACK, _gpus_of(), _comps(**{"nvsw-03": _read(
        "nvsw-03", {"nvlink_crossed": {"switch": 1, "port": 5, "to": 6}})}), 2)
    assert ok is not None and crossed is not None
    for r, red in ((ok, 0), (crossed, 1)):
        svgs = checks.plots({"results": [r.as_dict()]}, lambda text: text, page="rack")
        assert len(svgs) == 1 and 'data-plot="nvlink-map"' in svgs[0]
        assert svgs[0].count('class="cell"') == 18 * 18
        assert svgs[0].count('fill="#d62728"') == red  # tray02's cell at that chip
    assert checks.plots({"results": []}, lambda text: text, page="rack") == []
