"""The nodecert wheel, built from a copy of the shipped tree and installed outside the
repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.env import REPO, require

SHIPPED = ("pyproject.toml", "README.md", "src", "validators", "stacks", "inventory", "roles",
           "playbooks")


def build_wheel(work: Path) -> Path:
    """The wheel, built from a copy of the shipped tree (nothing written into the
    checkout)."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in SHIPPED:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(
            REPO / name, src / name, **({"ignore": shutil.ignore_patterns(
                "__pycache__", "*.pyc")} if (REPO / name).is_dir() else {}))
    out = work / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q",
                        "-w", str(out)], capture_output=True, text=True, timeout=600,
                       check=False)
    require(r.returncode == 0, f"pip could not build the wheel (hatchling): {r.stderr[-500:]}")
    (whl,) = out.glob("nodecert-*.whl")
    return whl


def install_wheel(whl: Path, site: Path) -> dict[str, str]:
    """Install outside the repository; the environment that runs it from there (its
    dependencies come from the test environment, the package itself only from `site`)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(whl)], check=True, timeout=300, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("NODECERT_HOME", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)  # ahead of the checkout's editable install
    return env

