"""SSH sessions to nodes with paramiko, host keys checked strictly.

Connection settings come from the inventory exactly as Ansible resolves them
(ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file,
UserKnownHostsFile and ProxyJump in ansible_ssh_common_args/ansible_ssh_extra_args,
ansible_become). An unknown or changed host key -- the node's or the jump host's -- is
refused; nodecert never adds keys on its own. A non-root user with `become` runs the
node's commands through sudo: `sudo -n` without a become password; with one, sudo is
started with a prompt of this session's own and the password is written to its
standard input only when that prompt appears (Ansible's way), never on a command line.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import paramiko

from nodecert.core.textsafe import clean
from nodecert.transport import knownhosts
from nodecert.transport.become import Secret
from nodecert.transport.sshfail import (
    NOT_A_REFUSAL,
    JumpHostFailed,
    LoginNotAnswered,
    RevokedHostKey,
    Stopped,
    describe_error,
)


class BecomeError(paramiko.SSHException):
    """sudo did not let the user become root (wrong or missing password, no sudo)."""


# How often a connection or command in progress looks at the run's stop flag: Ctrl-C
# ends it within this, not at its time limit.
STOP_POLL_S = 0.5


@dataclass(frozen=True)
class Endpoint:
    host: str
    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: tuple[str, ...]
    python: str
    become: bool = False
    proxy_jump: str | None = None  # [user@]host[:port] of a bastion
    become_password: Secret | None = field(default=None, repr=False, compare=False)
    host_key_alias: str | None = None  # the name known_hosts lists the key under
    ssh_config: str | None = None  # the ssh_config file the settings came from

    @classmethod
    def from_hostvars(cls, host: str, hv: dict[str, Any]) -> Endpoint:
        known: list[str] = []
        jump: str | None = None
        alias: str | None = None
        config_file: str | None = None
        args = shlex.split(str(hv.get("ansible_ssh_common_args", "") or "")) + shlex.split(
            str(hv.get("ansible_ssh_extra_args", "") or ""))
        for k, a in enumerate(args):
            if a in ("-J", "-F") and k + 1 < len(args):
                if a == "-J":
                    jump = jump or args[k + 1]
                else:
                    config_file = config_file or args[k + 1]
                continue
            opt = a[2:] if a.startswith("-o") and len(a) > 2 else (
                args[k + 1] if a == "-o" and k + 1 < len(args) else "")
            key, _, value = opt.partition("=")
            if key.lower() == "userknownhostsfile":
                known += value.split()
            elif key.lower() == "proxyjump" and value.lower() != "none":
                jump = jump or value.split(",")[0]
            elif key.lower() == "hostkeyalias":
                alias = alias or value
        # What ssh itself would add from its configuration file (-F, else ~/.ssh/config):
        # the command line and the inventory win, as they do for ssh.
        target = str(hv.get("ansible_host", host))
        cfg = lookup_config(config_file, target)
        interp = str(hv.get("ansible_python_interpreter") or "python3")
        if "{{" in interp or interp.startswith("auto"):
            interp = "python3"
        user = str(hv.get("ansible_user") or cfg.get("user") or "root")
        become = str(hv.get("ansible_become", "false")).strip().lower() in (
            "true", "yes", "1", "on") and user != "root"
        key_file = hv.get("ansible_ssh_private_key_file") or next(
            iter(cfg.get("identityfile") or []), None)
        cfg_jump = str(cfg.get("proxyjump") or "").split(",", maxsplit=1)[0]
        jump = jump or (cfg_jump if cfg_jump.lower() not in ("", "none") else None)
        return cls(host, str(cfg.get("hostname") or target),
                   int(hv.get("ansible_port") or cfg.get("port") or 22), user,
                   str(Path(str(key_file)).expanduser()) if key_file else None,
                   tuple(known + str(cfg.get("userknownhostsfile") or "").split()), interp,
                   become, jump,
                   host_key_alias=alias or cfg.get("hostkeyalias"),
                   ssh_config=config_file)

    def as_root(self, command: str) -> str:
        """command as it must run on the node: through passwordless sudo for a non-root
        user with become, else as is (`start` handles sudo with a password)."""
        return f"sudo -n -- sh -c {shlex.quote(command)}" if self.become else command


def lookup_config(config_file: str | None, name: str) -> dict[str, Any]:
    """ssh_config settings for `name` (paramiko reads the file the way ssh does);
    empty where there is no file."""
    path = Path(config_file or "~/.ssh/config").expanduser()
    if not path.is_file():
        return {}
    found = dict(paramiko.SSHConfig.from_path(str(path)).lookup(name))
    if found.get("hostname") == name:
        found.pop("hostname")
    return found


def bastion(ep: Endpoint) -> Endpoint:
    """The jump host as an Endpoint: [user@]host[:port] from ProxyJump, completed from
    the same ssh_config (its HostName, User, Port, IdentityFile, known hosts)."""
    spec = ep.proxy_jump or ""
    user, _, hostport = spec.rpartition("@")
    host, _, port = hostport.partition(":")
    cfg = lookup_config(ep.ssh_config, host)
    key = next(iter(cfg.get("identityfile") or []), None) or ep.key_file
    return Endpoint(host, str(cfg.get("hostname") or host),
                    int(port or cfg.get("port") or 22), user or str(cfg.get("user") or ep.user),
                    str(Path(key).expanduser()) if key else None,
                    tuple(str(cfg.get("userknownhostsfile") or "").split()) + ep.known_hosts,
                    ep.python, host_key_alias=cfg.get("hostkeyalias"),
                    ssh_config=ep.ssh_config)


def start(client: paramiko.SSHClient, ep: Endpoint, command: str, *, root: bool = True,
          timeout: float = 30.0,
          clock: Callable[[], float] = time.monotonic,
          stop: threading.Event | None = None) -> paramiko.Channel:
    """A channel running `command` on the node (as root when `root`), its standard input
    free for the caller. BecomeError when sudo refuses, or does not answer within
    `timeout` seconds on `clock` (the node's clock, LoadGate.clock); Stopped on `stop`."""
    # paramiko waits an hour for a channel by default: a node that never opens one is
    # given the command's own limit.
    chan = client.get_transport().open_session(timeout=timeout)  # type: ignore[union-attr]
    if not (root and ep.become and ep.become_password is not None):
        chan.exec_command(ep.as_root(command) if root else command)
        return chan
    key = secrets.token_hex(8)
    prompt, ok = f"[nodecert sudo {key}] password:", f"NODECERT-BECOME-{key}"
    chan.exec_command(f"sudo -S -p {shlex.quote(prompt)} -- sh -c "
                      f"{shlex.quote(f'echo {ok}; {command}')}")
    try:
        _become(chan, ep, prompt.encode(), ok.encode(), timeout, clock=clock, stop=stop)
    except BaseException:
        chan.close()
        raise
    return chan


def _become(chan: paramiko.Channel, ep: Endpoint, prompt: bytes, ok: bytes,
            timeout: float, *, clock: Callable[[], float],
            stop: threading.Event | None = None) -> None:
    """Answer sudo's prompt once; return when the command has started (its first line
    is this session's key), BecomeError on a second prompt, an exit or the time limit."""
    assert ep.become_password is not None
    end = clock() + timeout
    err, out, sent = b"", b"", False
    while True:
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(4096)
            if err.count(prompt) > (1 if sent else 0):
                if sent:
                    raise BecomeError(f"sudo refused the become password for {ep.user} on "
                                      f"{ep.host}: check the become password file or vault")
                chan.sendall(ep.become_password.reveal().encode() + b"\n")
                sent = True
            continue
        if chan.recv_ready():
            byte = chan.recv(1)  # one at a time: what follows the key is the caller's
            out += byte
            if byte == b"\n" and out.endswith(ok + b"\n"):
                return
            if byte and len(out) < 4096:
                continue
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            tail = clean(err.replace(prompt, b"").decode("utf-8", "replace"))[-300:].strip()
            raise BecomeError(f"sudo failed for {ep.user} on {ep.host}: "
                              f"{tail or 'no sudo rights'}")
        left = end - clock()
        if left <= 0:
            raise BecomeError(f"sudo on {ep.host} gave no prompt and no start within "
                              f"{timeout:g} s")
        if stop is not None and stop.is_set():
            raise Stopped(f"stopped while sudo started on {ep.host}")
        wait_ready(chan, min(left, STOP_POLL_S))


def wait_ready(obj: Any, timeout: float, *, write: bool = False) -> bool:
    """Whether `obj` (a socket, a paramiko Channel: anything with fileno()) became ready
    to read (or to write) within `timeout` seconds. poll(), not select(): a controller
    with a thousand nodes holds descriptors past select()'s 1024 ("filedescriptor out of
    range in select()")."""
    poller = select.poll()
    poller.register(obj.fileno(), select.POLLOUT if write else select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


def _jump_channel(ep: Endpoint, timeout: float, stop: threading.Event | None,
                  deadline_s: float) -> tuple[paramiko.SSHClient, Any]:
    """A channel to the node through the bastion (its host key checked like the node's)."""
    via = bastion(ep)
    try:
        jump = connect(via, timeout, stop=stop, deadline_s=deadline_s)
    except (paramiko.SSHException, OSError) as exc:
        raise JumpHostFailed(f"through the jump host {ep.proxy_jump}: "
                             f"{describe_error(exc, via)}") from exc
    transport = jump.get_transport()
    if transport is None:
        raise paramiko.SSHException(f"no transport to the jump host {ep.proxy_jump}")
    chan = transport.open_channel("direct-tcpip", (ep.address, ep.port), ("127.0.0.1", 0),
                                  timeout=timeout)
    return jump, chan


# Each of the TCP connect, the SSH banner and the authentication (nodecert policy: a
# node on a working network answers each in well under a second).
HANDSHAKE_TIMEOUT_S = 15.0
# The whole connection, through a jump host included (nodecert policy: three phases at
# their limit, and a little more, never the sum of every limit of every hop).
CONNECT_DEADLINE_S = 60.0


def _tcp(address: str, port: int, timeout: float, stop: threading.Event | None,
         end: float) -> socket.socket:
    """A connected TCP socket, opened without blocking so that a stop or the deadline
    ends the wait (each address getaddrinfo gives, in its order)."""
    last: OSError = OSError(f"no address for {address}")
    for family, kind, proto, _, where in socket.getaddrinfo(address, port,
                                                          type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.connect_ex(where)
            limit = min(time.monotonic() + timeout, end)
            while True:
                if stop is not None and stop.is_set():
                    raise Stopped(f"stopped while connecting to {address}:{port}")
                left = limit - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                if wait_ready(sock, min(left, STOP_POLL_S), write=True):
                    break
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err))
            sock.settimeout(timeout)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise last


@contextlib.contextmanager
def _ended_by(stop: threading.Event | None, end: float, close: Callable[[], None],
              what: str) -> Iterator[None]:
    """Run the block; if the run is stopped or `end` passes first, `close` is called
    from a watcher (what the block waits on ends at once) and the block's failure
    becomes Stopped or TimeoutError."""
    done, fired = threading.Event(), []

    def watch() -> None:
        while not done.wait(min(max(end - time.monotonic(), 0.0), STOP_POLL_S)):
            if stop is not None and stop.is_set():
                fired.append("stop")
            elif time.monotonic() >= end:
                fired.append("deadline")
            if fired:
                with contextlib.suppress(Exception):
                    close()
                return

    def ended() -> Exception:
        return Stopped(f"stopped while {what}") if fired[0] == "stop" else \
            TimeoutError(f"{what} took longer than the connection's deadline")

    threading.Thread(target=watch, daemon=True, name="nodecert-ssh-watch").start()
    try:
        yield
    except BaseException as exc:
        if not fired:
            raise
        raise ended() from exc
    finally:
        done.set()
    if fired:  # fired as the block finished: what it made was closed under it
        raise ended()


def _quiet_transport(sock: Any, **kwargs: Any) -> paramiko.Transport:
    """paramiko's transport thread wakes every 0.1 s to see whether it was closed: a
    thousand idle connections cost a core. Once a second is enough (the keep-alive is
    sent every 5 s; closing waits at most a second longer)."""
    transport = paramiko.Transport(sock, **kwargs)
    transport.sock.settimeout(1.0)
    # AES-GCM first (then paramiko's own order): its tag is checked inside the
    # cryptography library, where the CTR modes' HMAC is compared byte by byte in Python
    # -- a third of the controller's CPU at a thousand nodes. OpenSSH offers GCM.
    opts = transport.get_security_options()
    gcm = tuple(c for c in opts.ciphers if c.endswith("-gcm@openssh.com"))
    opts.ciphers = gcm + tuple(c for c in opts.ciphers if c not in gcm)
    return transport


class _RefuseUnknownOrRevoked(paramiko.RejectPolicy):
    def __init__(self, revoked: list[paramiko.PKey]) -> None:
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> NoReturn:
        if key in self.revoked:
            raise RevokedHostKey(f"host key {key.get_name()} of {hostname} is marked "
                                 "@revoked in known_hosts")
        super().missing_host_key(client, hostname, key)


def connect(ep: Endpoint, timeout: float = HANDSHAKE_TIMEOUT_S, *,
            stop: threading.Event | None = None,
            deadline_s: float = CONNECT_DEADLINE_S) -> paramiko.SSHClient:
    """An authenticated client; raises paramiko/OSError exceptions on failure, Stopped
    as soon as `stop` is set and TimeoutError past deadline_s in all (each phase also
    has `timeout`)."""
    end = time.monotonic() + deadline_s
    client = paramiko.SSHClient()
    # Only this host's keys, from files parsed once per run (knownhosts); an unknown or
    # changed key is refused as before.
    name = knownhosts.server_name(ep.address, ep.port)
    keys = client.get_host_keys()
    for kind, key in knownhosts.keys_for(name, ep.known_hosts, ep.host_key_alias).items():
        keys.add(name, kind, key)
    # A revoked key is never among the known ones (keys_for leaves it out), so it lands
    # here and is refused by name.
    client.set_missing_host_key_policy(_RefuseUnknownOrRevoked(
        knownhosts.revoked_for(name, ep.known_hosts, ep.host_key_alias)))
    sock: Any
    if ep.proxy_jump:
        jump, sock = _jump_channel(ep, timeout, stop, end - time.monotonic())
        client._nodecert_jump = jump  # type: ignore[attr-defined]  # kept alive with it
    else:
        sock = _tcp(ep.address, ep.port, timeout, stop, end)

    def close() -> None:  # what the handshake waits on, closed under it
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        client.close()
        if ep.proxy_jump:
            client._nodecert_jump.close()  # type: ignore[attr-defined]

    try:
        with _ended_by(stop, end, close, f"connecting to {ep.address}:{ep.port}"):
            client.connect(ep.address, port=ep.port, username=ep.user,
                           key_filename=ep.key_file, timeout=timeout, banner_timeout=timeout,
                           auth_timeout=timeout, allow_agent=ep.key_file is None,
                           look_for_keys=ep.key_file is None, sock=sock,
                           transport_factory=_quiet_transport)
    except paramiko.AuthenticationException as exc:
        close()
        if str(exc) in NOT_A_REFUSAL:
            raise LoginNotAnswered(f"the login as {ep.user} on {ep.address} was not "
                                   f"finished ({exc})") from exc
        raise
    except BaseException:
        close()
        raise
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)  # a vanished host shows up as a dead channel, not a hang
    return client
