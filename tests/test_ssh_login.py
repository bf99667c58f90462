"""A login is called refused only when the server refused it. An sshd that takes the
connection and then does not finish the login (busy, restarting) is named as such and
tried again; a bastion's failure is named with the bastion, never blamed on the node."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import paramiko
import pytest

from nodecert.transport.ssh import Endpoint, connect
from nodecert.transport.sshfail import (
    JumpHostFailed,
    LoginNotAnswered,
    describe_error,
    is_refusal,
    is_unfinished_login,
)
from support.env import require


class _Sshd(paramiko.ServerInterface):
    def __init__(self, mode: str, stall_s: float) -> None:
        self.mode, self.stall_s = mode, stall_s

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if self.mode == "stall":
            time.sleep(self.stall_s)  # a busy host: the answer comes after the limit
        return paramiko.AUTH_FAILED if self.mode == "refuse" else paramiko.AUTH_SUCCESSFUL


class Server:
    """An SSH server on a loopback port with a fresh host key, answering logins as
    `mode` says: stall, refuse or accept."""

    def __init__(self, mode: str, key: Path, stall_s: float = 3.0) -> None:
        self.key = paramiko.Ed25519Key.from_private_key_file(str(key))
        self.mode, self.stall_s = mode, stall_s
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = paramiko.Transport(conn)
            t.add_server_key(self.key)
            t.start_server(server=_Sshd(self.mode, self.stall_s))
            self.transports.append(t)

    def known_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.key.get_name()} {self.key.get_base64()}\n"

    def close(self) -> None:
        self.done.set()
        for t in self.transports:
            t.close()
        self.sock.close()


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """One Ed25519 key serves as the servers' host key and the client's login key."""
    path = tmp_path / "id_ed25519"
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def _ep(server: Server, tmp_path: Path, key: Path, jump: Server | None = None) -> Endpoint:
    known = tmp_path / "known_hosts"
    known.write_text(server.known_line() + (jump.known_line() if jump else ""))
    return Endpoint("n1", "127.0.0.1", server.port, "ops", str(key), (str(known),), "python3",
                    proxy_jump=f"root@127.0.0.1:{jump.port}" if jump else None)


@pytest.mark.parametrize("mode", ["stall", "refuse"])
def test_a_login_not_answered_in_time_is_not_called_refused(keys: Path, tmp_path: Path,
                                                            mode: str) -> None:
    server = Server(mode, keys)
    try:
        ep = _ep(server, tmp_path, keys)
        with pytest.raises(paramiko.SSHException) as caught:
            connect(ep, timeout=1.0)
        said = describe_error(caught.value, ep)
        if mode == "stall":
            assert isinstance(caught.value, LoginNotAnswered)
            assert is_unfinished_login(caught.value) and not is_refusal(caught.value)
            assert said.startswith("the login as ops on 127.0.0.1 was not finished "
                                   "(Authentication timeout.)")
            assert "check the key" not in said
        else:
            assert is_refusal(caught.value) and not is_unfinished_login(caught.value)
            assert said == "authentication as ops failed on 127.0.0.1: check the key and user"
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["stall", "refuse"])
def test_a_bastion_failure_names_the_bastion(keys: Path, tmp_path: Path, mode: str) -> None:
    node, jump = Server("accept", keys), Server(mode, keys)
    try:
        ep = _ep(node, tmp_path, keys, jump)
        with pytest.raises(JumpHostFailed) as caught:
            connect(ep, timeout=1.0)
        said = describe_error(caught.value, ep)
        assert said.startswith(f"through the jump host root@127.0.0.1:{jump.port}: ")
        assert ("as root" in said) and ("as ops" not in said)
        assert is_refusal(caught.value) is (mode == "refuse")
        assert is_unfinished_login(caught.value) is (mode == "stall")
    finally:
        node.close()
        jump.close()


def test_a_connection_past_descriptor_1024_is_made(keys: Path, tmp_path: Path) -> None:
    """A controller with a thousand nodes holds more than 1024 descriptors: connecting,
    and waiting on a channel, must not use select() (which refuses them)."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    require(hard == resource.RLIM_INFINITY or hard >= 1400,
            f"the descriptor limit ({hard}) is under 1400 here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    server = Server("accept", keys)
    try:
        assert max(held) > 1024
        client = connect(_ep(server, tmp_path, keys), timeout=10.0)
        sock = client.get_transport().sock  # type: ignore[union-attr]
        assert sock.fileno() > 1024  # the socket connect() waited on was past select()'s
        client.close()
    finally:
        server.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
