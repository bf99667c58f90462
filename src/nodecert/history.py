"""A node's results over time, from the run directories (`nodecert history`)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from nodecert.drift import metrics, record_of
from nodecert.errors import NodecertError


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
        rows.append({"when": dt.datetime.fromtimestamp(started, dt.UTC).strftime(
                         "%Y-%m-%d %H:%M:%S"), "t": started,
                     "run_id": data.get("run_id"), "suite": data.get("suite"),
                     "verdict": data.get("verdict"), "simulated": data.get("simulated"),
                     "failing": [f"{r['check']}: {r['summary']}" for r in data.get("results", [])
                                 if r["verdict"] in ("FAIL", "ERROR")],
                     "figures": figures, "results": str(path)})
    if not rows:
        raise HistoryError(f"no run under {runs_dir} holds host {host!r}",
                           hint="pass --runs-dir where `nodecert validate` keeps its runs")
    return sorted(rows, key=lambda r: r["t"])


__all__ = ["HistoryError", "history"]
