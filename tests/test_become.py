"""sudo with a become password: the password goes to sudo's standard input only after
sudo's own prompt, never on a command line, in a repr or in a file; a wrong, missing
or refused password is a clear error. (The lab test does the same against real sudo.)"""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

import pytest

from nodecert.core.errors import InventoryError
from nodecert.transport.become import BecomeSource, Secret, read_password_file
from nodecert.transport.ssh import BecomeError, Endpoint, start

PW = "corr3ct horse"


class FakeSudo:
    """A channel that behaves like `sudo -S -p PROMPT -- sh -c 'echo KEY; CMD'`."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.cmd = ""
        self.out = b""
        self.err = b""
        self.sent: list[bytes] = []
        self.exited = False
        self.closed = False
        self._r, self._w = os.pipe()
        os.write(self._w, b"x")  # always "readable": select never waits here

    def fileno(self) -> int:
        return self._r

    def exec_command(self, cmd: str) -> None:
        self.cmd = cmd
        if not cmd.startswith("sudo -S"):
            return
        args = shlex.split(cmd)
        self.prompt = args[args.index("-p") + 1].encode()
        self.key = re.search(r"echo (NODECERT-BECOME-\w+);", cmd).group(1).encode()  # type: ignore[union-attr]
        if self.mode == "nopasswd":
            self.out += self.key + b"\ncommand output\n"
        elif self.mode == "not-sudoer":
            self.err += b"ops is not in the sudoers file.\n"
            self.exited = True
        else:
            self.err += b"\nWe trust you have received the usual lecture...\n" + self.prompt

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)
        if data == PW.encode() + b"\n":
            self.out += self.key + b"\ncommand output\n"
        else:
            self.err += b"Sorry, try again.\n" + self.prompt

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, n: int) -> bytes:
        chunk, self.err = self.err[:n], self.err[n:]
        return chunk

    def recv_ready(self) -> bool:
        return bool(self.out)

    def recv(self, n: int) -> bytes:
        chunk, self.out = self.out[:n], self.out[n:]
        return chunk

    def exit_status_ready(self) -> bool:
        return self.exited

    def close(self) -> None:
        self.closed = True
        os.close(self._r)
        os.close(self._w)


class FakeClient:
    def __init__(self, chan: FakeSudo) -> None:
        self.chan = chan

    def get_transport(self) -> FakeClient:
        return self

    def open_session(self, timeout: float | None = None) -> FakeSudo:
        return self.chan


def _ep(password: str | None) -> Endpoint:
    return Endpoint("h2", "10.0.0.2", 22, "ops", None, (), "python3", become=True,
                    become_password=Secret(password) if password else None)


def test_the_password_is_answered_to_sudos_prompt_only() -> None:
    chan = FakeSudo("password")
    got = start(FakeClient(chan), _ep(PW), "id -u", timeout=5)  # type: ignore[arg-type]
    assert got is chan
    assert chan.sent == [PW.encode() + b"\n"]
    assert PW not in chan.cmd  # never on the command line
    assert chan.recv(100) == b"command output\n"  # the caller reads the command's output
    chan.close()


def test_a_wrong_password_is_refused_clearly() -> None:
    chan = FakeSudo("password")
    with pytest.raises(BecomeError, match="sudo refused the become password for ops on h2"):
        start(FakeClient(chan), _ep("wrong"), "id -u", timeout=5)  # type: ignore[arg-type]
    assert len(chan.sent) == 1 and chan.closed  # asked once, then gave up


def test_nopasswd_sudo_gets_no_password_on_its_stdin() -> None:
    chan = FakeSudo("nopasswd")
    start(FakeClient(chan), _ep(PW), "id -u", timeout=5)  # type: ignore[arg-type]
    assert chan.sent == []  # the command's input is the caller's, not the password
    chan.close()


def test_a_user_without_sudo_rights_is_named() -> None:
    chan = FakeSudo("not-sudoer")
    with pytest.raises(BecomeError, match="sudo failed for ops on h2: ops is not in the "
                                          "sudoers file"):
        start(FakeClient(chan), _ep(PW), "id -u", timeout=5)  # type: ignore[arg-type]


def test_without_a_password_sudo_never_prompts() -> None:
    chan = FakeSudo("password")
    start(FakeClient(chan), _ep(None), "id -u", timeout=5)  # type: ignore[arg-type]
    assert chan.cmd.startswith("sudo -n -- sh -c ")
    chan.close()


def test_a_secret_never_prints(tmp_path: Path) -> None:
    ep = _ep(PW)
    assert PW not in repr(ep) and PW not in str(ep)
    assert PW not in repr(Secret(PW)) and PW not in f"{Secret(PW)}"


def test_password_files(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text(PW + "\n")
    f.chmod(0o600)
    assert read_password_file(f, "become password file").reveal() == PW
    f.chmod(0o644)
    with pytest.raises(InventoryError, match="can be read by other users") as e:
        read_password_file(f, "become password file")
    assert PW not in str(e.value)
    script = tmp_path / "pw.sh"
    script.write_text(f"#!/bin/sh\necho '{PW}'\n")
    script.chmod(stat.S_IRWXU)
    assert read_password_file(script, "become password file").reveal() == PW
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(InventoryError, match="is empty"):
        read_password_file(empty, "become password file")
    assert BecomeSource(f, None).ansible_args() == ["--become-password-file", str(f)]


def test_a_password_file_or_script_others_can_change_is_refused(tmp_path: Path) -> None:
    """Read or run as the user, such a file must be the user's and writable only by
    them, in a directory only they (or root) can write: else another account picks
    the password, or the program run."""
    d = tmp_path / "secrets"
    d.mkdir(mode=0o700)
    script = d / "pw.sh"
    script.write_text(f"#!/bin/sh\necho '{PW}'\n")
    script.chmod(0o775)  # group-writable script
    with pytest.raises(InventoryError, match="can be changed by other users"):
        read_password_file(script, "become password file")
    with pytest.raises(InventoryError, match="can be changed by other users"):
        BecomeSource(script, None).ansible_args()
    script.chmod(0o700)
    assert read_password_file(script, "become password file").reveal() == PW
    d.chmod(0o777)  # anyone may replace it
    with pytest.raises(InventoryError, match=r"its directory .* can be changed"):
        read_password_file(script, "become password file")
    with pytest.raises(InventoryError, match="its directory"):
        BecomeSource(None, script).ansible_args()
    d.chmod(0o1777)  # sticky, as /tmp: nobody else can rename or replace it
    assert read_password_file(script, "become password file").reveal() == PW
    d.chmod(0o700)
    if os.getuid() == 0:  # a file of another account (root can make one)
        os.chown(script, 4242, 4242)
        with pytest.raises(InventoryError, match="belongs to uid 4242"):
            read_password_file(script, "become password file")


def test_a_vaulted_become_password_needs_the_vault_password(tmp_path: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    from nodecert.inventory.reader import check_inventory, hostvars
    vault_pw = tmp_path / "vault-pw"
    vault_pw.write_text("v4ult\n")
    vault_pw.chmod(0o600)
    blob = VaultLib([("default", VaultSecret(b"v4ult"))]).encrypt(PW).decode()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "h2.yml").write_text(
        "ansible_become_password: !vault |\n" + "".join(
            f"  {line}\n" for line in blob.splitlines()))
    inv = tmp_path / "hosts.ini"
    inv.write_text("h2 ansible_host=192.0.2.2 ansible_user=ops ansible_become=true "
                   "nodecert_gpu_model=L4 nodecert_gpu_count=1 nodecert_cpu_cores=8 "
                   "nodecert_ram_gb=32 nodecert_nvme_count=0\n")
    # a vaulted secret in the inventory is accepted (it stays encrypted in run copies)
    report = check_inventory(inv)
    assert report.ok, [p.what for p in report.problems]
    hv = hostvars(inv, ["h2"])
    with pytest.raises(InventoryError, match="vault-encrypted and no vault password"):
        BecomeSource(None, None).passwords(hv)
    got = BecomeSource(None, vault_pw).passwords(hv)["h2"]
    assert got is not None and got.reveal() == PW
