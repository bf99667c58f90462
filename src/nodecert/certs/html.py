"""Human-readable reports: one self-contained HTML page per node and a fleet index.

Rendered from the signed Statement itself (what the page shows is what was
signed), with jinja2 autoescaping and inline SVG plots: no scripts, fonts or
images from the network. Simulated runs are marked at the top and bottom of
every page.
"""

from __future__ import annotations

import importlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from nodecert import __version__
from nodecert.certs import readable as readable_values
from nodecert.certs import svgplot
from nodecert.certs.cablingdraw import cabling_grid, node_order
from nodecert.certs.i18n import DEFAULT, ENGLISH, N_, Voice, gettext_for, voice
from nodecert.core import checks
from nodecert.core.textsafe import clean
from nodecert_node.contract import all_figures

SIMULATED_TEXT = N_("these results were measured on nodecert's simulated GPUs, not on real "
                    "hardware. They prove the software path, not the node.")


# The words a page shows for a verdict and a kind (the data attributes keep the signed
# values: tests and scripts read those).
_VERDICT_WORDS = {"READY": N_("READY"), "NOT READY": N_("NOT READY"), "HEALTHY": N_("HEALTHY"),
                  "PASS": N_("PASS"),
                  "WARN": N_("WARN"), "FAIL": N_("FAIL"), "ERROR": N_("ERROR")}
_KIND_WORDS = {"node": N_("node"), "cluster": N_("cluster"), "rack": N_("rack")}
# The GPUs' attestation as the certificate states it, and each verification step's state.
_ATTEST_WORDS = {"verified": N_("verified"), "not verified here": N_("not verified here"),
                 "not attested": N_("not attested"), "refused": N_("refused"),
                 "ok": N_("ok"), "failed": N_("failed"), "not checked": N_("not checked")}
_ATTEST_STEPS = {"report": N_("report"), "certificate_chain": N_("certificate chain"),
                 "report_signature": N_("report signature"), "driver_rim": N_("driver RIM"),
                 "vbios_rim": N_("VBIOS RIM"), "measurements": N_("measurements"),
                 "revocation": N_("revocation")}


def _env(lang: str = DEFAULT) -> jinja2.Environment:
    tr = gettext_for(lang)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.i18n"],
                             # node text is untrusted: no control characters reach a page
                             # (Markup is the page's own, e.g. the SVG plots: kept whole)
                             finalize=lambda v: v if isinstance(v, markupsafe.Markup)
                             else clean(v) if isinstance(v, str) else v)
    env.install_gettext_translations(tr, newstyle=True)  # type: ignore[attr-defined]
    env.filters["verdict"] = lambda v: tr.gettext(_VERDICT_WORDS[v]) \
        if v in _VERDICT_WORDS else v
    env.filters["kind"] = lambda k: tr.gettext(_KIND_WORDS[k]) if k in _KIND_WORDS else k
    env.filters["attested"] = lambda w: tr.gettext(_ATTEST_WORDS[w]) \
        if w in _ATTEST_WORDS else w
    env.filters["attest_step"] = lambda w: tr.gettext(_ATTEST_STEPS[w]) \
        if w in _ATTEST_STEPS else w
    env.globals["html_lang"] = lang.replace("_", "-")
    return env


Tr = Voice
_same = ENGLISH


@dataclass(frozen=True)
class Rendering:
    """How certificates are rendered for people: the language, and a PDF beside each
    page."""

    lang: str = DEFAULT
    pdf: bool = False


PLAIN = Rendering()  # English, no PDF


def pdf_of(page: str) -> bytes:
    """The page as PDF. The renderer needs Pango, a system library: it is loaded only
    when a PDF is asked for, so a controller without it still certifies."""
    render: Callable[[str], bytes] = importlib.import_module("nodecert.certs.pdf").render
    return render(page)


def scaling_chart(r: dict[str, Any] | None, tr: checks.Voice = _same) -> str:
    """Efficiency against GPUs (load.scaling's or cluster.scaling's curve), beside linear."""
    curve = ((r or {}).get("facts") or {}).get("curve") or []
    try:
        pts = [(float(g), float(e)) for g, e in curve]
    except (TypeError, ValueError):  # from a node: a malformed curve is not drawn
        return ""
    if len(pts) < 2:
        return ""
    return svgplot.line_chart(
        tr("Scaling efficiency vs GPUs (training throughput / GPUs x one GPU alone)"),
        [(tr("measured"), pts), (tr("linear"), [(x, 1.0) for x, _ in pts])],
        xlabel="GPUs", ylabel=tr("efficiency"), kind="scaling")


def plots(p: dict[str, Any], tr: Tr = _same) -> list[str]:
    """The charts people would rather look at than read, where the run has the data: each
    check's own, as it declares them (nodecert.core.checks)."""
    return checks.plots(p, tr)


def shown(r: dict[str, Any], tr: Tr = _same) -> dict[str, Any]:
    """A result's figures for the page: labelled lines, how many more the evidence holds,
    and the evidence itself (the signed value, indented)."""
    got, more = readable_values.lines(r.get("value"), r.get("unit"), tr)
    raw = json.dumps(r.get("value"), indent=1, sort_keys=True, ensure_ascii=False)
    return {"lines": got, "more": more,
            "raw": clean(raw if len(raw) <= 20000 else raw[:20000] + "\n...")}


def proven(results: list[dict[str, Any]], tr: Tr = _same) -> str:
    """What the run proved, counted: '14 checks: 13 passed, 1 failed'."""
    counts = Counter(r["verdict"] for r in results)
    words = [("PASS", N_("%(num)d passed")), ("WARN", N_("%(num)d passed with a warning")),
             ("FAIL", N_("%(num)d failed")),
             ("ERROR", N_("%(num)d could not be judged (error)"))]
    parts = [tr(w) % {"num": counts[v]} for v, w in words if counts.get(v)]
    parts += [f"{n} {clean(str(v))[:20]}" for v, n in counts.items()
              if v not in dict(words)]
    return (tr("%(num)d checks:") % {"num": len(results)} + " " + ", ".join(parts)
            if parts else tr("no checks"))


def node_page(statement: dict[str, Any], *, envelope_name: str, keyid: str,
              lang: str = DEFAULT) -> str:
    p = statement["predicate"]
    warns = sum(1 for r in p["results"] if r["verdict"] == "WARN")
    tr = voice(lang)
    return _env(lang).get_template("node.html.j2").render(
        readable=lambda r: shown(r, tr), proven=proven(p["results"], tr),
        number=lambda v: tr.localize(readable_values.number(v)),
        margins=readable_values.closest_to_floor(p["results"], tr=tr),
        energy=energy(p, tr),
        p=p, subject=statement["subject"][0], simulated=p["simulated"],
        simulated_text=tr(SIMULATED_TEXT), plots=plots(p, tr), warns=warns,
        envelope_name=envelope_name, keyid=keyid, tool_version=__version__)


def _shade(cell: dict[str, Any] | None, floor: float) -> str:
    if not cell:
        return "#f5f5f5"
    if cell.get("error") or cell.get("busbw") is None:
        return "#d6c8f0"
    ratio = max(0.0, min(1.0, float(cell["busbw"]) / floor)) if floor > 0 else 1.0
    # red below the expectation, green at or above it; the shade says how far below
    return "#c3e6cb" if cell.get("ok") else f"hsl(0, 70%, {90 - 40 * (1 - ratio):.0f}%)"


def cluster_page(statement: dict[str, Any], *, envelope_name: str, keyid: str,
                 lang: str = DEFAULT) -> str:
    """The cluster certificate as a page: stages, pairing heat-map, per-rail table."""
    p = statement["predicate"]
    busbw_floor = float(p["expectation"]["busbw"]["value"])
    rail_floor = float(p["expectation"]["rail"]["value"])
    tr = voice(lang)
    return _env(lang).get_template("cluster.html.j2").render(
        p=p, nodes=sorted(p["nodes"], key=node_order), subjects=statement["subject"],
        simulated=p["simulated"], simulated_text=tr(SIMULATED_TEXT),
        shade=lambda c: _shade(c, busbw_floor),
        scaling=scaling_chart(p.get("scaling"), tr),
        cabling=cabling_grid(p.get("cabling"), tr),
        rail_shade=lambda v: _shade(None if v is None else {"busbw": v, "ok": v >= rail_floor},
                                    rail_floor),
        envelope_name=envelope_name, keyid=keyid, tool_version=__version__)


def rack_page(statement: dict[str, Any], *, envelope_name: str, keyid: str,
              lang: str = DEFAULT) -> str:
    """The rack certificate as a page: the rules, every tray in its NVLink domain, the
    switch trays, the infrastructure's latest readings, the firmware across the domain."""
    p = statement["predicate"]
    firmware = ((checks.by_role(p["results"], "rack-firmware") or {}).get("facts")
                or {}).get("firmware") or {}
    tr = voice(lang)
    return _env(lang).get_template("rack.html.j2").render(
        p=p, trays=sorted(p["trays"], key=node_order), subjects=statement["subject"],
        firmware=firmware, heatmap="".join(checks.plots(p, tr, page="rack")),
        cabling=cabling_grid(p.get("cabling"), tr),
        simulated=p["simulated"], simulated_text=tr(SIMULATED_TEXT),
        envelope_name=envelope_name, keyid=keyid, tool_version=__version__)


def key_figures(p: dict[str, Any]) -> dict[str, str]:
    """The fleet page's columns, from the same headline figures drift and metrics use."""
    figs = all_figures(p["results"])
    gemm = [f.value for n, f in figs.items() if n.startswith("gemm_tflops{")]
    per_w = [f.value for n, f in figs.items() if n.startswith("gemm_tflops_per_w{")]
    bw = figs.get("allreduce_busbw")
    peak = figs.get("soak_peak_temp")
    return {"tflops": f"{min(gemm):.0f} / {max(gemm):.0f}" if gemm else "-",
            "per_w": f"{min(per_w):.3f} / {max(per_w):.3f}" if per_w else "-",
            "busbw": f"{bw.value:g} GB/s" if bw else "-",
            "peak": f"{peak.value:g} C" if peak else "-"}


def energy(p: dict[str, Any], tr: Tr = _same) -> list[tuple[str, str]]:
    """The summary's energy lines (throughput per watt, the power limit in force, the
    burn-in's energy, the system's draw the BMC read), as the checks declare them. Only
    what was measured: no line for a figure not reported."""
    return checks.summary(p, tr)


def _evidence_time(st: dict[str, Any]) -> tuple[str, str]:
    """When a certificate's evidence ended (then when it was signed): newer supersedes."""
    p = st["predicate"]
    validity = p.get("validity") or {}
    return (str(validity.get("not_before") or (p.get("validated") or {}).get("finished")
                or ""), str(validity.get("issued") or ""))


def current_certificates(statements: list[dict[str, Any]]
                         ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One certificate per node, the one on the newest evidence; how many each superseded."""
    newest: dict[str, dict[str, Any]] = {}
    superseded: dict[str, int] = {}
    for st in statements:
        host = str(st["predicate"]["host"])
        if host in newest:
            superseded[host] = superseded.get(host, 0) + 1
            if _evidence_time(st) <= _evidence_time(newest[host]):
                continue
        newest[host] = st
    return [newest[h] for h in sorted(newest)], superseded


# Nodes a fleet page lists at most (nodecert policy: Chromium loads and lays out a page
# of 1,000 nodes in under a second on a 2-core machine, one of 10,000 in over four;
# docs/benchmarks.md). A larger fleet's index.html is a summary -- its counts and the
# nodes not READY -- and every node is on pages of this many, in a folder of their own
# (fleet/001.html, ...: a node's own page is <host>.html, whatever its name).
PAGE_ROWS = 1000
FLEET_PAGES = "fleet"


def fleet_pages(statements: list[dict[str, Any]], *, keyid: str,
                lang: str = DEFAULT) -> dict[str, str]:
    """The fleet at a glance, file name -> page: index.html, and for a fleet of more than
    PAGE_ROWS nodes, fleet/001.html onwards. A node certified more than once shows its
    newest certificate (the older ones are superseded, and the page says how many)."""
    statements, superseded = current_certificates(statements)
    rows = []
    for st in statements:
        p = st["predicate"]
        counts = Counter(r["verdict"] for r in p["results"])
        rows.append({"host": p["host"], "verdict": p["verdict"], "simulated": p["simulated"],
                     "reasons": p["reasons"], "superseded": superseded.get(p["host"], 0),
                     "counts": " ".join(f"{n} {v}" for v, n in sorted(counts.items())),
                     **key_figures(p)})
    env = _env(lang)
    common = {"ready": sum(r["verdict"] == "READY" for r in rows), "total": len(rows),
              "simulated": any(r["simulated"] for r in rows), "keyid": keyid,
              "simulated_text": gettext_for(lang).gettext(SIMULATED_TEXT),
              "run_id": ", ".join(sorted({str(st["predicate"].get("run_id"))
                                          for st in statements})),
              "tool_version": __version__}
    if len(rows) <= PAGE_ROWS:
        return {"index.html": env.get_template("fleet.html.j2").render(
            rows=rows, pages=[], **common)}
    chunks = [rows[i:i + PAGE_ROWS] for i in range(0, len(rows), PAGE_ROWS)]
    names = [f"{FLEET_PAGES}/{i:03d}.html" for i in range(1, len(chunks) + 1)]
    not_ready = [r for r in rows if r["verdict"] != "READY"]
    out = {"index.html": env.get_template("fleet.html.j2").render(
        rows=not_ready[:PAGE_ROWS], not_ready=len(not_ready), page_rows=PAGE_ROWS,
        counts=sorted(Counter(r["verdict"] for r in rows).items()),
        pages=[{"name": n, "first": c[0]["host"], "last": c[-1]["host"]}
               for n, c in zip(names, chunks, strict=True)], **common)}
    page = env.get_template("fleet_nodes.html.j2")
    for i, (name, chunk) in enumerate(zip(names, chunks, strict=True)):
        out[name] = page.render(rows=chunk, page=i + 1, pages=len(chunks),
                                prev=Path(names[i - 1]).name if i else None,
                                next=Path(names[i + 1]).name if i + 1 < len(names) else None,
                                **common)
    return out


def fleet_page(statements: list[dict[str, Any]], *, keyid: str, lang: str = DEFAULT) -> str:
    """The fleet's index.html (fleet_pages: the whole fleet up to PAGE_ROWS nodes)."""
    return fleet_pages(statements, keyid=keyid, lang=lang)["index.html"]


def handover_page(rows: list[dict[str, Any]], *, signers: list[str], issued: str,
                  has_revocations: bool, has_statements: bool, lang: str = DEFAULT) -> str:
    """The hand-over bundle's index: every certificate, its verdict and its page."""
    simulated = any(r["simulated"] for r in rows)
    return _env(lang).get_template("handover.html.j2").render(
        rows=rows, ready=sum(r["verdict"] == "READY" for r in rows), signers=signers,
        issued=issued, simulated=simulated,
        simulated_text=gettext_for(lang).gettext(SIMULATED_TEXT),
        has_revocations=has_revocations, has_statements=has_statements,
        keyid=signers[0] if signers else "", tool_version=__version__)


__all__ = [
    "FLEET_PAGES",
    "PAGE_ROWS",
    "Rendering",
    "current_certificates",
    "fleet_page",
    "fleet_pages",
    "handover_page",
    "key_figures",
    "node_page",
    "pdf_of",
    "plots",
]
