"""The Minimum Run Record in every node certificate (NVIDIA's Vera-Rubin NVL72 tuning
guide: what to keep with every result): filled from what the run recorded -- the
conformance facts' OS image, kernel and page size, the driver, the stack's pins, the GPU
inventory and topology, the network, the run's own settings -- and what it did not
record is None and named, never filled in."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from nodecert.certs.certify import certify
from nodecert.certs.signing import init_key, load_private_key
from nodecert.stack.conformance import software
from support.runs import make_run, passing, recorded_results

pytestmark = pytest.mark.unit

GATHERED = ("##os\nubuntu-24.04\n##pkgs\nlibnccl2\t2.27.7-1+cuda13.0\tii \n##holds\nlibnccl2\n"
            "##smi\n580.173.02\n##module\n580.173.02\n##freeze\ntorch==2.9.1\n"
            "##kernel\n6.8.0-88-generic\n##pagesize\n4096\n")


def _record(tmp_path: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    kp = init_key(tmp_path / "k")
    run = make_run(tmp_path, {"n1": {"results": results, "started": 1796005833.0,
                                     "finished": 1796005981.0}})
    certify(run, load_private_key(kp.private), now=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    env = json.loads((run / "reports" / "n1.intoto.dsse.json").read_text())
    return dict(json.loads(base64.b64decode(env["payload"]))["predicate"]["run_record"])


def test_the_gathered_sections_give_kernel_and_page_size_and_absent_ones_none() -> None:
    sw = software(GATHERED)
    assert (sw["os"], sw["kernel"], sw["page_size"], sw["driver_reported"]) == (
        "ubuntu-24.04", "6.8.0-88-generic", 4096, "580.173.02")
    old = software(GATHERED.partition("##kernel")[0])  # gathered before they were asked
    assert old["kernel"] is None and old["page_size"] is None
    assert software(GATHERED.replace("4096", "unknown"))["page_size"] is None


def test_a_certificate_carries_the_run_record_from_what_the_run_recorded(
        tmp_path: Path) -> None:
    results = copy.deepcopy(passing(recorded_results()))
    conf = next(r for r in results if r["check"] == "stack.conformance")
    conf.setdefault("facts", {})["software"] = software(GATHERED)
    rec = _record(tmp_path, results)
    assert rec["source"]["url"].endswith("/vera-mn-perf-tuning-guide/measuring-performance.html")
    assert (rec["platform_image"], rec["kernel"], rec["page_size"], rec["driver"]) == (
        "ubuntu-24.04", "6.8.0-88-generic", 4096, "580.173.02")
    assert (rec["cuda"], rec["nccl"]) == ("13.0.0", "2.27.7-1+cuda13.0")
    assert rec["gpu_inventory"] == {"gpus": 1, "gpu_model": "NVIDIA H200"}
    assert rec["gpu_topology"]["verdict"] == "PASS"
    assert rec["settings"]["suite"] == "standard" and set(rec["settings"]["inputs"]) == {
        "plan", "stack", "suite"}
    # the recording has no fabric check and the host no firmware recipe: said, not filled
    assert rec["not_recorded"] == ["firmware_recipe", "network_inventory"]
    assert "NCCL topology dump" in rec["not_gathered"]


def test_what_a_run_did_not_record_is_none_and_named(tmp_path: Path) -> None:
    rec = _record(tmp_path, passing(recorded_results()))  # no software facts at all
    assert rec["kernel"] is None and rec["platform_image"] is None and rec["driver"] is None
    assert {"kernel", "page_size", "platform_image", "driver"} <= set(rec["not_recorded"])
