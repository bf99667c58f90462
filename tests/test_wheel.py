"""An installed nodecert does not depend on running from a clone: the wheel carries the
roles, playbooks, stacks, profiles and suites, and the commands find them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.wheel import build_wheel, install_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.integration
def test_wheel_carries_the_ansible_side_and_the_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("nodecert/_data/playbooks/site.yml", "nodecert/_data/playbooks/ansible.cfg",
                   "nodecert/_data/roles/framework/tasks/main.yml",
                   "nodecert/_data/stacks/r580-cuda13.0.yml",
                   "nodecert/_data/validators/profiles/H200-SXM.yml",
                   "nodecert/_data/validators/suites.yml",
                   "nodecert/_data/validators/acceptance.yml",
                   "nodecert/certs/templates/node.html.j2", "nodecert_node/contract.py",
                   "nodecert_node/data/xid-catalog.json"):
        assert needed in names, needed


@pytest.mark.integration
def test_installed_wheel_runs_outside_the_repository(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = install_wheel(wheel, site)
    code = ("import nodecert.core.paths as p, nodecert.core.ansible_env as i; "
            "print(p.product_dir('roles')); print(p.product_dir('playbooks')); "
            "print(p.stacks_dir()); print(i.ansible_config())")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert all(Path(x).exists() and str(site) in x for x in out), out
    listed = subprocess.run([sys.executable, "-m", "nodecert", "stack", "list"], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            check=False)
    assert listed.returncode == 0 and "r580-cuda13.0" in listed.stdout, listed.stderr
