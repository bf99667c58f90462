"""Mirror versions and the wheelhouse, without root or hosts."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from nodecert.lab.config import LabConfig
from nodecert.lab.mirror import prune_mirrors, stack_packages
from nodecert.lab.wheelhouse import build_wheelhouse


def test_pruning_keeps_versions_a_running_lab_uses(tmp_path: Path) -> None:
    cfg = LabConfig(root=tmp_path)
    for key in ("old1", "old2", "new"):
        (cfg.mirror / key).mkdir(parents=True)
    (cfg.mirror / "Packages").write_text("")  # the older, unversioned layout
    (tmp_path / "state-other").mkdir()
    (tmp_path / "state-other/lab.json").write_text(json.dumps({"mirror": str(cfg.mirror / "old1")}))
    removed = prune_mirrors(cfg, cfg.mirror / "new")
    assert removed == [cfg.mirror / "Packages", cfg.mirror / "old2"]
    assert sorted(p.name for p in cfg.mirror.iterdir()) == ["new", "old1"]


def test_mirror_carries_every_pinned_package_once() -> None:
    pins = {(p.name, str(p.version)) for p in stack_packages()}
    assert ("libnccl2", "2.27.7-1+cuda13.0") in pins
    assert ("datacenter-gpu-manager-4-cuda12", "1:4.4.1-1") in pins
    assert ("nvidia-driver-550-server", "550.163.01-0ubuntu0.22.04.1") in pins
    assert len(pins) == len(stack_packages())


def test_wheelhouse_is_a_pep503_index_with_hashes(tmp_path: Path) -> None:
    wheels = build_wheelhouse(tmp_path)
    names = sorted(w.name for w in wheels)
    assert names == ["tensorflow-2.18.0-py3-none-any.whl", "torch-2.5.1+cu124-py3-none-any.whl",
                     "torch-2.8.0+cu128-py3-none-any.whl", "torch-2.9.1+cu130-py3-none-any.whl"]
    index = (tmp_path / "simple/torch/index.html").read_text()
    for w in wheels:
        if w.name.startswith("torch"):
            assert f"{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}" in index
    with zipfile.ZipFile(tmp_path / "wheels/torch-2.8.0+cu128-py3-none-any.whl") as z:
        assert "Version: 2.8.0+cu128" in z.read("torch-2.8.0+cu128.dist-info/METADATA").decode()
        assert "cuda = '12.8'" in z.read("torch/version.py").decode()
    # Reproducible: the same inputs give byte-identical wheels (stable hashes in the index).
    again = build_wheelhouse(tmp_path / "again")
    assert [w.read_bytes() for w in again] == [w.read_bytes() for w in wheels]
