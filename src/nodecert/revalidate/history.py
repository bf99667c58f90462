"""A node's results over time, from the run directories (`nodecert history`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.revalidate.drift import metrics, record_of
from nodecert.runs.records import host_history
from nodecert_node.contract import Verdict


class HistoryError(NodecertError):
    """No run holds the host."""


def history(runs_dir: Path, host: str) -> list[dict[str, Any]]:
    rows = []
    for rec in host_history(runs_dir, host):  # a run being written or damaged: skipped
        started = rec.started or rec.path.stat().st_mtime
        figures = {name.replace("storage ", ""): f"{v:g}{unit if unit != 'IOPS' else ''}"
                   for name, (v, unit, _) in metrics(record_of(rec.data)).items()}
        cert = rec.run.certificate(host)
        rows.append({"certificate": str(cert) if cert.is_file() else None,
                     "finished": rec.finished or started,
                     "when": dt.datetime.fromtimestamp(started, dt.UTC).strftime(
                         "%Y-%m-%d %H:%M:%S"), "t": started,
                     "run_id": rec.run_id, "suite": rec.suite,
                     "verdict": rec.verdict.name if rec.verdict is not None else None,
                     "simulated": rec.simulated,
                     "failing": [f"{r.check}: {r.summary}" for r in rec.results
                                 if r.verdict >= Verdict.FAIL],
                     "figures": figures, "results": str(rec.path)})
    _mark_certificates(rows, host)
    if not rows:
        raise HistoryError(f"no run under {runs_dir} holds host {host!r}",
                           hint="pass --runs-dir where `nodecert validate` keeps its runs")
    return sorted(rows, key=lambda r: r["t"])


def _mark_certificates(rows: list[dict[str, Any]], host: str) -> None:
    """The certificate on the newest evidence is current; every older one is superseded."""
    certified = sorted((r for r in rows if r["certificate"]), key=lambda r: r["finished"])
    for r in rows:
        r["certificate_status"] = "" if not r["certificate"] else "superseded"
    if certified:
        certified[-1]["certificate_status"] = "current"


__all__ = ["HistoryError", "history"]
