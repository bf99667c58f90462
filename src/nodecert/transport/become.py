"""The become (sudo) password for hosts reached as a non-root user, read the way Ansible
reads it: a password file (`--become-password-file`, or ANSIBLE_BECOME_PASSWORD_FILE;
an executable file is run and its output used) or a vault-encrypted
`ansible_become_password` in the inventory, opened with `--vault-password-file` (or
ANSIBLE_VAULT_PASSWORD_FILE). The password lives only in memory, wrapped so that no
repr, log line, run file or report can show it; it reaches the node only on sudo's
standard input, after sudo's own prompt.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError

SCRIPT_TIMEOUT_S = 30
# Types Ansible gives a `!vault` value: ansible-core 2.19+ and earlier releases.
VAULTED = ("EncryptedString", "AnsibleVaultEncryptedUnicode")
BECOME_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")


class Secret:
    """A password that never prints: repr and str show a placeholder; `reveal()` is the
    one place the value is read (to write it to sudo's standard input)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(Secret)


def is_vaulted(value: Any) -> bool:
    return type(value).__name__ in VAULTED


def check_secret_file(path: Path, what: str) -> None:
    """A file that gives a password (read, or run when executable) must be the user's
    own and writable by nobody else, in a directory nobody else can swap it in:
    otherwise another account chooses the password nodecert hands out, or the program
    it runs as this user."""
    if not path.is_file():
        raise InventoryError(f"{what} {path} does not exist or is not a file",
                             hint="give the path of a file holding only the password")
    me = os.getuid()
    st = path.stat()
    if st.st_uid != me:
        raise InventoryError(f"{what} {path} belongs to uid {st.st_uid}, not to the user "
                             f"running nodecert (uid {me})",
                             hint=f"chown {me} {path}, or keep your own copy")
    if st.st_mode & 0o022:
        raise InventoryError(f"{what} {path} can be changed by other users "
                             f"(mode {stat.S_IMODE(st.st_mode):o})", hint=f"chmod go-w {path}")
    parent = path.resolve().parent
    dst = parent.stat()
    # A shared sticky directory (/tmp) lets nobody else rename or replace our file.
    if dst.st_uid not in (me, 0) or (dst.st_mode & 0o022 and not dst.st_mode & stat.S_ISVTX):
        raise InventoryError(f"{what} {path}: its directory {parent} can be changed by "
                             "other users, who could put another file in its place",
                             hint=f"keep it in a directory only you (or root) can write, "
                                  f"or chmod go-w {parent}")


def read_password_file(path: Path, what: str) -> Secret:
    """The password in `path` (first line, line end stripped) or, for an executable
    file, what it prints; errors name the file, never its content."""
    check_secret_file(path, what)
    if os.access(path, os.X_OK):
        try:
            proc = subprocess.run([str(path)], capture_output=True, timeout=SCRIPT_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InventoryError(f"{what} {path} is executable and could not be run: "
                                 f"{type(exc).__name__}",
                                 hint="remove the executable bit from a plain password "
                                      "file") from None
        if proc.returncode != 0:
            raise InventoryError(f"{what} script {path} exited {proc.returncode}",
                                 hint="run it by hand to see why")
        raw = proc.stdout
    else:
        if path.stat().st_mode & 0o077:
            raise InventoryError(f"{what} {path} can be read by other users",
                                 hint=f"chmod 600 {path}")
        raw = path.read_bytes()
    value = raw.splitlines()[0].decode("utf-8", "replace") if raw.strip(b"\r\n") else ""
    if not value:
        raise InventoryError(f"{what} {path} is empty", hint="write the password in it")
    return Secret(value)


def unlock_vault(vault_file: Path) -> None:
    """Make `!vault` values in inventories readable in this process."""
    check_secret_file(vault_file, "vault password file")
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import get_file_vault_secret

    secret = get_file_vault_secret(filename=str(vault_file), loader=DataLoader())
    secret.load()
    try:  # ansible-core 2.19+: one process-wide context holding the secrets
        from ansible.parsing.vault import VaultSecretsContext
    except ImportError:  # pragma: no cover - older ansible-core decrypts via the loader
        return
    ctx = VaultSecretsContext.current(optional=True)
    if ctx is None:
        VaultSecretsContext.initialize(VaultSecretsContext([("default", secret)]))
    else:
        ctx.secrets.append(("default", secret))


@dataclass(frozen=True)
class BecomeSource:
    """Where a run's become passwords come from (the command line or Ansible's
    environment variables)."""

    password_file: Path | None = None
    vault_file: Path | None = None

    @classmethod
    def from_env(cls, password_file: Path | None = None,
                 vault_file: Path | None = None) -> BecomeSource:
        pf = password_file or _env_path("ANSIBLE_BECOME_PASSWORD_FILE")
        vf = vault_file or _env_path("ANSIBLE_VAULT_PASSWORD_FILE")
        return cls(pf, vf)

    def ansible_args(self) -> list[str]:
        """The same files for ansible-playbook (which reads, or runs, them as they are:
        checked here first)."""
        out: list[str] = []
        if self.password_file:
            check_secret_file(self.password_file, "become password file")
            out += ["--become-password-file", str(self.password_file.resolve())]
        if self.vault_file:
            check_secret_file(self.vault_file, "vault password file")
            out += ["--vault-password-file", str(self.vault_file.resolve())]
        return out

    def passwords(self, hostvars: dict[str, dict[str, Any]]) -> dict[str, Secret | None]:
        """Each host's become password, or None where sudo must not need one."""
        shared = (read_password_file(self.password_file, "become password file")
                  if self.password_file else None)
        if self.vault_file:
            unlock_vault(self.vault_file)
        return {h: shared or _from_hostvars(h, hv, self.vault_file is not None)
                for h, hv in hostvars.items()}


def _env_path(var: str) -> Path | None:
    value = os.environ.get(var, "").strip()
    return Path(value).expanduser() if value else None


def _from_hostvars(host: str, hv: dict[str, Any], unlocked: bool) -> Secret | None:
    for var in BECOME_VARS:
        value = hv.get(var)
        if not is_vaulted(value):
            if value in (None, ""):
                continue
            return None  # refused by the inventory check; never used from plain text
        if not unlocked:
            raise InventoryError(f"host {host}: {var} is vault-encrypted and no vault "
                                 "password was given",
                                 hint="add --vault-password-file FILE (or set "
                                      "ANSIBLE_VAULT_PASSWORD_FILE)")
        try:
            return Secret(str(value))
        except Exception as exc:  # ansible's decryption errors share no base class
            raise InventoryError(f"host {host}: {var} could not be decrypted "
                                 f"({type(exc).__name__})",
                                 hint="check that the vault password file opens this "
                                      "vault") from None
    return None


__all__ = ["BECOME_VARS", "BecomeSource", "Secret", "is_vaulted", "read_password_file",
           "unlock_vault"]
