"""`nodecert init DIR`: an integrator's site project, ready to edit.

DIR/inventory/  an inventory directory (hosts.ini and group_vars/all/*.yml from the
                sample: every order-spec variable, commented)
DIR/keys/       the signing key's home (0700; `nodecert keys init --out DIR/keys`)
DIR/runs/       run directories
DIR/README.txt  the commands, with this project's paths
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.paths import data_root

README = """nodecert site project
=====================

Edit inventory/hosts.ini (your hosts and their addresses) and
inventory/group_vars/all/nodecert.yml (the order spec: GPU model and count, CPU cores,
RAM, NVMe), then:

  nodecert inventory check -i inventory
  nodecert keys init --out keys
  provision -i inventory --stack r580-cuda13.0 --runs-dir runs --key keys/nodecert.key
  nodecert verify runs/<run>/reports/<host>.intoto.dsse.json --pubkey keys/nodecert.pub

Keep keys/ private; give keys/nodecert.pub to whoever verifies your certificates.
"""


class ScaffoldError(NodecertError):
    """The target directory cannot take a new project."""


def init_project(target: Path) -> list[Path]:
    """Create the project; refuses a directory that already holds files."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} exists and is not empty: nothing was written",
                            hint="name a new or empty directory")
    sample = data_root() / "inventory" / "sample"
    target.mkdir(parents=True, exist_ok=True)
    inv = target / "inventory"
    shutil.copytree(sample / "group_vars", inv / "group_vars")
    shutil.copy2(sample / "lab.ini", inv / "hosts.ini")
    keys = target / "keys"
    keys.mkdir(mode=0o700)
    os.chmod(keys, 0o700)
    (target / "runs").mkdir()
    (target / "README.txt").write_text(README)
    return sorted(p for p in target.rglob("*"))


__all__ = ["ScaffoldError", "init_project"]
