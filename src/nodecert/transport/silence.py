"""Whether a node is silent, or only unread: the limits that find a dead or hung node
count its silence on the node's clock (LoadGate.clock), and before one is called
silent, what it sent and this process has not read yet is looked for.

A controller starved of CPU reads late: paramiko's transport thread has not yet taken
the node's bytes off the socket, or the reader has not yet taken them off the channel.
Neither is the node's silence.
"""

from __future__ import annotations

import array
import fcntl
import socket
import termios
import time
from collections.abc import Callable
from typing import Any

import paramiko

Clock = Callable[[], float]
# nodecert policy: unread bytes found at a limit give the reader one more second to take
# them, at most this many times per limit (a minute in all). The node spoke, so it is not
# silent; the bound keeps a node that trickles bytes the transport never makes into data
# (a hostile one) from holding its session open past the host's own limit.
UNREAD_GRACE = 60


def _socket_unread(sock: Any) -> bool:
    """Bytes waiting in the connection under the channel, not yet read by paramiko."""
    if isinstance(sock, paramiko.Channel):  # through a jump host: its channel's buffer
        return sock.recv_ready()
    if not isinstance(sock, socket.socket):
        return False
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    except OSError:  # closed meanwhile: nothing to read, the reader sees the end itself
        return False
    return buf[0] > 0


def unread_input(chan: paramiko.Channel) -> bool:
    """Has the node sent something this process has not read yet?"""
    if chan.recv_ready() or chan.recv_stderr_ready():
        return True
    transport = chan.get_transport()
    return transport is not None and _socket_unread(transport.sock)


class NodeLimit:
    """A time limit on a node (how long it may stay silent, or take in all), counted on
    `clock` (the node's clock).

    `reset()` when the node speaks; `left()` is the time left on the clock; `expired(chan)`
    is True only once the time is up and nothing the node sent is waiting to be read."""

    def __init__(self, seconds: float, clock: Clock = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.end = clock() + seconds
        self.grace = UNREAD_GRACE

    def reset(self, seconds: float | None = None) -> None:
        if seconds is not None:
            self.seconds = seconds
        self.end = self.clock() + self.seconds
        self.grace = UNREAD_GRACE

    def left(self) -> float:
        return self.end - self.clock()

    def expired(self, chan: paramiko.Channel) -> bool:
        if self.left() > 0:
            return False
        if self.grace > 0 and unread_input(chan):
            self.grace -= 1
            return False
        return True

    def wait_s(self, most: float = 1.0) -> float:
        """How long one blocking read may wait: up to `most`, and no longer than the time
        left, unless that is spent and unread bytes earned a grace (then `most`)."""
        left = self.left()
        return min(most, left) if left > 0.01 else most


__all__ = ["UNREAD_GRACE", "Clock", "NodeLimit", "unread_input"]
