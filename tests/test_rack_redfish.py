"""A rack's management endpoints read over real Redfish on loopback: the lab's switch
tray, power shelf and CDU emulators (sushy-tools' static handler behind TLS and Basic
authentication) walked by nodecert's client, sampled, judged; faults injected into the
running endpoints are named, an endpoint that is down fails alone, and the password is
nowhere in what is recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecert.rack.gather import read_rack
from nodecert.rack.judge import (
    firmware_table,
    judge_cooling,
    judge_firmware,
    judge_power,
    judge_switch_trays,
)
from nodecert_node.contract import Verdict
from support.racklab import Rack, running


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[Rack]:
    yield from running(tmp_path)



def _judged(rack: Rack, **over: Any) -> dict[str, Any]:
    spec = rack.spec(**over)
    comps = [c.as_dict() for c in read_rack(spec)]
    text = json.dumps(comps)
    assert rack.password not in text  # never in what is recorded
    out = {r.check: r for r in (judge_switch_trays(spec, comps), judge_power(spec, comps),
                                judge_cooling(spec, comps),
                                judge_firmware(spec, firmware_table({}, comps)))
           if r is not None}
    out["comps"] = comps
    return out


def test_a_healthy_rack_passes_over_verified_tls_with_every_sample(endpoints: Rack) -> None:
    rack = endpoints
    r = _judged(rack)
    assert {k: v.verdict for k, v in r.items() if k != "comps"} == {
        "rack.switch_trays": Verdict.PASS, "rack.power": Verdict.PASS,
        "rack.cooling": Verdict.PASS, "rack.firmware": Verdict.PASS}, \
        {k: v.summary for k, v in r.items() if k != "comps"}
    assert r["rack.switch_trays"].summary == "2 switch trays healthy, 32/32 NVLink ports up"
    by = {c["name"]: c for c in r["comps"]}
    assert len(by["nvsw-01"]["samples"]) == 1  # a switch tray's state is read once
    assert len(by["cdu-01"]["samples"]) == 2 and len(by["ps-01"]["samples"]) == 2
    assert r["rack.cooling"].summary == ("no leak; CDU healthy, 4 coolant readings inside "
                                         "their thresholds over 2 samples")


def test_faults_in_running_endpoints_are_named(endpoints: Rack) -> None:
    rack = endpoints
    rack.fault("cdu-01", leak={"detector": "Moisture"})
    rack.fault("ps-01", psu_failed={"bay": 3})
    rack.fault("nvsw-02", port_down={"switch": 1, "port": 5},
               firmware={"version": "35.2014.1500"})
    r = _judged(rack)
    assert r["rack.cooling"].verdict == Verdict.FAIL
    assert r["rack.cooling"].summary.startswith("CDU cdu-01: LEAK detected by Moisture Leak "
                                                "Detector (Critical)")
    assert "power shelf ps-01 supply Bay3: health Critical" in r["rack.power"].findings
    assert r["rack.switch_trays"].findings[0] == ("switch tray nvsw-02 switch NVSwitch_1 port "
                                                  "acp5: link LinkDown")
    # two trays, one on each version: neither is the odd one out, both are named
    assert r["rack.firmware"].findings == ("switch_tray: the domain runs 2 versions: "
                                           "35.2014.1500 (2), 35.2014.1676 (2)",)


def test_hot_coolant_over_every_sample_fails(endpoints: Rack) -> None:
    rack = endpoints
    rack.fault("cdu-01", coolant_hot=True)
    r = _judged(rack)
    assert r["rack.cooling"].verdict == Verdict.FAIL
    assert "supply temperature" in r["rack.cooling"].summary
    assert r["rack.cooling"].summary.endswith("beyond its critical threshold in every sample")


def test_an_endpoint_that_is_down_fails_alone(endpoints: Rack) -> None:
    rack = endpoints
    rack.procs["nvsw-01"].terminate()
    rack.procs["nvsw-01"].wait(timeout=10)
    r = _judged(rack)
    assert r["rack.switch_trays"].verdict == Verdict.FAIL
    assert r["rack.switch_trays"].findings == (
        f"switch tray nvsw-01 ({rack.ips['nvsw-01']}) cannot be read: BMC redfish "
        f"{rack.ips['nvsw-01']}:{rack.port} unreachable: ConnectionRefusedError: [Errno 111] "
        "Connection refused",)
    assert r["rack.power"].verdict == Verdict.PASS and r["rack.cooling"].verdict == Verdict.PASS


def test_wrong_credentials_name_the_user_never_the_password(endpoints: Rack,
                                                            tmp_path: Path) -> None:
    rack = endpoints
    wrong = tmp_path / "wrong.pass"
    wrong.write_text("not-" + rack.password + "\n")
    wrong.chmod(0o600)
    spec = rack.spec()
    spec["redfish"] = {**spec["redfish"], "password_file": str(wrong)}
    comps = [c.as_dict() for c in read_rack(spec)]
    assert all(c["samples"] == [None] * len(c["samples"]) for c in comps)
    assert "refused the credentials of user nodecert (HTTP 401)" in comps[0]["errors"][0]
    assert rack.password not in json.dumps(comps)
