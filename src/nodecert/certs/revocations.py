"""The signed revocation and supersession list: which certificates no longer hold.

A certificate is valid offline until its `not_after`; without this list a newer NOT
READY certificate for the same node (or the node sent back for repair) would leave the
older READY one verifying VALID. The list is a register of every certificate a signer
issued, kept next to the runs (`runs/revocations.intoto.dsse.json`) and updated by
`certify` and `cluster certify` under a lock. It is itself an in-toto Statement in a
DSSE envelope signed with the same key, so `verify --revocations FILE` trusts it
exactly as far as it trusts the certificates.

A certificate is named by the sha256 of its signed payload (the Statement bytes): the
envelope can be re-indented or carry more signatures without changing that. For each
subject (`node:<host>`, or `cluster:<nodes>` for a cluster certificate) the
certificate on the newest evidence (validation end, then signing time) is current and
every older one is superseded by it, except that a health record (HEALTHY: a run
that was not an acceptance run) never supersedes an acceptance certificate: a quick
check between acceptance runs says less than the acceptance did. `nodecert revoke`
marks one revoked, with a reason. A certificate the list does not name is still
superseded when the list holds a newer one for its subject: a signer's list need not
be complete for a verifier to learn that a node's newer measurement replaced an older
one.

Pure functions over a `Register`, plus `load`/`save` for the file; verify uses `status`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.certs import signing
from nodecert.certs.intoto import (
    CLUSTER_PREDICATE_TYPE,
    LIST_PREDICATE_TYPE,
    PAYLOAD_TYPE,
    RACK_PREDICATE_TYPE,
    STATEMENT_TYPE,
)
from nodecert.core.errors import NodecertError
from nodecert_node.contract import write_atomic

SCHEMA = "nodecert.revocations/v1"
DEFAULT_NAME = "revocations.intoto.dsse.json"
STATUSES = ("current", "superseded", "revoked")
MAX_LIST = 64 * 1024 * 1024  # bytes: a list of a million certificates is far smaller


class RevocationError(NodecertError):
    """A revocation list that cannot be read, trusted or updated."""


@dataclass(frozen=True)
class Entry:
    """One certificate the signer issued, and whether it still holds."""

    statement_sha256: str
    subject: str          # node:<host> or cluster:<host>,<host>,...
    verdict: str
    validated: str        # when its evidence ended (ISO 8601, UTC)
    issued: str           # when it was signed
    status: str = "current"
    superseded_by: str = ""
    reason: str = ""
    since: str = ""       # when it stopped holding

    def as_dict(self) -> dict[str, str]:
        return {"statement_sha256": self.statement_sha256, "subject": self.subject,
                "verdict": self.verdict, "validated": self.validated,
                "issued": self.issued, "status": self.status,
                "superseded_by": self.superseded_by, "reason": self.reason,
                "since": self.since}


@dataclass
class Register:
    """The list's content: entries by statement digest, the sequence and issue time of
    the signed copy it was read from (0 and "" for a list not written yet)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    sequence: int = 0
    issued: str = ""
    signer: str = ""  # the trusted key id its signature verified with ("" unsigned yet)


def _time(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _order(e: Entry) -> tuple[dt.datetime, dt.datetime]:
    return _time(e.validated), _time(e.issued)


def payload_digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def subject_of(st: dict[str, Any]) -> str:
    """The key certificates supersede each other by: the node, or the cluster's nodes."""
    names = sorted(str(s.get("name", "")) for s in st.get("subject") or []
                   if isinstance(s, dict))
    if st.get("predicateType") == CLUSTER_PREDICATE_TYPE:
        return "cluster:" + ",".join(n.removeprefix("node:") for n in names)
    if st.get("predicateType") == RACK_PREDICATE_TYPE:
        return f"rack:{(st.get('predicate') or {}).get('rack', {}).get('name')}"
    return names[0] if len(names) == 1 else "?:" + ",".join(names)


def entry_for(st: dict[str, Any], payload: bytes) -> Entry:
    """A certificate's entry from its signed Statement and payload bytes."""
    p = st["predicate"]
    validated = (p.get("validity") or {}).get("not_before") or p["validity"]["issued"]
    return Entry(payload_digest(payload), subject_of(st), str(p["verdict"]),
                 str(validated), str(p["validity"]["issued"]))


# A health record (a run that was not an acceptance run, nothing failed) says less than an
# acceptance certificate: it never supersedes one. Anything that found a failure does.
HEALTH_RECORD = "HEALTHY"


def supersedes(newer: Entry, older: Entry) -> bool:
    """Whether `newer` (on newer evidence, same subject) replaces `older`: always, but a
    health record never replaces a certificate that is not one."""
    return _order(newer) > _order(older) and (
        newer.verdict != HEALTH_RECORD or older.verdict == HEALTH_RECORD)


def _replacing(e: Entry, group: list[Entry]) -> Entry | None:
    """The newest entry of the subject's group that supersedes e, if any."""
    found = [o for o in group if o is not e and supersedes(o, e)]
    return max(found, key=_order) if found else None


def register(reg: Register, new: list[Entry], now: dt.datetime) -> Register:
    """The register with `new` added and, per subject, every certificate a newer one
    supersedes marked superseded by the newest such (a revoked one stays revoked; a
    revoked newest still supersedes: its evidence is newer, whatever became of it; a
    health record supersedes only health records). Pure."""
    since = now.isoformat(timespec="seconds")
    entries = dict(reg.entries)
    for e in new:
        entries.setdefault(e.statement_sha256, e)
    by_subject: dict[str, list[Entry]] = {}
    for e in entries.values():
        by_subject.setdefault(e.subject, []).append(e)
    for group in by_subject.values():
        for e in group:
            newest = _replacing(e, group)
            if newest is None or e.status == "revoked":
                continue
            if e.status == "current" or e.superseded_by != newest.statement_sha256:
                entries[e.statement_sha256] = Entry(
                    e.statement_sha256, e.subject, e.verdict, e.validated, e.issued,
                    "superseded", newest.statement_sha256,
                    f"a certificate on newer evidence ({newest.validated}, "
                    f"{newest.verdict}) replaces it", e.since or since)
    return Register(entries, reg.sequence, reg.issued)


def revoke(reg: Register, digest: str, reason: str, now: dt.datetime) -> Register:
    """The register with one certificate revoked (it must be on the list)."""
    if digest not in reg.entries:
        raise RevocationError(f"certificate sha256:{digest} is not on the list",
                              hint="revoke a certificate this signer issued through "
                                   "`certify` with this list")
    if not reason.strip():
        raise RevocationError("a revocation needs a reason", hint="pass --reason TEXT")
    e = reg.entries[digest]
    entries = dict(reg.entries)
    entries[digest] = Entry(e.statement_sha256, e.subject, e.verdict, e.validated, e.issued,
                            "revoked", "", reason.strip(), now.isoformat(timespec="seconds"))
    return Register(entries, reg.sequence, reg.issued)


def status(reg: Register, st: dict[str, Any], payload: bytes) -> tuple[bool, str]:
    """Whether a certificate still holds by the list, and the sentence that says so."""
    digest = payload_digest(payload)
    listed = f"list #{reg.sequence} issued {reg.issued}"
    e = reg.entries.get(digest)
    if e is not None and e.status == "revoked":
        return False, f"REVOKED {e.since}: {e.reason} ({listed})"
    if e is not None and e.status == "superseded":
        return False, f"SUPERSEDED {e.since} by certificate sha256:{e.superseded_by[:16]}...: " \
                      f"{e.reason} ({listed})"
    me = e or entry_for(st, payload)
    newer = [o for o in reg.entries.values() if o.subject == me.subject
             and o.statement_sha256 != digest and supersedes(o, me)]
    if newer:
        n = max(newer, key=_order)
        return False, (f"SUPERSEDED: the list holds a certificate on newer evidence for "
                       f"{me.subject} (validated {n.validated}, {n.verdict}, "
                       f"sha256:{n.statement_sha256[:16]}...) ({listed})")
    if e is None:
        return True, f"not revoked or superseded: not on the {listed}, which names " \
                     f"nothing newer for {me.subject}"
    return True, f"current on the {listed}"


def statement(reg: Register, now: dt.datetime) -> dict[str, Any]:
    """The list as an in-toto Statement: one subject per certificate it names."""
    entries = sorted(reg.entries.values(), key=lambda e: (e.subject, _order(e)))
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": f"certificate:{e.subject}",
                         "digest": {"sha256": e.statement_sha256}} for e in entries],
            "predicateType": LIST_PREDICATE_TYPE,
            "predicate": {"schema": SCHEMA, "sequence": reg.sequence + 1,
                          "issued": now.isoformat(timespec="seconds"),
                          "certificates": [e.as_dict() for e in entries]}}


def _entries(p: dict[str, Any]) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for i, raw in enumerate(p["certificates"]):
        if not isinstance(raw, dict):
            raise ValueError(f"certificate {i + 1} is not an object")
        fields = {k: str(raw.get(k, "")) for k in Entry.__dataclass_fields__}
        if fields["status"] not in STATUSES or len(fields["statement_sha256"]) != 64:
            raise ValueError(f"certificate {i + 1}: status {fields['status']!r} or digest "
                             "is not what a list holds")
        _time(fields["validated"])
        _time(fields["issued"])
        out[fields["statement_sha256"]] = Entry(**fields)
    return out


def parse(envelope: Any, trusted: list[signing.PublicKey], source: str) -> Register:
    """The register a signed list holds, checked against the trusted keys."""
    try:
        ptype, payload, signer = signing.verify_envelope(envelope, trusted)
    except signing.SignatureError as exc:
        raise RevocationError(f"{source}: the revocation list's signature does not verify "
                              f"({exc})", hint="use the list the same signer wrote; never "
                              "a copy someone else edited") from exc
    try:
        st = json.loads(payload)
        p = st["predicate"]
        if ptype != PAYLOAD_TYPE or st.get("predicateType") != LIST_PREDICATE_TYPE \
                or p.get("schema") != SCHEMA:
            raise ValueError(f"predicateType {st.get('predicateType')!r}, not a "
                             "revocation list")
        reg = Register(_entries(p), int(p["sequence"]), str(p["issued"]), signer)
        _time(reg.issued)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RevocationError(f"{source}: not a nodecert revocation list ({exc})",
                              hint=f"pass the {DEFAULT_NAME} that `certify` keeps") from exc
    return reg


def load(path: Path, trusted: list[signing.PublicKey], *, missing_ok: bool = False) -> Register:
    """The list at path (an empty register where there is none yet and missing_ok)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_LIST + 1)
    except FileNotFoundError:
        if missing_ok:
            return Register()
        raise RevocationError(f"{path}: no such revocation list",
                              hint=f"pass the {DEFAULT_NAME} that `certify` keeps") from None
    except OSError as exc:
        raise RevocationError(f"cannot read revocation list {path}: {exc.strerror}") from exc
    if len(raw) > MAX_LIST:
        raise RevocationError(f"{path} is larger than {MAX_LIST >> 20} MiB: not a list")
    try:
        envelope = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeError) as exc:
        raise RevocationError(f"{path} is not JSON ({exc})") from exc
    return parse(envelope, trusted, str(path))


SEEN_SCHEMA = "nodecert.seen-lists/v1"


@dataclass(frozen=True)
class Freshness:
    """What a verifier asks of a list's age: no older than max_age (None: any age), and
    no older than the newest list of the same signer it has seen (kept in `memory`, a
    file of its own; None: no memory)."""

    max_age: dt.timedelta | None = None
    memory: Path | None = None


def _seen(memory: Path) -> dict[str, dict[str, Any]]:
    try:
        with memory.open("rb") as f:
            raw = json.loads(f.read(1 << 20))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RevocationError(f"{memory}: not a record of the lists seen ({exc})",
                              hint="remove it, or pass another file with --seen-lists") from exc
    lists = raw.get("lists") if isinstance(raw, dict) else None
    if not isinstance(lists, dict):
        raise RevocationError(f"{memory}: not a record of the lists seen",
                              hint="remove it, or pass another file with --seen-lists")
    return {str(k): v for k, v in lists.items() if isinstance(v, dict)}


def fresh(reg: Register, now: dt.datetime, policy: Freshness) -> tuple[bool, str]:
    """Whether a list is fresh enough to decide anything: not older than the verifier
    allows, not older (a lower sequence, or the same sequence with other content) than
    one of its signer the verifier saw before: an attacker replaying an older list,
    which still says "current" for a certificate revoked since, is refused."""
    label = f"list #{reg.sequence} issued {reg.issued}"
    if policy.max_age is not None and now - _time(reg.issued) > policy.max_age:
        days = policy.max_age.total_seconds() / 86400
        return False, (f"{label} is older than the {days:g} days allowed: get the signer's "
                       "current list")
    if policy.memory is not None:
        seen = _seen(policy.memory).get(reg.signer)
        if seen is not None:
            seq, issued = int(seen.get("sequence", 0)), str(seen.get("issued", ""))
            if reg.sequence < seq or (reg.sequence == seq and reg.issued != issued):
                return False, (f"{label} is older than list #{seq} issued {issued} of the "
                               f"same signer, seen before ({policy.memory}): a replayed "
                               "list is never applied")
    return True, label


def remember(reg: Register, policy: Freshness) -> None:
    """Record the list as the newest seen of its signer (when it is)."""
    if policy.memory is None or not reg.signer:
        return
    lists = _seen(policy.memory)
    old = lists.get(reg.signer)
    if old is not None and int(old.get("sequence", 0)) >= reg.sequence:
        return
    lists[reg.signer] = {"sequence": reg.sequence, "issued": reg.issued}
    policy.memory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(str(policy.memory), json.dumps({"schema": SEEN_SCHEMA, "lists": lists},
                                                indent=1, sort_keys=True).encode() + b"\n",
                 mode=0o600)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the list's lock file (next to it, 0600): two certify runs never lose each
    other's entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save(path: Path, reg: Register, key: signing.PrivateKey, now: dt.datetime) -> Register:
    """Sign the register as the next list and write it whole (temp + rename)."""
    st = statement(reg, now)
    env = signing.sign_envelope(signing.canonical_json(st), PAYLOAD_TYPE, key)
    write_atomic(str(path), json.dumps(env, indent=1).encode() + b"\n")
    return Register(reg.entries, st["predicate"]["sequence"], st["predicate"]["issued"])


@contextmanager
def updating(path: Path, key: signing.PrivateKey, now: dt.datetime) -> Iterator[list[Entry]]:
    """Lock and read the list before the caller writes its certificates (an existing
    list that does not verify with this key is refused, never overwritten, and nothing
    is written); the entries the caller appends are signed into the list when its block
    ends without an error."""
    with locked(path):
        reg = load(path, [key.public_key()], missing_ok=True)
        new: list[Entry] = []
        yield new
        if new:
            save(path, register(reg, new, now), key, now)


def revoke_file(path: Path, key: signing.PrivateKey, digest: str, reason: str,
                now: dt.datetime) -> Register:
    with locked(path):
        reg = load(path, [key.public_key()])
        return save(path, revoke(reg, digest, reason, now), key, now)


__all__ = [
    "DEFAULT_NAME",
    "LIST_PREDICATE_TYPE",
    "Entry",
    "Freshness",
    "Register",
    "RevocationError",
    "entry_for",
    "fresh",
    "load",
    "parse",
    "payload_digest",
    "register",
    "remember",
    "revoke",
    "revoke_file",
    "save",
    "statement",
    "status",
    "subject_of",
    "updating",
]
