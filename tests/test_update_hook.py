"""The apt hook (roles/validators, dpkg-post-invoke): every change to a watched package --
install, upgrade, downgrade, removal, unhold -- queues a re-validation; held packages are
watched (every pinned package is held); unrelated packages queue nothing. Runs the real
rendered script with a dpkg-query that reports a prepared package database."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from support.env import REPO

ROLE = REPO / "roles" / "validators"
PINNED = {"nvidia-open": ("580.173.02-1", "hi"), "libnccl2": ("2.28.9-1+cuda13.0", "hi"),
          "datacenter-gpu-manager-4-cuda13": ("1:4.4.2-1", "hi"), "bash": ("5.2-2", "ii")}


def render(tmp: Path) -> Path:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    # Ansible's quote filter is shell quoting (shlex.quote)
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    text = env.from_string((ROLE / "templates" / "dpkg-post-invoke.j2").read_text()).render(
        ansible_managed="test", **defaults)
    # the state directory is the only thing moved, into the test's own directory
    text = text.replace("STATE=/var/lib/nodecert", f"STATE={tmp / 'state'}")
    hook = tmp / "hook"
    hook.write_text(text)
    hook.chmod(0o755)
    bin_ = tmp / "bin"
    bin_.mkdir()
    (bin_ / "dpkg-query").write_text(f"#!/bin/sh\ncat {tmp / 'db'}\n")
    (bin_ / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp / 'systemctl.log'}\n")
    for f in ("dpkg-query", "systemctl"):
        (bin_ / f).chmod(0o755)
    return hook


def set_db(tmp: Path, pkgs: dict[str, tuple[str, str]]) -> None:
    (tmp / "db").write_text("".join(f"{n} {v} {s}\n" for n, (v, s) in sorted(pkgs.items())))


def run_hook(tmp: Path, hook: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{tmp / 'bin'}:/usr/bin:/bin")
    return subprocess.run([str(hook), *args], env=env, capture_output=True, text=True,
                          timeout=30, check=True)


@pytest.fixture
def hooked(tmp_path: Path) -> Path:
    hook = render(tmp_path)
    set_db(tmp_path, PINNED)
    out = run_hook(tmp_path, hook, "--snapshot-only")  # what provisioning does
    assert out.stdout.strip() == "snapshot updated"
    snap = (tmp_path / "state" / "watched-packages").read_text()
    assert "nvidia-open 580.173.02-1 held" in snap and "bash" not in snap
    return hook


@pytest.mark.parametrize(("change", "line"), [
    ({"nvidia-open": ("570.211.01-1", "hi")}, "> nvidia-open 570.211.01-1 held"),   # down
    ({"nvidia-open": ("580.180.01-1", "hi")}, "> nvidia-open 580.180.01-1 held"),   # up
    ({"nvidia-open": ("580.173.02-1", "ii")}, "> nvidia-open 580.173.02-1 not-held"),  # unhold
    ({"libcudnn9-cuda-13": ("9.14.0.64-1", "ii")}, "> libcudnn9-cuda-13 9.14.0.64-1"),  # new
    ({"libnccl2": None}, "< libnccl2 2.28.9-1+cuda13.0 held"),                       # removed
])
def test_every_change_to_a_watched_package_queues_a_run(
        tmp_path: Path, hooked: Path, change: dict[str, tuple[str, str] | None],
        line: str) -> None:
    pkgs = {k: v for k, v in {**PINNED, **change}.items() if v is not None}
    set_db(tmp_path, pkgs)  # type: ignore[arg-type]
    run_hook(tmp_path, hooked)
    pending = (tmp_path / "state" / "revalidate-pending").read_text()
    assert pending.startswith("queued ") and line in pending
    assert (tmp_path / "systemctl.log").read_text().strip() == \
        "start --no-block nodecert-revalidate.service"


def test_unrelated_change_queues_nothing(tmp_path: Path, hooked: Path) -> None:
    set_db(tmp_path, {**PINNED, "bash": ("5.2-3", "ii"), "curl": ("8.5.0-2", "ii")})
    run_hook(tmp_path, hooked)
    assert not (tmp_path / "state" / "revalidate-pending").exists()
    assert not (tmp_path / "systemctl.log").exists()
