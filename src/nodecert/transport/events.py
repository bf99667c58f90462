"""What a node sends back: one JSON event per line, read with a bounded buffer and
validated before anything acts on it (the node is untrusted)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import paramiko

from nodecert.transport.silence import NodeLimit
from nodecert_node.contract import Result

MAX_LINE = 16 * 1024 * 1024  # one event from a node; beyond this the host is ERROR
EVENT_KINDS = ("hello", "start", "result", "done")


class BadEvent(ValueError):
    """A line from a node that is not a valid event; `text` is the offending line."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a node may send")


def _check_strings(obj: Any) -> None:
    """Lone surrogates ("\\ud800") decode from JSON but are not text: refuse them."""
    if isinstance(obj, str):
        obj.encode("utf-8")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_strings(k)
            _check_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            _check_strings(v)


def decode_event(raw: bytes, checks: list[str]) -> dict[str, Any]:
    """One line from a node -> a validated event. Pure; raises BadEvent naming the fault.

    A JSON object of a known kind; a result must be a valid result of a planned check
    with a known verdict; NaN, Infinity and lone surrogates are refused.
    """
    shown = raw[:2000].decode("utf-8", "replace")
    try:
        text = raw.decode("utf-8")
        ev = json.loads(text, parse_constant=_reject_constant)
        # A lone surrogate can only come from a \\uD800-\\uDFFF escape (UTF-8 decoding
        # refuses the bytes): only a line with such an escape needs the walk.
        if "\\ud" in text.lower():
            _check_strings(ev)
    except (UnicodeError, ValueError) as exc:
        raise BadEvent(f"not a JSON event: {exc}", shown) from exc
    if not isinstance(ev, dict):
        raise BadEvent(f"not a JSON object but {type(ev).__name__}", shown)
    kind = ev.get("event")
    if kind not in EVENT_KINDS:
        raise BadEvent(f"unknown event kind {kind!r} (known: {', '.join(EVENT_KINDS)})", shown)
    if kind == "start" and ev.get("check") not in checks:
        raise BadEvent(f"start of a check that was not planned: {ev.get('check')!r}", shown)
    if kind == "result":
        try:
            res = Result.from_dict(ev["result"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadEvent(f"not a valid result: {type(exc).__name__}: {exc}", shown) from exc
        if res.check not in checks:
            raise BadEvent(f"result of a check that was not planned: {res.check!r}", shown)
        ev = dict(ev, result=res)
    event: dict[str, Any] = ev
    return event


class LineReader:
    def __init__(self, chan: paramiko.Channel, limit: int = MAX_LINE) -> None:
        self.chan = chan
        self.buf = bytearray()
        self.scanned = 0  # bytes of buf already searched for a newline
        self.limit = limit

    def line(self, limits: Sequence[NodeLimit], stop: threading.Event) -> bytes | None:
        """The next line, or None at EOF; TimeoutError once any of `limits` has expired
        with nothing unread from the node; stops on `stop`; BadEvent when a line grows
        past the size limit. Each byte is scanned once."""
        while True:
            nl = self.buf.find(b"\n", self.scanned)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buf)
            if len(self.buf) > self.limit:
                raise BadEvent(f"a line longer than {self.limit // (1024 * 1024)} MiB",
                               bytes(self.buf[:2000]).decode("utf-8", "replace"))
            if stop.is_set():
                raise InterruptedError
            if any(lim.expired(self.chan) for lim in limits):
                raise TimeoutError
            self.chan.settimeout(min(lim.wait_s() for lim in limits))
            try:
                chunk = self.chan.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return None
            self.buf += chunk


__all__ = ["EVENT_KINDS", "MAX_LINE", "BadEvent", "LineReader", "decode_event"]
