"""The GPU backend seam: the node's checks read GPUs through `nodecert_node.gpu`, never by
running a vendor's tool themselves. A throwaway backend written here plugs in without
touching any other module; NVIDIA's backend reads the real recorded outputs as the
checks always did."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecert_node import gpu, registry, telemetry
from nodecert_node.context import Ctx, NoGpu
from nodecert_node.contract import Evidence, Plan, Verdict
from nodecert_node.gpu.base import Backend
from nodecert_node.parse import smi
from support.env import REPO
from support.simnode import SimNode

REAL = REPO / "tests" / "fixtures" / "real" / "nvidia-smi"
H100 = REAL / "h100-80gb-hbm3-8gpu-535.161.08-q.txt"


class Acme(Backend):
    """A second vendor: its tool's answers as records, from anywhere but nvidia-smi."""

    vendor = "acme"
    tool = "acme-smi"

    def __init__(self, gpus: list[dict[str, Any]], power: dict[str, dict[str, float | None]]
                 ) -> None:
        self.gpus, self.power = gpus, power
        self.asked: list[str] = []

    def _ev(self, what: str) -> Evidence:
        self.asked.append(what)
        return Evidence.of(what, f"acme-smi {what}", 0, f"{what} read")

    def inventory(self, ctx: Any) -> Any:
        if not self.gpus:
            raise NoGpu("acme-smi lists no GPU", [self._ev("list")], "NC-NO-GPU", "seat them")
        return {"Driver Version": "6.4.1"}, self.gpus, [self._ev("inventory")]

    def power_limits(self, ctx: Any) -> Any:
        return self.power, self._ev("power")

    def compute_apps(self, timeout: float) -> str:
        return "4242, trainer\n"


@pytest.fixture
def plan(tmp_path: Path) -> dict[str, Any]:
    p = SimNode(tmp_path).plan(["health.gpu", "power.limit"])
    p["spec"]["gpu_vendor"] = "acme"
    return p


@pytest.fixture
def acme() -> Iterator[Acme]:
    _, gpus = smi.parse_q(H100.read_text())
    # that server's GPUs were recorded busy (clocks held down): the acme tool says idle
    backend = Acme([{**g, "clock_reasons": []} for g in gpus],
                   {g["bus_id"]: {"current_w": 700.0, "default_w": 700.0} for g in gpus})
    gpu.register(backend)
    yield backend
    gpu.withdraw("acme")


def run(name: str, plan: dict[str, Any]) -> Any:
    registry.discover()
    return registry.run_check(name, Ctx(Plan.from_dict(plan)))


def test_a_throwaway_backend_plugs_in_without_touching_a_check(
        acme: Acme, plan: dict[str, Any]) -> None:
    healthy = run("health.gpu", plan)
    assert healthy.verdict is Verdict.PASS, healthy.summary
    assert [e.command for e in healthy.evidence] == ["acme-smi inventory"]
    acme.gpus[3]["ecc_volatile_uncorrectable"] = 5  # the vendor's tool reports it
    sick = run("health.gpu", plan)
    assert sick.verdict is Verdict.FAIL and acme.gpus[3]["bus_id"] in " ".join(sick.findings)
    capped = next(iter(acme.power))
    acme.power[capped]["current_w"] = 350.0
    power = run("power.limit", plan)
    assert power.verdict is Verdict.WARN and capped in power.summary
    assert [e.command for e in power.evidence] == ["acme-smi inventory", "acme-smi power"]
    acme.gpus.clear()
    none = run("health.gpu", plan)
    assert none.verdict is Verdict.FAIL and none.fault_code == "NC-NO-GPU"


def test_a_vendor_without_a_backend_is_an_error_never_a_pass(plan: dict[str, Any]) -> None:
    plan["spec"]["gpu_vendor"] = "nobody"
    res = run("health.gpu", plan)
    assert res.verdict is Verdict.ERROR and res.fault_code == "NC-TOOL-MISSING"
    assert "no GPU backend for vendor 'nobody'" in res.summary


def test_a_backend_is_registered_once() -> None:
    with pytest.raises(RuntimeError, match="declared twice"):
        gpu.register(type(gpu.default())())
    assert gpu.BACKENDS["nvidia"] is gpu.default() and gpu.SMI == "nvidia-smi"


def test_nvidias_backend_reads_what_the_checks_always_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = SimNode(tmp_path)
    ctx = Ctx(Plan.from_dict(node.plan(["hardware.topology"])))
    for k, v in node.env().items():
        monkeypatch.setenv(k, v)
    if True:  # the simulated node's nvidia-smi on PATH
        header, gpus, ev = gpu.inventory(ctx)
        assert len(gpus) == 8 and header and ev[0].command == "nvidia-smi -q"
        matrix, _, topo_ev = gpu.backend(ctx).topology(ctx)
        assert set(matrix) >= {f"GPU{i}" for i in range(8)} and "topo" in topo_ev.command
        driver, _ = gpu.backend(ctx).driver_version(ctx)
        assert driver == header.get("Driver Version")
        limits, _ = gpu.backend(ctx).power_limits(ctx)
        assert set(limits) == {g["bus_id"] for g in gpus}
        rows: list[dict[str, str]] = []
        raw: list[str] = []
        stop = threading.Event()
        sampler = telemetry.sample(gpu.backend(ctx), stop, rows, raw, period_ms=200,
                                   fields=["index", "power.draw"])
        deadline = time.monotonic() + 20
        while not rows and time.monotonic() < deadline:
            time.sleep(0.1)
        telemetry.stop(stop, sampler)
        assert rows and telemetry.command(sampler).startswith("nvidia-smi --query-gpu=")
