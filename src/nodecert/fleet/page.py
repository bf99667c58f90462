"""The fleet page: one self-contained HTML file (no script, no network asset) with each
metric's distribution across the fleet, its outliers marked, the nodes judged outliers
against the baseline, and the nodes whose figures got worse run after run (each such
figure plotted over those runs).

Everything shown from a node is escaped (it is untrusted text).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from nodecert.certs.svgplot import escape, histogram, line_chart
from nodecert.fleet.baseline import Baseline
from nodecert.fleet.samples import Sample, gpu_model, load_policy, policy_for, samples, where
from nodecert.runs.records import HostRecord
from nodecert_node.contract import Result

MAX_TREND_PLOTS = 4  # per node: the table lists them all
CSS = """body{font-family:sans-serif;margin:1.5em;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left;font-size:13px;overflow-wrap:anywhere}.FAIL{color:#b00;font-weight:bold}
.WARN{color:#a60}.sim{background:#fde;padding:.5em;border:1px solid #c39}
svg{max-width:100%;height:auto}"""


@dataclass
class FleetPage:
    """What the page shows: the newest record per host, the baseline judged against, each
    host's fleet results (peers, trend)."""
    records: list[HostRecord]
    baseline: Baseline
    baseline_note: str  # where the baseline came from (a signed file, or these runs)
    judged: dict[str, list[Result]] = field(default_factory=dict)
    extra: dict[str, list[Sample]] = field(default_factory=dict)  # from cluster pairings


def _rows(page: FleetPage) -> tuple[list[list[str]], list[list[str]]]:
    outliers, trends = [], []
    for host, results in sorted(page.judged.items()):
        for r in results:
            v = r.value if isinstance(r.value, dict) else {}
            if r.check == "fleet.peers":
                outliers += [[host, str(o["metric"]), str(o["label"]), f"{o['value']:g}",
                              f"{o['median']:g}", str(o["deviations"]),
                              f"{o['fraction']:.1%}", str(o["verdict"])]
                             for o in v.get("outliers") or []]
            elif r.check == "fleet.trend":
                trends += [[host, str(t["metric"]), str(t["label"]),
                            " -> ".join(f"{x:g}" for x in t["values"]) + f" {t['unit']}",
                            ", ".join(t["runs"])] for t in v.get("trends") or []]
    return outliers, trends


def _table(head: list[str], rows: list[list[str]], verdict_col: int | None = None) -> str:
    if not rows:
        return "<p>none</p>"
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cls = f' class="{escape(row[verdict_col])}"' if verdict_col is not None else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table>"


def render(page: FleetPage, *, now: dt.datetime | None = None) -> str:
    policy = load_policy()
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    units: dict[tuple[str, str], str] = {}
    for rec in page.records:
        model = gpu_model(rec.results) or "unknown"
        for s in [*samples(rec.results), *page.extra.get(rec.host, [])]:
            if policy_for(s.metric, policy) is None:
                continue
            values[(model, s.metric)].append(s.value)
            units[(model, s.metric)] = s.unit
    outliers, trends = _rows(page)
    marked: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    model_of = {rec.host: gpu_model(rec.results) or "unknown" for rec in page.records}
    for row in outliers:
        marked[(model_of.get(row[0], "unknown"), row[1])].append(
            (f"{row[0]} {row[2]}".strip(), float(row[3])))
    b = page.baseline
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    sim = any(r.simulated for r in page.records) or b.simulated
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>nodecert fleet</title><style>{CSS}</style></head><body>",
             f"<h1>Fleet: {len(page.records)} nodes</h1>",
             f"<p>Made {escape(when)}. Baseline {escape(b.version)} ({escape(page.baseline_note)};"
             f" {b.hosts} healthy nodes, built {escape(b.created)}). A figure is an outlier "
             "when it is beyond the fleet's robust spread and clearly worse than the median "
             "(thresholds fleet.* in the run's profile).</p>"]
    if sim:
        parts.append('<p class="sim">SIMULATED: figures measured on simulated or emulated '
                     "GPUs; they prove the software path, not the hardware.</p>")
    parts.append(f"<h2>Outliers against their peers ({len(outliers)})</h2>")
    parts.append(_table(["node", "metric", "GPU / pair", "value", "fleet median",
                         "robust deviations", "worse by", "verdict"], outliers, 7))
    parts.append(f"<h2>Trends: worse at each of the last runs ({len(trends)})</h2>")
    parts.append(_table(["node", "metric", "GPU / pair", "figures, oldest first", "runs"],
                        trends))
    for host, results in sorted(page.judged.items()):
        for r in results:
            v = r.value if isinstance(r.value, dict) and r.check == "fleet.trend" else {}
            for t in (v.get("trends") or [])[:MAX_TREND_PLOTS]:
                label = f" {where(str(t['label']))}" if t["label"] else ""
                parts.append(line_chart(
                    f"{host}: {t['metric']}{label}, last runs",
                    [(str(t["metric"]), [(float(k + 1), float(x))
                                          for k, x in enumerate(t["values"])])],
                    xlabel="run (oldest first)", ylabel=str(t["unit"]), kind="trend"))
    parts.append("<h2>Distributions</h2>")
    for (model, metric), vs in sorted(values.items()):
        st = b.groups.get(model, {}).get(metric)
        pol = policy_for(metric, policy)
        title = f"{model}: {pol.title if pol else metric}"
        if metric.startswith("storage "):
            title += f" ({metric.removeprefix('storage ')})"
        parts.append(histogram(title, vs, unit=units[(model, metric)],
                               marked=marked.get((model, metric), []),
                               median=st.median if st else None))
    parts.append("</body></html>\n")
    return "".join(parts)


def summary(page: FleetPage) -> dict[str, Any]:
    outliers, trends = _rows(page)
    return {"nodes": len(page.records), "baseline": page.baseline.version,
            "outliers": [dict(zip(["host", "metric", "label", "value", "median", "deviations",
                                   "fraction", "verdict"], r, strict=True)) for r in outliers],
            "trends": [dict(zip(["host", "metric", "label", "figures", "runs"], r, strict=True))
                       for r in trends]}


__all__ = ["FleetPage", "render", "summary"]
