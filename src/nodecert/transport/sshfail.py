"""Why an SSH connection failed: the errors the transport raises beyond paramiko's, which
of them trying again can mend, and one line a technician can act on for each."""

from __future__ import annotations

from typing import Protocol

import paramiko


class Endpoint(Protocol):
    """What a message names of the connection's far end (transport.ssh.Endpoint)."""

    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...


class Stopped(Exception):
    """The run was stopped (Ctrl-C) while this connection or command was under way."""


class LoginNotAnswered(paramiko.SSHException):
    """The server took the connection and then did not finish the login: no answer
    within the limit, or it hung up mid-login (busy, restarting, MaxStartups). paramiko
    raises both as AuthenticationException; neither says the key or user is wrong."""


class JumpHostFailed(paramiko.SSHException):
    """The connection to the bastion failed; the cause is the bastion's error, not the
    node's, and is named with the bastion's address."""


# paramiko's wording of a login that was never refused (auth_handler.wait_for_response)
NOT_A_REFUSAL = ("Authentication timeout.",
                  "Authentication failed: transport shut down or saw EOF")


class RevokedHostKey(paramiko.SSHException):
    """The server presented a key a @revoked line of known_hosts names."""


def is_refusal(exc: BaseException) -> bool:
    """A connection error that trying again cannot mend: a changed, revoked or unknown
    host key, or a refused login -- the node's or its bastion's."""
    if isinstance(exc, JumpHostFailed) and exc.__cause__ is not None:
        return is_refusal(exc.__cause__)
    return isinstance(exc, paramiko.BadHostKeyException | paramiko.AuthenticationException
                      | RevokedHostKey) or "known_hosts" in str(exc)


def is_unfinished_login(exc: BaseException) -> bool:
    """The node's (or its bastion's) sshd took the connection and did not finish the
    login: a busy host, worth another try."""
    if isinstance(exc, JumpHostFailed) and exc.__cause__ is not None:
        return is_unfinished_login(exc.__cause__)
    return isinstance(exc, LoginNotAnswered)


def describe_error(exc: BaseException, ep: Endpoint) -> str:
    """One line a technician can act on."""
    if isinstance(exc, JumpHostFailed):
        return str(exc)
    if isinstance(exc, LoginNotAnswered):
        return (f"{exc}: the node answered the connection but not the login in time; "
                "it is busy or its sshd is restarting -- try again, and if it lasts, look "
                "at its load and sshd's log")
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"host key of {ep.address} changed (expected {exc.expected_key.get_name()}): "
                "possible man-in-the-middle or a reinstalled node; verify it, then update "
                "known_hosts")
    if isinstance(exc, RevokedHostKey):
        return (f"{exc}: the node presents a key that was withdrawn; reinstall its host "
                "keys and list the new key, never the revoked one")
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return (f"{ep.address} is not in known_hosts: add its host key "
                f"(ssh-keyscan -p {ep.port} {ep.address} >> known_hosts, after verifying it)")
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication as {ep.user} failed on {ep.address}: check the key and user"
    if isinstance(exc, Stopped):
        return f"interrupted by the operator (Ctrl-C) while reaching {ep.address}:{ep.port}"
    if isinstance(exc, TimeoutError | OSError):
        return f"cannot reach {ep.address}:{ep.port}: {exc}"
    return f"ssh to {ep.address}:{ep.port} failed: {type(exc).__name__}: {exc}"


__all__ = ["NOT_A_REFUSAL", "JumpHostFailed", "LoginNotAnswered", "RevokedHostKey", "Stopped",
           "describe_error", "is_refusal", "is_unfinished_login"]
