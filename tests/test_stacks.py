"""Shipped stack manifests against the sourced facts, and manifest schema errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodecert.core.errors import ManifestError, UnknownNameError
from nodecert.core.verdict import Verdict
from nodecert.stack.compat import load_matrix
from nodecert.stack.gate import evaluate
from nodecert.stack.manifest import find_stack, list_stacks, load_stack
from support.env import REPO, TODAY
from support.stacks import manifest, unlocked_text, write_manifest


def test_three_shipped_stacks_load() -> None:
    names = {s.name for s in list_stacks()}
    assert names == {"r580-cuda13.0", "r570-cuda12.8", "r550-cuda12.4"}


def test_r580_pins_match_reference() -> None:
    s = find_stack("r580-cuda13.0")
    assert (s.driver_branch, str(s.driver), s.kernel_modules) == ("580", "580.173.02", "open")
    pins = {p.name: str(p.version) for p in s.os["ubuntu-24.04"].packages}
    assert pins["libnccl2"] == "2.27.7-1+cuda13.0"
    assert pins["datacenter-gpu-manager-4-cuda13"] == "1:4.4.2-1"
    assert pins["libcudnn9-cuda-13"] == "9.12.0.46-1"
    assert set(s.os) == {"ubuntu-22.04", "ubuntu-24.04", "debian-12"}
    # Nothing on Debian 12 was seen published: every pin there must say so.
    assert not any(p.confirmed for p in s.os["debian-12"].packages)


@pytest.mark.parametrize("gpu", ["H200-SXM", "H100-SXM", "B200", "L40S", "A100-SXM4-80GB"])
def test_r580_is_safe_for_current_gpus(gpu: str) -> None:
    report = evaluate(find_stack("r580-cuda13.0"), gpu=gpu, os_name="ubuntu-24.04", today=TODAY)
    assert report.verdict is not Verdict.FAIL, [r for r in report.results
                                               if r.verdict is Verdict.FAIL]


def test_r570_passes_h200_but_warns_end_of_life() -> None:
    report = evaluate(find_stack("r570-cuda12.8"), gpu="H200-SXM", os_name="ubuntu-24.04",
                      today=TODAY)
    assert report.verdict is Verdict.WARN
    lifecycle = next(r for r in report.results if r.rule == "driver.branch-lifecycle")
    assert lifecycle.verdict is Verdict.WARN


def test_legacy_r550_is_rejected_for_blackwell() -> None:
    report = evaluate(find_stack("r550-cuda12.4"), gpu="B200", os_name="ubuntu-22.04",
                      today=TODAY)
    failed = {r.rule for r in report.results if r.verdict is Verdict.FAIL}
    assert failed == {"gpu.driver-min", "gpu.kernel-modules"}
    eol = next(r for r in report.results if r.rule == "driver.branch-lifecycle")
    assert eol.verdict is Verdict.WARN and "end-of-life" in eol.message


def test_legacy_r550_has_no_ubuntu_2404_pins() -> None:
    report = evaluate(find_stack("r550-cuda12.4"), gpu="H100-SXM", os_name="ubuntu-24.04",
                      today=TODAY)
    assert report.verdict is Verdict.FAIL
    assert [r.rule for r in report.results if r.verdict is Verdict.FAIL] == ["os.supported"]


def test_every_cited_source_resolves() -> None:
    m = load_matrix()
    for s in list_stacks():
        for pins in s.os.values():
            for p in pins.packages:
                assert set(p.sources) <= set(m.sources), (s.name, p.name)


def test_unknown_stack_name() -> None:
    with pytest.raises(UnknownNameError) as exc:
        find_stack("r999")
    assert "r580-cuda13.0" in (exc.value.hint or "")


# --- schema errors: each names the file and the field ------------------------------------

def _load_text(tmp_path: Path, text: str, name: str = "bad") -> ManifestError:
    path = tmp_path / f"{name}.yml"
    path.write_text(text)
    with pytest.raises(ManifestError) as exc:
        load_stack(path)
    return exc.value


def _load_data(tmp_path: Path, data: dict[str, object]) -> ManifestError:
    path = write_manifest(tmp_path, data)
    with pytest.raises(ManifestError) as exc:
        load_stack(path)
    return exc.value


def test_unknown_key(tmp_path: Path) -> None:
    data = manifest()
    data["driver"]["flavour"] = "open"  # type: ignore[index]
    err = _load_data(tmp_path, data)
    assert "test-stack.yml" in err.render()
    assert "driver" in (err.where or "")
    assert "unknown key(s): flavour" in err.what


def test_missing_field(tmp_path: Path) -> None:
    data = manifest()
    del data["components"]["cudnn"]  # type: ignore[attr-defined]
    err = _load_data(tmp_path, data)
    assert "missing required key(s): cudnn" in err.what
    assert err.where is not None and err.where.endswith("components")


def test_unquoted_version_is_a_type_error_with_line(tmp_path: Path) -> None:
    text = yaml.safe_dump(manifest(), sort_keys=False).replace(
        "version: 580.173.02\n", "version: 580.17\n", 1)
    err = _load_text(tmp_path, text, name="test-stack")
    assert "expected a string, got 580.17 (a number)" in err.what
    assert err.hint is not None and "quote it" in err.hint
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "version: 580.17" in ln)
    assert f"test-stack.yml:{line}: driver.version" in err.render()


@pytest.mark.parametrize(("field", "value", "phrase"), [
    (("driver", "version"), "570.211.01", "is not on branch R580"),
    (("driver", "version"), "58a.1.2", "not an NVIDIA driver version"),
    (("components", "nccl"), "2.27.7-1", "+cudaX.Y suffix is required"),
    (("components", "cuda"), "13.0", "at least 3 numeric parts"),
    (("framework", "pytorch"), "2.9.1", "not a CUDA build of PyTorch"),
    (("driver", "kernel_modules"), "nvidia", "not one of: open, proprietary"),
])
def test_malformed_values(tmp_path: Path, field: tuple[str, str], value: str,
                          phrase: str) -> None:
    data = manifest()
    data[field[0]][field[1]] = value  # type: ignore[index]
    err = _load_data(tmp_path, data)
    assert phrase in err.render()
    assert f"{field[0]}.{field[1]}" in (err.where or "")


def test_package_must_deliver_its_component_version(tmp_path: Path) -> None:
    data = manifest()
    pkgs = data["os"]["ubuntu-24.04"]["packages"]  # type: ignore[index]
    nccl = next(p for p in pkgs if p["name"] == "libnccl2")
    nccl["version"] = "2.27.7-1+cuda12.9"
    err = _load_data(tmp_path, data)
    assert "libnccl2=2.27.7-1+cuda12.9 does not deliver nccl 2.27.7-1+cuda13.0" in err.what
    assert "os.ubuntu-24.04.packages[" in (err.where or "")


def test_cuda_package_name_must_match_toolkit(tmp_path: Path) -> None:
    data = manifest()
    pkgs = data["os"]["ubuntu-24.04"]["packages"]  # type: ignore[index]
    next(p for p in pkgs if p["component"] == "cuda")["name"] = "cuda-libraries-12-8"
    err = _load_data(tmp_path, data)
    assert "is not a CUDA 13.0 package" in err.what


def test_missing_component_package_on_an_os(tmp_path: Path) -> None:
    data = manifest()
    pkgs = data["os"]["ubuntu-24.04"]["packages"]  # type: ignore[index]
    data["os"]["ubuntu-24.04"]["packages"] = [p for p in pkgs if p["component"] != "dcgm"]  # type: ignore[index]
    err = _load_data(tmp_path, data)
    assert "no package delivers component(s) dcgm on ubuntu-24.04" in err.what


def test_name_must_match_file(tmp_path: Path) -> None:
    data = manifest()
    path = tmp_path / "other-name.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ManifestError, match="must equal the file name 'other-name'"):
        load_stack(path)


def test_artifact_without_valid_sha256(tmp_path: Path) -> None:
    data = manifest()
    data["artifacts"] = [{"name": "nccl-tests", "url": "https://example.invalid/x.tgz",
                          "sha256": "deadbeef", "source": "C"}]
    err = _load_data(tmp_path, data)
    assert "64-hex-digit" in err.what


def test_short_key_fingerprint_rejected(tmp_path: Path) -> None:
    data = manifest()
    data["repository"]["key_fingerprint"] = "3BF863CC"  # type: ignore[index]
    err = _load_data(tmp_path, data)
    assert "full 40-hex-digit fingerprint" in err.what


def test_unknown_source_key(tmp_path: Path) -> None:
    data = manifest()
    data["os"]["ubuntu-24.04"]["packages"][0]["source"] = "NOPE"  # type: ignore[index]
    err = _load_data(tmp_path, data)
    assert "source 'NOPE' is not in stacks/compat/sources.yml" in err.what


def test_unsupported_os(tmp_path: Path) -> None:
    data = manifest()
    data["os"]["rhel-9"] = data["os"].pop("ubuntu-24.04")  # type: ignore[attr-defined]
    err = _load_data(tmp_path, data)
    assert "unsupported OS 'rhel-9'" in err.what


def test_duplicate_key_is_rejected_with_line(tmp_path: Path) -> None:
    text = yaml.safe_dump(manifest(), sort_keys=False)
    text = text.replace("status: supported\n", "status: supported\nstatus: legacy\n", 1)
    err = _load_text(tmp_path, text, name="test-stack")
    assert "duplicate key 'status'" in err.what
    assert "test-stack.yml:" in (err.where or "")


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    err = _load_text(tmp_path, "schema: nodecert.stack/v1\nname: [unclosed\n")
    assert "not valid YAML" in err.what
    assert (err.where or "").startswith(str(tmp_path / "bad.yml"))


def test_broken_matrix_is_reported(tmp_path: Path) -> None:
    compat = tmp_path / "compat"
    compat.mkdir()
    src = REPO / "stacks" / "compat"
    (compat / "sources.yml").write_text((src / "sources.yml").read_text())
    text = (src / "matrix.yml").read_text().replace(
        '{cuda: "13.0.0", min_driver: "580.65.06", source: S1}',
        '{cuda: "13.0.0", min_driver: "580.65.06", source: S99}')
    (compat / "matrix.yml").write_text(text)
    with pytest.raises(ManifestError, match="source 'S99' is not in"):
        load_matrix(compat)


def test_framework_wheel_hashes_in_a_manifest(tmp_path: Path) -> None:
    src = unlocked_text("r580-cuda13.0").replace(
        '  source: P1\n', '  source: P1\n  hashes_source: [L2]\n')
    good = src.replace('  pytorch: "2.9.1+cu130"\n', '  pytorch: "2.9.1+cu130"\n  hashes:\n'
                       '    torch==2.9.1+cu130: ["sha256:' + "a" * 64 + '"]\n'
                       '    nvidia-nccl-cu13==2.27.7: ["' + "b" * 64 + '"]\n')
    good_path = tmp_path / "good" / "r580-cuda13.0.yml"
    good_path.parent.mkdir()
    good_path.write_text(good)
    st = load_stack(good_path)
    assert st.framework.hashes == {"torch==2.9.1+cu130": ("a" * 64,),
                                   "nvidia-nccl-cu13==2.27.7": ("b" * 64,)}
    for bad, why in (("    torch: [\"" + "a" * 64 + "\"]\n", "is not name==version"),
                     ("    torch==2.9.1+cu130: [\"abc\"]\n", "sha256 digests")):
        text = src.replace('  pytorch: "2.9.1+cu130"\n',
                           '  pytorch: "2.9.1+cu130"\n  hashes:\n' + bad)
        bad_path = tmp_path / "bad" / "r580-cuda13.0.yml"
        bad_path.parent.mkdir(exist_ok=True)
        bad_path.write_text(text)
        with pytest.raises(ManifestError, match=why):
            load_stack(bad_path)
    assert "torch==2.9.1+cu130" in load_stack(REPO / "stacks" / "r580-cuda13.0.yml"
                                              ).framework.hashes


# --- the vendor: what the gate's rules and the node's GPU backend select by ---------------

def test_a_stack_names_its_vendor_and_its_components_roles(tmp_path: Path) -> None:
    for stack in list_stacks():
        assert stack.vendor == "nvidia"  # a stack that names none is NVIDIA's
        roles = stack.roles()
        assert {"driver", "runtime", "collectives", "libraries", "diagnostics"} <= set(roles)
        assert roles["collectives"] == {"nccl": str(stack.nccl)}
    data = manifest()
    data["vendor"] = "nvidia"
    assert load_stack(write_manifest(tmp_path, data)).vendor == "nvidia"
    data["vendor"] = "acme"
    err = _load_data(tmp_path, data)
    assert "'acme' is not one of: nvidia" in err.what
    assert (err.where or "").startswith(str(tmp_path / "test-stack.yml"))


def test_the_gate_judges_a_stack_by_its_vendors_rules() -> None:
    import dataclasses
    stack = find_stack("r580-cuda13.0")
    other = dataclasses.replace(stack, vendor="acme")
    with pytest.raises(UnknownNameError, match="no compatibility rules for acme stacks"):
        evaluate(other, gpu="H200-SXM", os_name="ubuntu-24.04", today=TODAY)
    assert evaluate(stack, gpu="H200-SXM", os_name="ubuntu-24.04", today=TODAY).results


def test_the_plan_tells_the_node_its_gpu_vendor() -> None:
    from nodecert.inventory.reader import HostSpec
    from nodecert.profiles import thresholds
    from nodecert.validation.plan import build_plan
    spec = HostSpec(name="h1", address="127.0.0.1", port=22, groups=(), gpu_model="H200-SXM",
                    gpu_count=8, cpu_cores=112, ram_gb=2048, nvme_count=8, nvme_min_gb=3500,
                    simulated=False, validation={})
    with_stack = build_plan(spec, thresholds.suite("quick"), find_stack("r580-cuda13.0"),
                            "r", cli_thresholds={}, scratch=None)
    assert with_stack.spec["gpu_vendor"] == "nvidia"
    without = build_plan(spec, thresholds.suite("quick"), None, "r", cli_thresholds={},
                         scratch=None)
    assert "gpu_vendor" not in without.spec  # the node's default backend (NVIDIA)


def test_site_runs_a_vendors_roles_only_for_its_stacks() -> None:
    from nodecert.stack.manifest import VENDOR_ROLES
    play = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())[1]
    assert play["vars"]["nodecert_site_vendor"] == \
        "{{ nodecert_gpu_vendor | default('nvidia') }}"  # site.yml run by hand: NVIDIA's
    roles = {r["role"]: r.get("when") for r in play["roles"]}
    owned = {role: vendor for vendor, rs in VENDOR_ROLES.items() for role in rs}
    assert set(owned) <= set(roles)  # every vendor role is in the play
    for role, when in roles.items():
        if role in owned:
            assert when == f"nodecert_site_vendor == '{owned[role]}'", role
        else:  # every vendor's: platform, framework, validators
            assert when is None, role
    assert set(roles) - set(owned) == {"framework", "platform", "validators"}


def test_one_provisioning_run_installs_one_vendors_stacks() -> None:
    import dataclasses

    from nodecert.core.errors import InventoryError
    from nodecert.provision.run import one_vendor
    stack = find_stack("r580-cuda13.0")
    assert one_vendor({stack.name: stack}) == "nvidia"
    other = dataclasses.replace(stack, name="acme-1", vendor="acme")
    with pytest.raises(InventoryError, match=r"more than one GPU vendor \(acme-1: acme, "
                                             r"r580-cuda13.0: nvidia\)"):
        one_vendor({stack.name: stack, other.name: other})


def test_provision_tells_the_play_the_stacks_vendor(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.provision import run as prun
    from nodecert.provision.preflight import PreflightReport
    monkeypatch.setattr(prun, "write_bundle", lambda where: tmp_path / "bundle.tar.gz")
    stack = find_stack("r580-cuda13.0")
    xvars = prun._extravars(prun.ProvisionRequest(tmp_path / "hosts.ini"),
                            prun.FleetSettings(), PreflightReport({}, ()),
                            {stack.name: stack}, lambda line: None)
    assert xvars["nodecert_gpu_vendor"] == "nvidia"
