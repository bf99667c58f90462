"""The cluster page's drawing of the fabric against the cable plan: the rails and their
switches, every planned link, the links not as planned in red."""

from __future__ import annotations

from typing import Any

from nodecert.certs import svgplot
from nodecert.certs.i18n import ENGLISH, Voice


def node_order(name: str) -> tuple[str, int]:
    """h2 before h10: the text, then the trailing number."""
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem):] or 0)


def cabling_grid(cabling: dict[str, Any] | None, tr: Voice = ENGLISH) -> str:
    """The fabric as the cable plan draws it (a row per node, a column per rail, or per
    switch where the plan names no rails) with every link not as planned in red, "" when
    the fabric was not judged against a plan."""
    links = (cabling or {}).get("links") or []
    if not links:
        return ""
    by_rail = all(x.get("rail") is not None for x in links)

    def col_of(x: dict[str, Any]) -> str:
        return str(x["rail"] if by_rail else x["switch"])
    cols = sorted({col_of(x) for x in links}, key=lambda c: (len(c), c))
    switches = {c: sorted({str(x["switch"]) for x in links if col_of(x) == c}) for c in cols}
    cells: dict[str, dict[str, tuple[str, str]]] = {}
    for x in links:
        tip = (f"{x['node']} {x['port']} -> {x['switch']} port {x['switch_port']} "
               f"(plan line {x['line']}): {x['status']}"
               + "".join(f"; {c} +{n}" for c, n in (x.get("errors") or {}).items()))
        cells.setdefault(str(x["node"]), {})[col_of(x)] = (str(x["status"]), tip)
    labels = [(tr("rail %(rail)s") % {"rail": c} + f" ({', '.join(switches[c])})") if by_rail
              else c for c in cols]
    return svgplot.link_grid(
        tr("The fabric against the cable plan: every planned link, wrong ones in red"),
        [(n, [cells[n].get(c) for c in cols]) for n in sorted(cells, key=node_order)],
        columns=labels, legend=[("ok", tr("as planned")), ("wrong", tr("not as planned"))])


__all__ = ["cabling_grid", "node_order"]
