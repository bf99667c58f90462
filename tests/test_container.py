"""The container GPU path on the CPU: the CDI spec parser on nvidia-ctk's real output
(and variants), nvidia-smi -L inside and outside, the order's container spec, the judge,
the lab's simulated nvidia-ctk and the container_toolkit role's interface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodecert.inventory.container import parse_container
from nodecert.lab.hardware import hardware_description
from nodecert_node.checks.container import judge_container
from nodecert_node.contract import Verdict
from nodecert_node.parse import ParseError, cdi
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "nvidia-container-toolkit"
SPEC = (REAL / "nvidia-ctk-1.17.8-cdi-generate-driver-575.64.03-1gpu.yaml").read_text()
UUID = "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e"
GPUS = [{"index": 0, "name": "NVIDIA H200", "uuid": UUID}]
ORDER = {"engine": "podman", "image": "nvcr.io/nvidia/cuda@sha256:" + "a" * 64}
ALL = ["nvidia.com/gpu=0", f"nvidia.com/gpu={UUID}", "nvidia.com/gpu=all"]


def test_the_real_spec_names_its_devices_kind_and_driver() -> None:
    assert cdi.device_names(SPEC) == ["0", UUID, "all"]
    assert cdi.spec_kind(SPEC) == "nvidia.com/gpu"
    assert cdi.driver_version(SPEC) == "575.64.03"
    # the same spec as JSON (nvidia-ctk --format=json)
    as_json = json.dumps(yaml.safe_load(SPEC))
    assert cdi.device_names(as_json) == ["0", UUID, "all"]
    assert cdi.driver_version(as_json) == "575.64.03"


def test_a_spec_naming_two_drivers_is_refused() -> None:
    mixed = SPEC.replace("--host-driver-version=575.64.03", "--host-driver-version=570.1.2")
    with pytest.raises(ParseError, match="several driver versions"):
        cdi.driver_version(mixed + "\n# libcuda.so.575.64.03\n")
    # without the hook, the driver libraries name the version
    no_hook = SPEC.replace("--host-driver-version=575.64.03", "")
    assert cdi.driver_version(no_hook) == "575.64.03"


def test_nvidia_smi_list_inside_a_container_that_lost_nvml() -> None:
    text = (REAL / "k8s-pod-nvidia-smi-L-loop-then-nvml-unknown-error-after-daemon-reload"
            ".txt").read_text()
    with pytest.raises(ParseError, match="Failed to initialize NVML: Unknown Error"):
        cdi.parse_smi_list(text)
    ok = cdi.parse_smi_list(text.split("Failed")[0])
    assert ok[0]["uuid"] == "GPU-551720f0-caf0-22b7-f525-2a51a6ab478d"
    with pytest.raises(ParseError, match="listed no GPU"):
        cdi.parse_smi_list("No devices were found\n")


def test_ctk_list_lines() -> None:
    out = "INFO[0000] Found 3 CDI devices\n" + "\n".join(ALL) + "\n"
    assert cdi.parse_ctk_list(out) == ALL


def judge(**kw: object) -> object:
    base: dict[str, object] = {"ordered": ORDER, "toolkit": "1.17.8",
                               "spec_path": "/etc/cdi/nvidia.yaml", "spec_text": SPEC,
                               "listed": ALL, "driver": "575.64.03", "outside": GPUS,
                               "inside": GPUS, "inside_error": None}
    base.update(kw)
    return judge_container(**base)  # type: ignore[arg-type]


def test_the_judge_passes_the_path_and_fails_each_break() -> None:
    ok = judge()
    assert ok.verdict is Verdict.PASS  # type: ignore[attr-defined]
    assert ok.summary == ("toolkit 1.17.8, CDI spec for driver 575.64.03; 1 GPUs inside the "  # type: ignore[attr-defined]
                          "container, as outside")
    stale = judge(driver="580.173.02")
    assert stale.verdict is Verdict.FAIL  # type: ignore[attr-defined]
    assert "generated for driver 575.64.03, the driver running is 580.173.02" in \
        stale.summary  # type: ignore[attr-defined]
    missing = judge(spec_text=None, spec_path=None, listed=[])
    assert missing.summary.startswith("no CDI spec for the GPUs")  # type: ignore[attr-defined]
    no_toolkit = judge(toolkit=None)
    assert (no_toolkit.verdict, no_toolkit.fault_code) == (  # type: ignore[attr-defined]
        Verdict.FAIL, "NC-CONTAINER-TOOLKIT")
    fewer = judge(inside=[])
    assert "inside the container lists 0 GPUs, outside 1; missing " + UUID in \
        fewer.summary  # type: ignore[attr-defined]
    broken = judge(inside=None, inside_error="nvidia-smi: Failed to initialize NVML")
    assert broken.verdict is Verdict.FAIL  # type: ignore[attr-defined]
    # not ordered, toolkit absent: nothing to judge, and it says so
    none = judge(ordered=None, toolkit=None)
    assert none.verdict is Verdict.PASS and "not tested" in none.summary  # type: ignore[attr-defined]
    # not ordered, toolkit present: the spec is still judged against the driver
    assert judge(ordered=None, inside=None, driver="580.173.02").verdict is Verdict.FAIL  # type: ignore[attr-defined]


def test_the_order_pins_the_image_by_digest() -> None:
    spec, why = parse_container(ORDER)
    assert why is None and spec == ORDER
    arch, why = parse_container({"archive": "/srv/images/cuda.oci.tar",
                                 "image_id": "sha256:" + "b" * 64})
    assert why is None and arch is not None and arch["engine"] == "podman"
    for bad, msg in (({"image": "nvcr.io/nvidia/cuda:12.8.1-base"}, "not pinned by digest"),
                     ({"archive": "/srv/x.tar"}, "needs image_id"),
                     ({"archive": "/srv/../x.tar", "image_id": "sha256:" + "b" * 64},
                      "not a plain absolute path"),
                     ({**ORDER, "engine": "lxc"}, "not one of"), ({}, "give the image")):
        assert parse_container(bad)[0] is None and msg in str(parse_container(bad)[1])


def test_the_lab_nvidia_ctk_writes_a_spec_nodecert_reads(tmp_path: Path) -> None:
    """The simulated nvidia-ctk's spec: the real layout, read back by the same parser and
    loadable YAML; its driver is the simulated driver's."""
    hw = hardware_description(lab_seed="s", host="h1", profile_name="h200-sxm-8",
                              mac="02:6e:63:00:00:01", faults=[], boot_time=0.0)
    (tmp_path / "hardware.json").write_text(json.dumps(hw))
    inst = tmp_path / "installed"
    inst.mkdir()
    (inst / "nvidia-open.json").write_text(json.dumps({
        "package": "nvidia-open", "version": "580.173.02-1", "component": "driver"}))
    env = dict(os.environ, NODECERT_LAB_HW=str(tmp_path / "hardware.json"),
               NODECERT_LAB_INSTALLED=str(inst), NODECERT_LAB_RUN=str(tmp_path / "run"))
    simhw = REPO / "src" / "nodecert" / "lab" / "simhw" / "simhw.py"
    out = tmp_path / "cdi" / "nvidia.yaml"
    p = subprocess.run([sys.executable, str(simhw), "nvidia-ctk", "cdi", "generate",
                        f"--output={out}"], env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    doc = yaml.safe_load(text)
    assert doc["cdiVersion"] == "0.5.0" and doc["kind"] == "nvidia.com/gpu"
    assert cdi.driver_version(text) == "580.173.02"
    names = cdi.device_names(text)
    assert names[:2] == ["0", hw["identity"]["gpus"][0]["uuid"]] and names[-1] == "all"
    assert len(names) == 17  # 8 GPUs by index and by UUID, and all
    assert [d["name"] for d in doc["devices"]] == names


def test_the_role_documents_its_interface() -> None:
    role = REPO / "roles" / "container_toolkit"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    assert set(defaults) == set(spec["argument_specs"]["main"]["options"])
    readme = (role / "README.md").read_text()
    assert all(f"`{k}`" in readme for k in defaults)
    assert "container_toolkit" in (REPO / "playbooks" / "site.yml").read_text()


def test_the_pinned_archive_is_loaded_only_when_the_engine_lacks_its_image(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace
    from typing import Any

    from nodecert_node.checks import container

    image = "sha256:" + "c" * 64
    held: list[str] = []
    ran: list[list[str]] = []

    def inspect(ev: list[Any], argv: list[str], ctx: Any, *, name: str = "") -> str | None:
        return image if held else None

    def run(argv: list[str], **kw: Any) -> Any:
        ran.append(argv)
        if argv[1] == "load":
            held.append(image)
        out = "GPU 0: NVIDIA H200 (UUID: GPU-1)\n" if argv[1] == "run" else ""
        return SimpleNamespace(text=out, evidence=None)

    monkeypatch.setattr(container, "try_text", inspect)
    monkeypatch.setattr(container, "run", run)
    ctx: Any = SimpleNamespace(plan=SimpleNamespace(check_timeout_s=60), timeout=10)
    ordered = {"engine": "podman", "archive": "/srv/images/cuda.oci.tar", "image_id": image}
    gpus, why = container._inside(ctx, ordered, [])
    assert why is None and gpus and [a[1] for a in ran] == ["load", "run"]
    ran.clear()
    gpus, why = container._inside(ctx, ordered, [])  # the same image, already held
    assert why is None and gpus and [a[1] for a in ran] == ["run"]
    assert ran[0][-3:] == [image, "nvidia-smi", "-L"]
