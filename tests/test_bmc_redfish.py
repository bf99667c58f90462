"""The Redfish path end to end on loopback: the lab's BMC emulator (sushy-tools' static
handler behind TLS and Basic authentication, rendered from a lab host's hardware model)
read by nodecert's client and judged; TLS verified by CA or pin, credentials refused,
faults caught, and the password nowhere in what the checks return."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecert.bmc.monitor import BmcMonitor
from nodecert.bmc.redfish import BmcError, RedfishClient
from nodecert.inventory.bmc import BmcSpec
from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig
from nodecert.lab.hardware import Fault
from nodecert.transport.become import Secret
from nodecert_node.contract import Limits, Verdict
from support.labbmc import PASSWORD, Bmc

LIMITS = Limits({"bmc.power_capacity_fraction_max": {
    "value": 0.9, "op": "<=", "unit": "ratio", "origin": "common", "source": "BMCPSU"}})


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Bmc]:
    b = Bmc(tmp_path)
    try:
        yield b
    finally:
        b.proc.terminate()
        b.proc.wait(timeout=10)


def _judge(bmc: Bmc, host_dir: Path, spec: BmcSpec | None = None) -> dict[str, Any]:
    host_dir.mkdir(parents=True, exist_ok=True)
    mon = BmcMonitor(spec or bmc.spec(), host_dir=host_dir, limits=LIMITS, simulated=True,
                     current=lambda: "load.burnin")
    results = {r.check: r for r in mon.finish()}
    text = json.dumps([r.as_dict() for r in results.values()])
    assert PASSWORD not in text  # the canary: never in a result, its evidence or facts
    return results


def test_a_healthy_bmc_passes_every_check_over_verified_tls(bmc: Bmc, tmp_path: Path) -> None:
    r = _judge(bmc, tmp_path / "run1" / "h1")
    assert {c: x.verdict for c, x in r.items()} == {
        "bmc.sensors": Verdict.PASS, "bmc.sel": Verdict.PASS, "bmc.power": Verdict.PASS,
        "bmc.inventory": Verdict.PASS}, {c: x.summary for c, x in r.items()}
    assert "6 supplies healthy" in r["bmc.power"].summary
    assert "BMC sees 8 GPUs, 8 network adapters" in r["bmc.inventory"].summary
    assert all(x.simulated for x in r.values())
    assert r["bmc.sensors"].evidence[0].command.startswith("GET https://127.0.0.1:")


def test_a_pinned_certificate_is_checked_before_anything_is_sent(bmc: Bmc) -> None:
    ok = RedfishClient(bmc.spec(ca_file=None, cert_sha256=bmc.cert_sha256()))
    assert ok.get("/redfish/v1/Managers/1")["FirmwareVersion"] == "1.18"
    wrong = RedfishClient(bmc.spec(ca_file=None, cert_sha256="0" * 64))
    with pytest.raises(BmcError, match=r"not the pinned .* nothing was sent"):
        wrong.get("/redfish/v1/Managers/1")
    assert wrong.calls == []


def test_a_bmc_certificate_from_another_ca_is_refused(bmc: Bmc, tmp_path: Path) -> None:
    other = LabConfig(root=tmp_path / "other")
    other.state.mkdir(parents=True)
    labbmc.ensure_ca(other)
    client = RedfishClient(bmc.spec(ca_file=str(other.state / "bmc" / "ca.pem")))
    with pytest.raises(BmcError, match="certificate is not trusted"):
        client.get("/redfish/v1")


def test_refused_credentials_make_every_bmc_check_error(bmc: Bmc, tmp_path: Path) -> None:
    r = _judge(bmc, tmp_path / "r" / "h1", bmc.spec(password=Secret("wrong")))
    assert {x.verdict for x in r.values()} == {Verdict.ERROR}
    assert "refused the credentials of user nodecert (HTTP 401)" in r["bmc.sel"].summary


def test_faults_are_caught_with_the_part_named(bmc: Bmc, tmp_path: Path) -> None:
    bmc.set_faults([Fault("h1", "psu_failed", {"psu": 2}), Fault("h1", "fan_failed", {}),
                    Fault("h1", "temp_critical", {}), Fault("h1", "bmc_firmware", {})])
    r = _judge(bmc, tmp_path / "r" / "h1", bmc.spec(firmware=("1.18",)))
    assert r["bmc.power"].verdict is Verdict.FAIL
    assert r["bmc.power"].summary.startswith("power supply PSU2 failed")
    assert r["bmc.sensors"].verdict is Verdict.FAIL
    assert "Inlet Temp 44 C >= upper critical 42 C" in r["bmc.sensors"].findings
    assert "Fan 1 0 RPM <= lower non-recoverable 300 RPM" in r["bmc.sensors"].findings
    assert r["bmc.inventory"].summary == ("BMC firmware 1.17, the site's golden version is "
                                          "1.18")


def test_an_unreachable_bmc_is_error_not_pass(bmc: Bmc, tmp_path: Path) -> None:
    bmc.proc.terminate()
    bmc.proc.wait(timeout=10)
    r = _judge(bmc, tmp_path / "r" / "h1")
    assert {x.verdict for x in r.values()} == {Verdict.ERROR}
    assert "unreachable" in r["bmc.sensors"].summary


class _Resp:
    status = 200

    def __init__(self, body: bytes) -> None:
        self.body = body

    def read(self, n: int) -> bytes:
        return self.body[:n]

    def getheaders(self) -> list[tuple[str, str]]:
        return [("Content-Type", "application/json")]


class _Conn:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> None:
        pass

    def getresponse(self) -> _Resp:
        return _Resp(self.body)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("reading", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_reading_from_a_bmc_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                    reading: str) -> None:
    """A NaN sensor passed every threshold, and the signed certificate then failed
    verify: a BMC's document with a non-finite number is not JSON it may send."""
    body = ('{"Name": "GPU0 Temp", "ReadingCelsius": ' + reading + "}").encode()
    spec = BmcSpec("h1", "127.0.0.1", "redfish", 443, "nodecert", Secret(PASSWORD),
                   cert_sha256="0" * 64)
    client = RedfishClient(spec)
    monkeypatch.setattr(client, "_connect", lambda: _Conn(body))
    with pytest.raises(BmcError, match=f"{reading.lstrip('-')} is not a number a BMC may send"):
        client.get("/redfish/v1/Chassis/1/Sensors/GPU0")
    monkeypatch.setattr(client, "_connect", lambda: _Conn(b'{"ReadingCelsius": 41.5}'))
    assert client.get("/redfish/v1/Chassis/1/Sensors/GPU0") == {"ReadingCelsius": 41.5}


def test_a_bmc_listing_thousands_of_members_errors_its_checks(
        bmc: Bmc, tmp_path: Path) -> None:
    """A collection past the member cap is refused (3,000 listed processors took 140 s
    one request each): every bmc.* check ERRORs, naming it; nothing is judged on it."""
    from nodecert.bmc import gather
    mon = BmcMonitor(bmc.spec(), host_dir=tmp_path / "r" / "h1", limits=LIMITS,
                     simulated=True, current=lambda: "load.burnin")
    assert isinstance(mon.source, gather.RedfishSource)
    real = mon.source.client.get
    fetched: list[str] = []

    def get(path: str) -> Any:
        fetched.append(path)
        if path.rstrip("/").endswith("/Processors"):
            return {"Members": [{"@odata.id": f"/redfish/v1/Systems/1/Processors/P{i}"}
                                for i in range(3000)], "Members@odata.count": 3000}
        return real(path)

    mon.source.client.get = get  # type: ignore[method-assign]
    (tmp_path / "r" / "h1").mkdir(parents=True)
    results = {r.check: r for r in mon.finish()}
    assert {r.verdict for r in results.values()} == {Verdict.ERROR}
    assert "lists 3000 Processors, more than the 512" in results["bmc.sensors"].summary
    assert not any("/Processors/P" in p for p in fetched)  # no member was read


def test_a_slow_bmc_read_stops_at_its_budget(bmc: Bmc, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One full read has a budget: a BMC answering each request slowly is stopped there
    and its checks ERROR, instead of holding the host's run."""
    import time as real_time
    from types import SimpleNamespace

    from nodecert.bmc import gather
    clock = [real_time.monotonic()]
    monkeypatch.setattr(gather, "time", SimpleNamespace(monotonic=lambda: clock[0],
                                                        time=real_time.time))
    mon = BmcMonitor(bmc.spec(), host_dir=tmp_path / "r" / "h1", limits=LIMITS,
                     simulated=True, current=lambda: "load.burnin")
    real = mon.source.client.get
    calls = []

    def slow(path: str) -> Any:
        calls.append(path)
        clock[0] += 25.0  # each answer takes 25 s on the BMC's clock
        return real(path)

    mon.source.client.get = slow  # type: ignore[method-assign]
    (tmp_path / "r" / "h1").mkdir(parents=True)
    results = {r.check: r for r in mon.finish()}
    assert {r.verdict for r in results.values()} == {Verdict.ERROR}
    assert f"longer than the {gather.SNAPSHOT_BUDGET_S:g} s one full read may take" in \
        results["bmc.power"].summary
    assert len(calls) == int(gather.SNAPSHOT_BUDGET_S // 25) + 1


def test_the_firmware_inventory_is_read_and_judged_against_the_hosts_recipe(
        bmc: Bmc, tmp_path: Path) -> None:
    from nodecert.stack.firmware import find_recipe, judge_recipe

    recipe = find_recipe("dgx-h200-motherboard")
    mon = BmcMonitor(bmc.spec(), host_dir=tmp_path / "a" / "h1", limits=LIMITS,
                     simulated=True, current=lambda: None)
    (tmp_path / "a" / "h1").mkdir(parents=True)
    mon.finish()
    ids = {m["id"]: m["version"] for m in mon.firmware_inventory or []}
    assert ids["CPLDMB_0"] == "0.2.1.6" and ids["BMC"] == "1.18"
    ok = judge_recipe(recipe, mon.firmware_inventory, None)
    assert ok.verdict is Verdict.PASS, ok.summary
    assert ok.facts["bom"]["erot_bmc"]["found"] == {"BMC EROT_BMC_0": "00.04.0018.0000_n00"}

    bmc.set_faults([Fault("h1", "firmware_old", {"component": "cpld_mid",
                                                 "version": "0.2.0.5"})])
    mon = BmcMonitor(bmc.spec(), host_dir=tmp_path / "b" / "h1", limits=LIMITS,
                     simulated=True, current=lambda: None)
    (tmp_path / "b" / "h1").mkdir(parents=True)
    mon.finish()
    behind = judge_recipe(recipe, mon.firmware_inventory, None)
    assert behind.verdict is Verdict.FAIL
    assert behind.summary == "cpld_mid: BMC CPLDMID_0 runs 0.2.0.5, the recipe wants 0.2.0.7"

