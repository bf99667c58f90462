"""known_hosts files read once per run, not once per connection.

paramiko parses every line of a known_hosts file into a key object when a client
loads it; with one file listing a thousand nodes, loading it for each of the thousand
connections costs minutes of CPU. Here each file is parsed once (again only when it
changes on disk) and indexed by host name; a connection is given just the keys listed
for its own name, with paramiko's precedence: the user's ~/.ssh/known_hosts first (when
it lists the name, only its keys count), else every other file in order, a later file's
key of the same type replacing an earlier one. Hashed names (|1|...) are matched the way
paramiko matches them.

A line marked @revoked (OpenSSH's marker: "this key must never be accepted for the
hosts the line names") is kept apart: its key is never offered as known, and a server
presenting it is refused by name (`revoked_for`), whatever other line lists it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko


@dataclass
class _Parsed:
    stamp: tuple[int, int, int]  # inode, size, mtime_ns: parsed again when it changes
    plain: dict[str, dict[str, paramiko.PKey]] = field(default_factory=dict)
    hashed: list[paramiko.hostkeys.HostKeyEntry] = field(default_factory=list)
    revoked: list[paramiko.hostkeys.HostKeyEntry] = field(default_factory=list)

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        found = dict(self.plain.get(name, {}))
        for entry in self.hashed:
            if entry.key is not None and any(
                    h.startswith("|1|") and paramiko.HostKeys.hash_host(name, h) == h
                    for h in entry.hostnames):
                found[entry.key.get_name()] = entry.key
        return found

    def revoked_keys(self, name: str) -> list[paramiko.PKey]:
        return [e.key for e in self.revoked
                if e.key is not None and _names_match(e.hostnames, name)]


def _pattern(p: str) -> re.Pattern[str]:
    # OpenSSH host patterns know only * and ?; everything else (the [addr]:port
    # brackets included) is literal.
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                              for c in p), re.IGNORECASE)


def _names_match(patterns: list[str], name: str) -> bool:
    """OpenSSH's rule for a line's host list: any pattern matches and no !pattern."""
    hit = False
    for raw in patterns:
        negated = raw.startswith("!")
        p = raw[1:] if negated else raw
        if p.startswith("|1|"):
            m = paramiko.HostKeys.hash_host(name, p) == p
        else:
            m = _pattern(p).fullmatch(name) is not None
        if m and negated:
            return False
        hit = hit or m
    return hit


_LOCK = threading.Lock()
_CACHE: dict[str, _Parsed] = {}


def _parsed(path: Path) -> _Parsed | None:
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    key = str(path)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit.stamp == stamp:
            return hit
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return None
        parsed = _Parsed(stamp)
        for n, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            revoked = line.startswith("@revoked") and line[8:9] in (" ", "\t")
            if revoked:
                line = line[8:].strip()
            # A line paramiko cannot read (an unknown key type, @cert-authority) lists
            # no key it could accept: skipped, as paramiko's own loader skips it.
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, n)
            except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
                continue
            if entry is None or entry.key is None:
                continue
            if revoked:
                parsed.revoked.append(entry)
                continue
            for h in entry.hostnames:
                if h.startswith("|1|"):
                    parsed.hashed.append(entry)
                    break
                parsed.plain.setdefault(h, {})[entry.key.get_name()] = entry.key
        _CACHE[key] = parsed
        return parsed


def user_file() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def keys_for(name: str, files: tuple[str, ...], alias: str | None = None
             ) -> dict[str, paramiko.PKey]:
    """keytype -> key that `name` ("addr" or "[addr]:port") may present, from the
    user's known_hosts and `files`; with HostKeyAlias, the alias's keys count too."""
    gone: list[paramiko.PKey] = revoked_for(name, files, alias)
    user = _parsed(user_file())
    if user is not None:
        own = user.lookup(name)
        if own:
            return {k: v for k, v in own.items() if v not in gone}
    merged: dict[str, paramiko.PKey] = {}
    others = [p for p in (_parsed(Path(f).expanduser()) for f in files) if p is not None]
    for p in ([user] if user is not None else []) + others:
        merged.update(p.lookup(name))
    if alias:
        for p in ([user] if user is not None else []) + others:
            merged.update(p.lookup(alias))
    return {k: v for k, v in merged.items() if v not in gone}


def revoked_for(name: str, files: tuple[str, ...], alias: str | None = None
                ) -> list[paramiko.PKey]:
    """Keys a @revoked line of the user's known_hosts or `files` names for `name`
    (or the alias): never accepted, whichever file lists them as known."""
    out: list[paramiko.PKey] = []
    for path in (user_file(), *(Path(f).expanduser() for f in files)):
        p = _parsed(path)
        if p is None:
            continue
        out += p.revoked_keys(name)
        if alias:
            out += p.revoked_keys(alias)
    return out


def server_name(address: str, port: int) -> str:
    """The name known_hosts lists a server under (ssh's and paramiko's rule)."""
    return address if port == 22 else f"[{address}]:{port}"


def forget() -> None:
    """Drop every parsed file (tests that rewrite a file within one mtime tick)."""
    with _LOCK:
        _CACHE.clear()


__all__ = ["forget", "keys_for", "revoked_for", "server_name", "user_file"]
