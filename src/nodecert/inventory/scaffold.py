"""`nodecert init DIR`: an integrator's site project, ready to edit.

DIR/inventory/  an inventory directory: hosts.ini and group_vars/all/*.yml from the
                sample (every order-spec variable, commented), and host_vars/ with
                one host's file of per-host settings (BMC, login user, sudo), commented
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

Edit inventory/hosts.ini (your hosts and their addresses),
inventory/group_vars/all/nodecert.yml (the order spec: GPU model and count, CPU cores,
RAM, NVMe) and, per host, inventory/host_vars/<host>.yml (its BMC, the user nodecert
logs in as, a vaulted sudo password), then:

  nodecert inventory check -i inventory
  nodecert keys init --out keys
  provision -i inventory --stack r580-cuda13.0 --runs-dir runs --key keys/nodecert.key
  nodecert verify runs/<run>/reports/<host>.intoto.dsse.json --pubkey keys/nodecert.pub

Keep keys/ private; give keys/nodecert.pub to whoever verifies your certificates.
"""


# The sample's opening comment speaks of the repository's sample; the site's says where
# the site's own files are.
HOSTS_HEADER = """# This site's hosts: replace the sample hosts and addresses with yours. Every
# nodecert_* variable is documented in group_vars/all/nodecert.yml; per-host settings
# (the BMC, the login user, a vaulted sudo password) go in host_vars/<host>.yml.
#
#   nodecert inventory check --inventory inventory
"""

HOST_VARS = """# Settings for {host} alone: a file per host, named as the host is in hosts.ini.
# Uncomment what applies (docs/bmc.md, docs/inventory.md).
#
# The host's BMC, read by the bmc.* checks:
# nodecert_bmc:
#   address: 192.0.2.21
#   protocol: redfish                 # or ipmi
#   ca_file: /etc/nodecert/bmc-ca.pem
#   username: nodecert
#   password_file: /etc/nodecert/bmc.pass
#
# A non-root login whose sudo wants a password (ansible-vault encrypt_string; the
# commands take --vault-password-file):
# ansible_user: ops
# ansible_become: true
# ansible_become_password: !vault |
#   $ANSIBLE_VAULT;1.1;AES256
#   ...
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
    hosts = (sample / "lab.ini").read_text().splitlines(keepends=True)
    body = "".join(hosts[next(i for i, ln in enumerate(hosts) if not ln.startswith("#")):])
    (inv / "hosts.ini").write_text(HOSTS_HEADER + body)
    (inv / "host_vars").mkdir()
    first = next(ln.split()[0] for ln in body.splitlines()
                 if ln.strip() and not ln.startswith(("#", "[", ";")))
    (inv / "host_vars" / f"{first}.yml").write_text(HOST_VARS.format(host=first))
    keys = target / "keys"
    keys.mkdir(mode=0o700)
    os.chmod(keys, 0o700)
    (target / "runs").mkdir()
    (target / "README.txt").write_text(README)
    return sorted(p for p in target.rglob("*"))


__all__ = ["ScaffoldError", "init_project"]
