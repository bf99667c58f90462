"""A node's results over time, from the run directories (`nodecert history`)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.revalidate.drift import metrics, record_of


class HistoryError(NodecertError):
    """No run holds the host."""


def history(runs_dir: Path, host: str) -> list[dict[str, Any]]:
    rows = []
    for path in runs_dir.glob(f"*/{host}/results.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a run being written or damaged: not history
        started = float(data.get("started") or 0) or path.stat().st_mtime
        figures = {name.replace("storage ", ""): f"{v:g}{unit if unit != 'IOPS' else ''}"
                   for name, (v, unit, _) in metrics(record_of(data)).items()}
        cert = path.parent.parent / "reports" / f"{host}.intoto.dsse.json"
        rows.append({"certificate": str(cert) if cert.is_file() else None,
                     "finished": float(data.get("finished") or 0) or started,
                     "when": dt.datetime.fromtimestamp(started, dt.UTC).strftime(
                         "%Y-%m-%d %H:%M:%S"), "t": started,
                     "run_id": data.get("run_id"), "suite": data.get("suite"),
                     "verdict": data.get("verdict"), "simulated": data.get("simulated"),
                     "failing": [f"{r['check']}: {r['summary']}" for r in data.get("results", [])
                                 if r["verdict"] in ("FAIL", "ERROR")],
                     "figures": figures, "results": str(path)})
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
