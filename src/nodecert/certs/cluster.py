"""The cluster certificate: an in-toto Statement whose subjects are the nodes' hardware
identities and whose predicate holds the fabric results, the pairing matrix, the rails
and the collective figures; signed in a DSSE envelope like a node certificate, verified
offline the same way (`nodecert verify`), rendered as HTML with the pairing heat-map.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodecert import __version__
from nodecert.certs import html as report_html
from nodecert.certs import revocations as revlist
from nodecert.certs.certify import (
    DEFAULT_MAX_AGE_DAYS,
    NOT_READY,
    READY,
    RunError,
    listing,
    measured_end,
    validity,
)
from nodecert.certs.identity import certificate_identity, identity_digest
from nodecert.certs.intoto import CLUSTER_PREDICATE_TYPE, PAYLOAD_TYPE, STATEMENT_TYPE
from nodecert.certs.signing import PrivateKey, canonical_json, keyid, sign_envelope
from nodecert.core import checks
from nodecert.runs.layout import CERT_SUFFIX, RunDir, RunDirError
from nodecert.runs.records import GroupRecord, read_cluster_record
from nodecert_node.contract import Result, Verdict, write_atomic

DEFAULT_VALID_DAYS = 30


def matrix(data: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """node -> partner -> {busbw, ok}: the pairing heat-map's cells."""
    out: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in data["nodes"]}
    for p in data["pairs"]:
        a, b = p["nodes"]
        cell = {"busbw": p["busbw"], "ok": p["ok"], "error": p["error"]}
        out[a][b] = out[b][a] = cell
    return out


def rail_table(data: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """node -> rail -> the best ib_write_bw (Gb/s) it reached in any pairing."""
    out: dict[str, dict[str, float | None]] = {n: {} for n in data["nodes"]}
    for p in data["pairs"]:
        for node in p["nodes"]:
            for dev, v in (p.get("rails") or {}).items():
                have = out[node].get(dev)
                out[node][dev] = v if have is None else (have if v is None else max(have, v))
    return out


def _iso(t: Any) -> str | None:
    if not isinstance(t, (int, float)) or t <= 0:
        return None
    return dt.datetime.fromtimestamp(float(t), dt.UTC).isoformat(timespec="seconds")


RESULT_KEYS = ("check", "verdict", "summary", "findings", "value", "unit", "thresholds")


def judged_results(rec: GroupRecord, keys: tuple[str, ...] = RESULT_KEYS) -> list[
        dict[str, Any]]:
    """The run's results as a group certificate holds them (`keys` of each)."""
    return [{k: d[k] for k in keys} for d in (r.as_dict() for r in rec.results)]


def reasons_of(rec: GroupRecord) -> list[str]:
    """Why a group is not ready: each result that FAILed or ERRORed."""
    return [f"{r.check}: {r.verdict.name} {r.summary}" for r in rec.results
            if r.verdict >= Verdict.FAIL]


def passed(rec: GroupRecord) -> bool:
    """The run's verdict, and every result it holds, is PASS or WARN (a verdict it does
    not hold, or a damaged result, is neither)."""
    return rec.outcome <= Verdict.WARN


def statement(rec: GroupRecord, *, issued: dt.datetime,
              valid_days: int = DEFAULT_VALID_DAYS,
              max_age_days: float = DEFAULT_MAX_AGE_DAYS) -> dict[str, Any]:
    """Raises RunError when the run records no end, or ended more than max_age_days
    before `issued`: validity runs from the measurement, never from the signature."""
    data = rec.data
    ended = measured_end(f"cluster run {rec.run_id}", rec.finished, issued, max_age_days,
                         again="run `nodecert cluster validate` again")
    missing = [n for n in data["nodes"] if not (data["fabric"].get(n) or {}).get("identity")]
    if missing:
        raise RunError(f"no hardware identity for {', '.join(missing)} in the run: a "
                       "cluster certificate names every node by its identity",
                       hint="re-run `nodecert cluster validate` once the nodes answer")
    idents = {n: data["fabric"][n]["identity"] for n in data["nodes"]}
    verdict = READY if passed(rec) else NOT_READY
    predicate = {
        "schema": "nodecert.cluster-readiness/v1", "verdict": verdict,
        "reasons": reasons_of(rec),
        "simulated": bool(data["simulated"]), "run_id": data["run_id"],
        "engine": data["engine"], "launch_host": data["launch_host"],
        "validated": {"started": _iso(data.get("started")),
                      "finished": _iso(data.get("finished"))},
        "validity": validity(issued, ended, valid_days, max_age_days),
        "nodes": {n: {"identity": certificate_identity(idents[n]),
                      "fabric": {k: data["fabric"][n][k]
                                 for k in ("check", "verdict", "summary", "findings")}}
                  for n in data["nodes"]},
        "expectation": data["expectation"], "pairs": data["pairs"],
        "matrix": matrix(data), "rails": rail_table(data), "isolation": data["isolation"],
        "allreduce": data["allreduce"], "bisection": data["bisection"],
        "culprits": data["culprits"],
        # efficiency against GPUs (1, one node, all nodes) and what it was judged by
        "scaling": {k: (data.get("scaling") or {}).get(k) for k in ("value", "thresholds",
                                                                     "facts")}
        if data.get("scaling") else None,
        "results": judged_results(rec),
        "cabling": cabling_of(rec.results),
        "tool": {"name": "nodecert", "version": __version__},
    }
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": f"node:{n}", "digest": {"sha256": identity_digest(idents[n])}}
                        for n in data["nodes"]],
            "predicateType": CLUSTER_PREDICATE_TYPE, "predicate": predicate}


def cabling_of(results: list[Result]) -> dict[str, Any] | None:
    """The cable plan the fabric was judged against (its digest binds the certificate to
    that plan) and what each planned link was found as; None when no plan was given."""
    r = checks.by_role(results, "cabling")
    if not isinstance(r, Result):
        return None
    facts = r.facts
    return {"verdict": r.verdict.name, "plan_sha256": facts.get("plan_sha256"),
            "plan_lines": facts.get("plan_lines"), "as_planned": facts.get("ok_lines"),
            "findings": facts.get("findings", []), "links": facts.get("links", [])}


def certify_cluster(run_dir: Path, key: PrivateKey, *, out_dir: Path | None = None,
                    now: dt.datetime | None = None,
                    valid_days: int = DEFAULT_VALID_DAYS,
                    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
                    revocations: Path | None = None,
                    rendering: report_html.Rendering = report_html.PLAIN
                    ) -> tuple[Path, Path, str]:
    """(envelope, HTML, verdict) for a cluster run; both files whole or not at all.
    With `revocations`, the certificate is entered on that signed list (older ones for
    the same nodes superseded)."""
    try:
        rec = read_cluster_record(run_dir)
    except RunDirError as exc:
        raise RunError(exc.what, hint=exc.hint) from exc
    if not rec.measured:
        raise RunError(f"{run_dir}: the cluster run stopped before its jobs ("
                       f"{'; '.join(rec.data.get('problems', [])) or 'no results'}): nothing "
                       "to certify", hint="fix what it says and run `cluster validate` again")
    issued = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    st = statement(rec, issued=issued, valid_days=valid_days, max_age_days=max_age_days)
    return issue(st, key, out_dir or RunDir(run_dir).reports, "cluster",
                 report_html.cluster_page, revocations=revocations, issued=issued,
                 rendering=rendering)


def issue(st: dict[str, Any], key: PrivateKey, out: Path, stem: str,
          page_of: Callable[..., str], *, revocations: Path | None,
          issued: dt.datetime,
          rendering: report_html.Rendering = report_html.PLAIN
          ) -> tuple[Path, Path, str]:
    """Sign a group certificate (cluster, rack) and write it with its page, both whole or
    not at all, entered on the revocation list when one is given."""
    env = sign_envelope(canonical_json(st), PAYLOAD_TYPE, key)
    out.mkdir(parents=True, exist_ok=True)
    env_path, html_path = out / f"{stem}{CERT_SUFFIX}", out / f"{stem}.html"
    blob = json.dumps(env, indent=1).encode() + b"\n"
    text = page_of(st, envelope_name=env_path.name, keyid=keyid(key.public_key()),
                   lang=rendering.lang)
    pdf = report_html.pdf_of(text) if rendering.pdf else None  # before anything is written
    with listing(revocations, key, issued) as listed:
        write_atomic(str(env_path), blob)
        write_atomic(str(html_path), text.encode())
        if pdf is not None:
            write_atomic(str(out / f"{stem}.pdf"), pdf)
        listed.append(revlist.entry_for(st, canonical_json(st)))
    return env_path, html_path, st["predicate"]["verdict"]


def cluster_problems(st: dict[str, Any]) -> list[str]:
    """What keeps a signed payload from being a nodecert cluster Statement."""
    p = st.get("predicate")
    need = ("schema", "verdict", "reasons", "simulated", "validity", "nodes", "pairs",
            "results", "tool")
    if not isinstance(p, dict) or any(k not in p for k in need):
        return [f"predicate lacks {', '.join(k for k in need if k not in (p or {}))}"]
    subj = st.get("subject")
    if not (isinstance(subj, list) and subj and all(
            isinstance(s, dict) and isinstance(s.get("digest"), dict)
            and str(s.get("name", "")).startswith("node:") for s in subj)):
        return ["subjects must be nodes with sha256 digests"]
    return []


def subject_problems(st: dict[str, Any]) -> list[str]:
    """Each subject's digest against the identity the predicate carries for it."""
    nodes = st["predicate"]["nodes"]
    problems = []
    for s in st["subject"]:
        name = str(s["name"])[5:]
        ident = (nodes.get(name) or {}).get("identity")
        if ident is None:
            problems.append(f"{name}: no identity in the predicate")
        elif identity_digest(ident) != s["digest"].get("sha256"):
            problems.append(f"{name}: digest does NOT match its identity in the predicate")
    if sorted(str(s["name"])[5:] for s in st["subject"]) != sorted(nodes):
        problems.append("the subjects and the predicate's nodes differ")
    return problems


__all__ = ["CLUSTER_PREDICATE_TYPE", "certify_cluster", "cluster_problems", "issue", "matrix",
           "rail_table", "statement", "subject_problems"]
