"""Inventory loading through ansible-core, and the order-spec validation on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecert.core.errors import InventoryError
from nodecert.inventory.reader import check_inventory, load_inventory
from support.env import REPO

SAMPLE = REPO / "inventory" / "sample" / "lab.ini"

SPEC = ("nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 nodecert_cpu_cores=112 "
        "nodecert_ram_gb=2048 nodecert_nvme_count=8")


def write(tmp_path: Path, text: str, name: str = "inv.ini") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    return [p.render() for p in check_inventory(path).problems]


def test_sample_inventory_is_valid() -> None:
    hosts = load_inventory(SAMPLE)
    assert set(hosts) == {"gpu-h200-01", "gpu-h200-02", "inf-l40s-01"}
    h = hosts["gpu-h200-01"]
    # [hgx_h200:vars] values arrive as strings from INI and are read as integers.
    assert (h.gpu_model, h.gpu_count, h.cpu_cores, h.ram_gb, h.nvme_count) == (
        "H200-SXM", 8, 112, 2048, 8)
    assert h.nvme_min_gb == 3840
    # group_vars/all/nodecert.yml next to the inventory is applied by ansible-core.
    assert (h.os, h.stack) == ("ubuntu-24.04", "r580-cuda13.0")
    assert "hgx_h200" in h.groups and "gpu_nodes" in h.groups
    assert hosts["inf-l40s-01"].gpu_count == 4


def test_yaml_inventory(tmp_path: Path) -> None:
    path = write(tmp_path, """
all:
  children:
    hgx:
      hosts:
        n1: {ansible_host: 198.51.100.21}
        n2: {ansible_host: 198.51.100.22}
      vars:
        nodecert_gpu_model: h100-sxm
        nodecert_gpu_count: 8
        nodecert_cpu_cores: 96
        nodecert_ram_gb: 2048
        nodecert_nvme_count: 4
""", "inv.yml")
    hosts = load_inventory(path)
    assert set(hosts) == {"n1", "n2"}
    assert hosts["n1"].gpu_model == "H100-SXM"  # case-insensitive, normalised


def test_missing_spec_fields_named_per_host(tmp_path: Path) -> None:
    path = write(tmp_path, "[gpu]\nn1 nodecert_gpu_model=H200-SXM nodecert_gpu_count=8\n")
    found = problems(path)
    assert any("host n1: missing nodecert_cpu_cores" in p for p in found)
    assert any("host n1: missing nodecert_ram_gb" in p for p in found)
    assert any("host n1: missing nodecert_nvme_count" in p for p in found)
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert str(path) in exc.value.render()


def test_unknown_gpu_model(tmp_path: Path) -> None:
    path = write(tmp_path, f"[gpu]\nn1 {SPEC.replace('H200-SXM', 'H300')}\n")
    found = problems(path)
    assert len(found) == 1
    assert "unknown GPU model 'H300'" in found[0]
    assert "H200-SXM" in found[0]  # the fix lists the known models


@pytest.mark.parametrize(("assignment", "phrase"), [
    ("nodecert_gpu_count=eight", "nodecert_gpu_count must be a positive integer, got 'eight'"),
    ("nodecert_gpu_count=0", "nodecert_gpu_count must be a positive integer, got 0"),
    ("nodecert_nvme_count=-1", "nodecert_nvme_count must be an integer >= 0"),
    ("nodecert_os=centos-7", "unsupported OS 'centos-7'"),
    ("nodecert_stack=r999", "no stack named 'r999'"),
])
def test_bad_values(tmp_path: Path, assignment: str, phrase: str) -> None:
    key = assignment.split("=", maxsplit=1)[0]
    spec = " ".join(kv for kv in SPEC.split() if not kv.startswith(key + "="))
    path = write(tmp_path, f"[gpu]\nn1 {spec} {assignment}\n")
    found = problems(path)
    assert any(phrase in p for p in found), found


def test_typo_in_variable_suggests_the_right_name(tmp_path: Path) -> None:
    path = write(tmp_path, f"[gpu]\nn1 {SPEC} nodecert_nvme_min_gbs=100\n")
    found = problems(path)
    assert any("unknown variable nodecert_nvme_min_gbs" in p and
               "did you mean nodecert_nvme_min_gb?" in p for p in found)


def test_duplicate_host_line_in_group(tmp_path: Path) -> None:
    path = write(tmp_path, f"[gpu]\nn1 {SPEC}\nn2 ansible_host=198.51.100.2 {SPEC}\n"
                           f"n1 {SPEC}\n")
    found = problems(path)
    assert any(f"{path}:4: host n1: listed twice in group [gpu] (first at line 2)" in p
               for p in found), found


def test_same_machine_under_two_names(tmp_path: Path) -> None:
    path = write(tmp_path, f"[gpu]\nn1 ansible_host=198.51.100.5 {SPEC}\n"
                           f"n2 ansible_host=198.51.100.5 {SPEC}\n")
    found = problems(path)
    assert any("host n2: same address 198.51.100.5:22 as host n1" in p for p in found)


def test_duplicate_key_in_yaml_inventory(tmp_path: Path) -> None:
    path = write(tmp_path, """
all:
  hosts:
    n1: {ansible_host: 198.51.100.1}
    n1: {ansible_host: 198.51.100.2}
""", "dup.yml")
    found = problems(path)
    assert any("duplicate key 'n1'" in p for p in found), found


def test_missing_file(tmp_path: Path) -> None:
    found = problems(tmp_path / "nope.ini")
    assert found == [f"{tmp_path / 'nope.ini'}: inventory does not exist\n"
                     "  how to fix: pass an INI or YAML inventory file or an inventory "
                     "directory, e.g. inventory/sample/lab.ini"]


def test_inventory_directory_with_group_vars_and_host_vars(tmp_path: Path) -> None:
    """An inventory directory as sites keep them: several sources, group_vars, host_vars,
    a constructed plugin's configuration, and files Ansible ignores."""
    from nodecert.inventory.reader import load_inventory
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "10-hgx.ini").write_text("[hgx]\ngpu-01 ansible_host=192.0.2.11\n"
                                    "gpu-02 ansible_host=192.0.2.12\n")
    (inv / "20-l40s.yml").write_text("all:\n  children:\n    l40s:\n      hosts:\n"
                                     "        inf-01: {ansible_host: 192.0.2.13}\n")
    (inv / "30-constructed.yml").write_text("plugin: ansible.builtin.constructed\n"
                                            "groups:\n  gpu_nodes: true\n")
    (inv / "README.md").write_text("not an inventory\n")
    (inv / "group_vars" / "all" / "spec.yml").write_text(
        "nodecert_cpu_cores: 112\nnodecert_ram_gb: 2048\nnodecert_nvme_count: 8\n")
    (inv / "group_vars" / "hgx.yml").write_text(
        "nodecert_gpu_model: H200-SXM\nnodecert_gpu_count: 8\n")
    (inv / "host_vars" / "inf-01.yml").write_text(
        "nodecert_gpu_model: L40S\nnodecert_gpu_count: 4\nnodecert_cpu_cores: 64\n")
    hosts = load_inventory(inv)
    assert sorted(hosts) == ["gpu-01", "gpu-02", "inf-01"]
    assert hosts["gpu-01"].gpu_model == "H200-SXM" and hosts["inf-01"].gpu_count == 4
    assert hosts["inf-01"].cpu_cores == 64 and hosts["gpu-02"].ram_gb == 2048


def test_unparsable_inventory(tmp_path: Path) -> None:
    path = write(tmp_path, "[gpu\nn1\n")
    found = problems(path)
    assert len(found) == 1 and "not a valid inventory" in found[0]


def test_empty_inventory(tmp_path: Path) -> None:
    found = problems(write(tmp_path, "# nothing yet\n"))
    assert any("defines no hosts" in p for p in found)


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("yes", True), ("False", False),
                                                ("0", False)])
def test_booleans_from_ini_group_vars(tmp_path: Path, text: str, expected: bool) -> None:
    path = write(tmp_path, f"[gpu]\nn1 {SPEC}\n[gpu:vars]\nnodecert_simulated={text}\n")
    assert load_inventory(path)["n1"].simulated is expected


def test_non_boolean_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, f"[gpu]\nn1 {SPEC}\n[gpu:vars]\nnodecert_simulated=maybe\n")
    assert any("nodecert_simulated must be true or false, got 'maybe'" in p
               for p in problems(path))


@pytest.mark.parametrize(("patterns", "want"), [
    (("hgx_h200",), ["gpu-h200-01", "gpu-h200-02"]),                  # a group
    (("gpu-*",), ["gpu-h200-01", "gpu-h200-02"]),                     # a glob
    (("all", "!gpu-h200-02"), ["gpu-h200-01", "inf-l40s-01"]),        # leave one out
    (("all:!l40s",), ["gpu-h200-01", "gpu-h200-02"]),                 # Ansible's colon form
    (("gpu-*", "&hgx_h200", "!gpu-h200-01"), ["gpu-h200-02"]),        # intersect
    (("inf-l40s-01",), ["inf-l40s-01"]),                              # a host
])
def test_limit_takes_ansible_patterns(patterns: tuple[str, ...], want: list[str]) -> None:
    from nodecert.core.ansible_env import select_hosts
    sample = REPO / "inventory" / "sample" / "lab.ini"
    known = sorted(load_inventory(sample))
    assert select_hosts(sample, patterns, known) == want


def test_limit_pattern_matching_nothing_is_an_error() -> None:
    from nodecert.core.ansible_env import select_hosts
    from nodecert.core.errors import InventoryError
    sample = REPO / "inventory" / "sample" / "lab.ini"
    with pytest.raises(InventoryError, match="--limit 'gpu-h200-99' matches no host"):
        select_hosts(sample, ("gpu-h200-99",), sorted(load_inventory(sample)))


def test_inventory_script_source(tmp_path: Path) -> None:
    """A dynamic inventory script (Ansible's script plugin: --list prints JSON)."""
    import json
    script = tmp_path / "cmdb"
    spec = {"nodecert_gpu_model": "H200-SXM", "nodecert_gpu_count": 8,
            "nodecert_cpu_cores": 112, "nodecert_ram_gb": 2048, "nodecert_nvme_count": 8}
    data = {"hgx": {"hosts": ["gpu-31", "gpu-32"]},
            "_meta": {"hostvars": {h: dict(spec, ansible_host=f"192.0.2.{n}")
                                   for n, h in ((31, "gpu-31"), (32, "gpu-32"))}}}
    script.write_text("#!/bin/sh\n[ \"$1\" = --list ] && cat <<'EOF'\n" + json.dumps(data)
                      + "\nEOF\n[ \"$1\" = --host ] && echo '{}'\nexit 0\n")
    script.chmod(0o755)
    hosts = load_inventory(script)
    assert sorted(hosts) == ["gpu-31", "gpu-32"] and hosts["gpu-32"].address == "192.0.2.32"


# --- the one table of variables ----------------------------------------------------------

def test_the_order_spec_is_the_tables_order_rows() -> None:
    import dataclasses

    from nodecert.inventory.reader import HostSpec
    from nodecert.inventory.variables import ORDER
    fields = {f.name for f in dataclasses.fields(HostSpec)}
    assert fields - {"name", "address", "port", "groups", "validation"} == {v.key for v in ORDER}


def test_every_variable_has_a_known_kind_place_and_docs_page() -> None:
    from nodecert.inventory.maps import EXAMPLES, MAPPING_KINDS
    from nodecert.inventory.variables import GOES, KINDS, VARIABLES
    assert len({v.name for v in VARIABLES}) == len(VARIABLES)
    for v in VARIABLES:
        assert v.name.startswith("nodecert_") and v.kind in KINDS and v.goes in GOES, v
        assert v.doc and v.read_by and (REPO / v.page).is_file(), v
        assert v.kind not in MAPPING_KINDS or v.kind in EXAMPLES, v
        assert not (v.required and v.default is not None), v


def test_every_table_variable_is_read_and_kept_where_the_table_says(tmp_path: Path) -> None:
    """One host with every variable set: each reaches its place (HostSpec, its validation
    settings, the node's plan) and nothing else is added or lost."""
    from nodecert.profiles import thresholds
    from nodecert.validation.plan import build_plan
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    (inv / "hosts.ini").write_text("[gpu]\ngpu-01 ansible_host=192.0.2.10\n")
    (inv / "host_vars" / "gpu-01.yml").write_text("""
nodecert_gpu_model: GB200
nodecert_gpu_count: 4
nodecert_cpu_cores: 112
nodecert_ram_gb: 2048
nodecert_nvme_count: 8
nodecert_nvme_min_gb: 3500
nodecert_os: ubuntu-24.04
nodecert_stack: r580-cuda13.0
nodecert_simulated: true
nodecert_lab_profile: h200-sxm-8
nodecert_cpu_model: Xeon
nodecert_nvme_rated_seq_read_mbps: 7000
nodecert_nvme_rated_seq_write_mbps: 6000
nodecert_nvme_rated_rand_read_iops: 1000000
nodecert_mig_enabled: false
nodecert_storage_targets: [/data/scratch]
nodecert_allow_raw_devices: [/dev/nvme7n1]
nodecert_allow_advisories: [NVIDIA-CTK-2025-07]
nodecert_firmware_recipe: dgx-h200-motherboard
nodecert_firmware: {cpld_mb: 0.2.1.9}
nodecert_firmware_images: {cpld_mb: DIGEST_A}
nodecert_bios_profile: dell-poweredge-gpu
nodecert_bios: {LogicalProc: Disabled}
nodecert_attestation: true
nodecert_attestation_python: /opt/attest/bin/python3
nodecert_attestation_rim_dirs: [/srv/mirror/rims]
nodecert_thresholds: {storage.seq_read_mbps_min: 3000}
nodecert_fabric: {link_layer: InfiniBand, ports: 8, rate_gbps: 400}
nodecert_cabling_plan: PLAN
nodecert_shared_fs: {mounts: [{path: /mnt/data, type: nfs4}]}
nodecert_container: {image: "nvcr.io/nvidia/cuda@sha256:DIGEST_A"}
nodecert_bmc: {address: 10.10.0.21, cert_sha256: DIGEST_B, username: nodecert,
               password_file: /etc/nodecert/bmc.pass}
nodecert_cluster: {engine: slurm}
nodecert_engine_name: gpu01
nodecert_rack: {name: rack-a1, kind: GB200-NVL72, gpus: 4}
""".replace("DIGEST_A", "a" * 64).replace("DIGEST_B", "b" * 64)
    .replace("PLAN", str(inv.parent / "fabric.csv")))
    (inv.parent / "fabric.csv").write_text(
        "node,port,switch,switch_port\ngpu-01,mlx5_0,leaf-01,1\n")
    from nodecert.inventory.variables import ORDER, PLAN, VALIDATION, VARIABLES
    text = (inv / "host_vars" / "gpu-01.yml").read_text()
    # every variable but the vaulted secret is set above
    assert {v.name for v in VARIABLES if v.kind != "secret"} <= {
        line.split(":")[0] for line in text.splitlines() if line.startswith("nodecert_")}
    spec = load_inventory(inv)["gpu-01"]
    assert {v.key for v in ORDER} <= set(spec.as_dict())
    assert set(spec.validation) == {v.key for v in VALIDATION}
    plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                      scratch=None, checks=("health.gpu",))
    assert {v.key for v in PLAN} <= set(plan.spec)
    assert plan.spec["nvme_rated_rand_read_iops"] == 1000000
    assert plan.options["storage"]["targets"] == ["/data/scratch"]
    assert plan.spec["rack"]["trays"] == ["gpu-01"]


def test_a_mapping_variable_with_an_unknown_key_names_it(tmp_path: Path) -> None:
    inv = write(tmp_path, f"[gpu]\ngpu-01 ansible_host=192.0.2.10 {SPEC}\n"
                "[gpu:vars]\nnodecert_fabric={'link_layer': 'InfiniBand', 'ports': 8, "
                "'rate_gbps': 400, 'speed': 1}\n")
    assert any("nodecert_fabric unknown key(s) speed (known: devices, firmware" in p
               for p in problems(inv))
