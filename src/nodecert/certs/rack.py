"""The rack certificate: an in-toto Statement whose subjects are every compute tray's
hardware identity and every NVLink switch tray's (serial and model as its Redfish
service reports them), with the rack's rules, the trays' domain checks and the
infrastructure's readings as the predicate; DSSE-signed like a node certificate,
verified offline the same way (`nodecert verify`), rendered as HTML.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from nodecert import __version__
from nodecert.certs import html as report_html
from nodecert.certs.certify import (
    DEFAULT_MAX_AGE_DAYS,
    NOT_READY,
    READY,
    RunError,
    measured_end,
    validity,
)
from nodecert.certs.cluster import cabling_of, issue, judged_results, passed, reasons_of
from nodecert.certs.identity import certificate_identity, identity_digest
from nodecert.certs.intoto import RACK_PREDICATE_TYPE, STATEMENT_TYPE
from nodecert.certs.signing import PrivateKey, canonical_json
from nodecert.core import checks
from nodecert.runs.layout import RunDir, RunDirError
from nodecert.runs.records import GroupRecord, read_rack_record

DEFAULT_VALID_DAYS = 30


def switch_identity(comp: dict[str, Any]) -> dict[str, Any] | None:
    """A switch tray's identity from its last reading; None when it was never read."""
    last = next((s for s in reversed(comp["samples"]) if s is not None), None)
    if last is None or not last.get("serial"):
        return None
    return {"name": comp["name"], "serial": last["serial"], "model": last.get("model") or ""}


def switch_digest(ident: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(ident)).hexdigest()


def _iso(t: Any) -> str | None:
    if not isinstance(t, (int, float)) or t <= 0:
        return None
    return dt.datetime.fromtimestamp(float(t), dt.UTC).isoformat(timespec="seconds")


def _latest(comp: dict[str, Any]) -> dict[str, Any] | None:
    return next((s for s in reversed(comp["samples"]) if s is not None), None)


def statement(rec: GroupRecord, *, issued: dt.datetime,
              valid_days: int = DEFAULT_VALID_DAYS,
              max_age_days: float = DEFAULT_MAX_AGE_DAYS) -> dict[str, Any]:
    """RunError when the run is too old, or a tray has no identity: every compute tray is
    a subject, named by its identity."""
    data = rec.data
    ended = measured_end(f"rack run {rec.run_id}", rec.finished, issued, max_age_days,
                         again="run `nodecert rack validate` again")
    rack = data["rack"]
    missing = [h for h in rack["trays"] if not (data["trays"].get(h) or {}).get("identity")]
    if missing:
        raise RunError(f"no hardware identity for {', '.join(missing)} in the rack run: a "
                       "rack certificate names every compute tray by its identity",
                       hint="bring the trays back and run `nodecert rack validate` again")
    trays = {h: data["trays"][h] for h in rack["trays"]}
    switches = {c["name"]: switch_identity(c) for c in data["components"]
                if c["kind"] == "switch_tray"}
    reasons = reasons_of(rec)
    # A rack is ready only once its NVLink domain has carried traffic: a run without the
    # domain's jobs proves the wiring, not the domain.
    judged = {r.check for r in rec.results}
    load = checks.played_by("domain-load")
    unloaded = [c for c in load if c not in judged]
    if unloaded:
        reasons.append(next(
            (n for n in data.get("not_judged") or [] if n.startswith(unloaded[0])),
            f"{', '.join(unloaded)}: the NVLink domain was not measured under load"))
    verdict = READY if passed(rec) and not unloaded else NOT_READY
    predicate = {
        "schema": "nodecert.rack-readiness/v1", "verdict": verdict, "reasons": reasons,
        "simulated": bool(data["simulated"]), "run_id": data["run_id"], "rack": rack,
        "validated": {"started": _iso(data.get("started")),
                      "finished": _iso(data.get("finished"))},
        "validity": validity(issued, ended, valid_days, max_age_days),
        "trays": {h: {"identity": certificate_identity(t["identity"]),
                      "checks": t.get("checks") or {}, "fabric": t.get("fabric")}
                  for h, t in trays.items()},
        "switch_trays": switches,
        # the scale-out fabric against the cable plan (its digest binds the certificate)
        "cabling": cabling_of(rec.results),
        "infrastructure": [{"kind": c["kind"], "name": c["name"], "address": c["address"],
                            "samples": len(c["samples"]), "errors": c["errors"],
                            "latest": _latest(c)} for c in data["components"]],
        "results": judged_results(rec, ("check", "verdict", "summary", "findings", "value",
                                        "facts")),
        "not_judged": data.get("not_judged") or [],
        "tool": {"name": "nodecert", "version": __version__},
    }
    subjects = [{"name": f"node:{h}", "digest": {"sha256": identity_digest(t["identity"])}}
                for h, t in trays.items()]
    subjects += [{"name": f"switch-tray:{n}", "digest": {"sha256": switch_digest(i)}}
                 for n, i in sorted(switches.items()) if i is not None]
    return {"_type": STATEMENT_TYPE, "subject": subjects,
            "predicateType": RACK_PREDICATE_TYPE, "predicate": predicate}


def certify_rack(run_dir: Path, key: PrivateKey, *, out_dir: Path | None = None,
                 now: dt.datetime | None = None, valid_days: int = DEFAULT_VALID_DAYS,
                 max_age_days: float = DEFAULT_MAX_AGE_DAYS,
                 revocations: Path | None = None,
                 rendering: report_html.Rendering = report_html.PLAIN
                 ) -> tuple[Path, Path, str]:
    """(envelope, HTML, verdict) for a rack run; both files whole or not at all."""
    try:
        rec = read_rack_record(run_dir)
    except RunDirError as exc:
        raise RunError(exc.what, hint=exc.hint) from exc
    issued = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    st = statement(rec, issued=issued, valid_days=valid_days, max_age_days=max_age_days)
    return issue(st, key, out_dir or RunDir(run_dir).reports, "rack", report_html.rack_page,
                 revocations=revocations, issued=issued, rendering=rendering)


def rack_problems(st: dict[str, Any]) -> list[str]:
    """What keeps a signed payload from being a nodecert rack Statement."""
    p = st.get("predicate")
    need = ("schema", "verdict", "reasons", "simulated", "validity", "rack", "trays",
            "switch_trays", "results", "tool")
    if not isinstance(p, dict) or any(k not in p for k in need):
        return [f"predicate lacks {', '.join(k for k in need if k not in (p or {}))}"]
    subj = st.get("subject")
    if not (isinstance(subj, list) and subj and all(
            isinstance(s, dict) and isinstance(s.get("digest"), dict)
            and str(s.get("name", "")).startswith(("node:", "switch-tray:")) for s in subj)):
        return ["subjects must be trays and switch trays with sha256 digests"]
    return []


def subject_problems(st: dict[str, Any]) -> list[str]:
    """Each subject's digest against the identity the predicate carries for it, and the
    subjects against the rack's trays."""
    p = st["predicate"]
    problems = []
    for s in st["subject"]:
        kind, _, name = str(s["name"]).partition(":")
        ident = (p["trays"].get(name) or {}).get("identity") if kind == "node" \
            else p["switch_trays"].get(name)
        digest = None if ident is None else identity_digest(ident) if kind == "node" \
            else switch_digest(ident)
        if digest is None:
            problems.append(f"{s['name']}: no identity in the predicate")
        elif digest != s["digest"].get("sha256"):
            problems.append(f"{s['name']}: digest does NOT match its identity in the "
                            "predicate")
    trays = sorted(str(s["name"])[5:] for s in st["subject"] if s["name"].startswith("node:"))
    if trays != sorted(p["rack"].get("trays") or []):
        problems.append("the subjects and the rack's compute trays differ")
    return problems


__all__ = ["certify_rack", "rack_problems", "statement", "subject_problems",
           "switch_digest", "switch_identity"]
