"""net.ib and net.roce: every RDMA port of the order's fabric against the order.

Gathered with infiniband-diags: `ibstat` (state, physical state, rate, link layer,
firmware), `ibstatus` (width and speed, where installed), and for InfiniBand
`perfquery -x` per port twice, a sampling window apart, so error counters are judged by
what they gain while the node runs, not by history since they were last cleared. The
order (`nodecert_fabric`) names the link layer, the number of compute ports, their rate
and optionally width, golden firmware and the compute HCAs by name. The HCAs' own PCIe
links are judged by hardware.pcie. For RoCE, where the order names the site's settings
(`roce`), `show_gids` (a routable RoCE v2 GID per port), `mlnx_qos -i IF` (trust state,
PFC priorities) and the mlx5 ECN sysfs are judged too.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings, within
from nodecert_node.contract import Evidence, Limits, Result, Verdict
from nodecert_node.parse import ParseError, ib, roce
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

Counters = Dict[str, Dict[str, int]]  # "mlx5_0/1" -> counter -> value


def _key(p: dict[str, Any]) -> str:
    return f"{p['ca']}/{p['port']}"


# nvidia-smi topo -m's connection kinds between a GPU and a NIC, nearest first.
NEAR = ("PIX", "PXB", "PHB", "NODE", "SYS")


def affinity_problems(matrix: dict[str, dict[str, str]], legend: dict[str, str], want: str,
                      devices: list[str] | None) -> list[str]:
    """Pure: each GPU whose nearest compute NIC is farther than `want` (PIX ... NODE).
    legend: the new layout's NICn -> device; in the old layout (no legend) the NIC
    columns are named by their device (mlx5_0, ...)."""
    if not legend:
        legend = {col: col for row in matrix.values() for col in row
                  if not col.startswith("GPU")}
    nics = {col: dev for col, dev in legend.items() if not devices or dev in devices}
    if not nics:
        return [f"`nvidia-smi topo -m` lists none of the order's NICs "
                f"({', '.join(devices or []) or 'any'}): GPU-NIC affinity cannot be judged"]
    out = []
    for name in sorted((g for g in matrix if g.startswith("GPU")), key=lambda g: int(g[3:])):
        cells = [(NEAR.index(c), c, nics[col]) for col, c in matrix[name].items()
                 if col in nics and c in NEAR]
        if not cells:
            out.append(f"{name}: no NIC of the order in its `topo -m` row")
            continue
        rank, cell, dev = min(cells)
        if rank > NEAR.index(want):
            out.append(f"{name}: nearest fabric NIC {dev} is {cell}, the order wants {want} or "
                       "nearer (traffic crosses the CPU)")
    return out


def roce_problems(want: dict[str, Any], devices: list[str], gids: list[dict[str, Any]] | None,
                  qos: dict[str, dict[str, Any] | None],
                  ecn: dict[str, dict[str, list[int]] | None]) -> list[str]:
    """Pure: each compute port's RoCE settings against the site's (`roce` in the fabric
    spec). gids: show_gids rows (None: unreadable); qos/ecn per device (None: unreadable)."""
    out: list[str] = []
    for dev in devices:
        if want.get("gid_type") == "v2":
            if gids is None:
                out.append(f"{dev}: the GID table could not be read (show_gids)")
            elif not roce.routable_v2(gids, dev):
                kinds = sorted({r["version"] for r in gids if r["dev"] == dev})
                out.append(f"{dev}: no RoCE v2 GID with an address (has: "
                           f"{', '.join(kinds) or 'no GID'}): NCCL cannot route its traffic")
        q = qos.get(dev)
        if ("trust" in want or "pfc_priorities" in want) and q is None:
            out.append(f"{dev}: its QoS could not be read (mlnx_qos)")
            q = {}
        if q and "trust" in want and q.get("trust") != want["trust"]:
            out.append(f"{dev}: priority trust {q.get('trust')}, the site runs {want['trust']}")
        if q and "pfc_priorities" in want:
            if q.get("pfc") is None:
                out.append(f"{dev}: mlnx_qos printed no PFC configuration")
            elif q["pfc"] != want["pfc_priorities"]:
                out.append(f"{dev}: PFC on priorities {q['pfc'] or 'none'}, the site runs "
                           f"{want['pfc_priorities']} (lossless RoCE needs exactly those)")
        if "ecn_priorities" in want:
            e = ecn.get(dev)
            if e is None:
                out.append(f"{dev}: no ECN settings in sysfs (ecn/roce_np, roce_rp)")
                continue
            for role in ("roce_np", "roce_rp"):
                missing = [p for p in want["ecn_priorities"] if p not in e.get(role, [])]
                if missing:
                    out.append(f"{dev}: ECN {role} off on priorities {missing}")
    return out


def _roce_settings(ctx: Ctx, spec: dict[str, Any], ports: list[dict[str, Any]],
                   ev: list[Evidence]) -> list[str]:
    """Gather show_gids, mlnx_qos per port and the ECN sysfs; judge them (roce_problems)."""
    want = spec["roce"]
    devices = sorted({p["ca"] for p in ports if p.get("link_layer") == "Ethernet"
                      and (not spec.get("devices") or p["ca"] in spec["devices"])})
    gids = None
    try:
        g = run(["show_gids"], timeout=ctx.timeout, name="show_gids")
        ev.append(g.evidence)
        gids = roce.parse_show_gids(g.text)
    except ToolError as exc:
        if exc.evidence:
            ev.append(exc.evidence)
        if exc.kind == "missing":
            return ["show_gids is not installed: the RoCE settings cannot be read (install "
                    "mlnx-tools, from NVIDIA's DOCA repository)"]
    except ParseError as exc:
        return [f"show_gids output unreadable: {exc}"]
    ndev = {r["dev"]: r["ndev"] for r in gids or [] if r["ndev"]}
    qos: dict[str, dict[str, Any] | None] = {}
    ecn: dict[str, dict[str, list[int]] | None] = {}
    for dev in devices:
        qos[dev] = ecn[dev] = None
        if dev not in ndev:
            continue
        ecn[dev] = roce.read_ecn(ndev[dev])
        try:
            q = run(["mlnx_qos", "-i", ndev[dev]], timeout=ctx.timeout, name=f"mlnx_qos {dev}")
            ev.append(q.evidence)
            qos[dev] = roce.parse_mlnx_qos(q.text)
        except ToolError as exc:
            if exc.evidence:
                ev.append(exc.evidence)
        except ParseError:
            continue
    return roce_problems(want, devices, gids, qos, ecn)


def _post_fec_ber(ml: dict[str, Any]) -> tuple[str, float] | None:
    """The BER the application sees, after error correction, as mlxlink reports it: the
    symbol BER on HDR/NDR links, the effective BER on EDR (ibdiagnet's manual), None
    where mlxlink did not report either (a filtered or older output: not judged)."""
    for key, name in (("symbol_ber", "symbol BER"), ("effective_ber", "effective BER")):
        if ml.get(key) is not None:
            return name, float(ml[key])
    return None


def _port_findings(p: dict[str, Any], spec: dict[str, Any], limits: Limits,
                   fails: list[str], warns: list[str]) -> None:
    """One port against the order: Active/LinkUp, its rate, width and firmware; its
    post-FEC bit error rate and what mlxlink's own diagnosis recommends."""
    where = f"{p['ca']} port {p['port']}"
    if p.get("state") != "Active" or p.get("phys_state") not in (None, "LinkUp"):
        fails.append(f"{where}: {p.get('state')}/{p.get('phys_state')}, expected "
                     "Active/LinkUp")
        return
    rate = p.get("rate_gbps")
    if rate is not None and rate < spec["rate_gbps"]:
        fails.append(f"{where}: {rate:g} Gb/s, the order says {spec['rate_gbps']:g}")
    if spec.get("width") and p.get("width") and p["width"] != spec["width"]:
        fails.append(f"{where}: link width {p['width']}, the order says {spec['width']}")
    if spec.get("firmware") and p.get("firmware") and p["firmware"] != spec["firmware"]:
        fails.append(f"{where}: firmware {p['firmware']}, the site's golden version is "
                     f"{spec['firmware']}")
    ber = _post_fec_ber(p.get("mlxlink") or {})
    if ber is not None:
        within(limits, "net.post_fec_ber_max", ber[1], f"{where} {ber[0]} (mlxlink)", fails)
    advice = (p.get("mlxlink") or {}).get("recommendation")
    if advice and advice != "No issue was observed":  # mlxlink's own link diagnosis
        warns.append(f"{where}: mlxlink recommends: {advice}")


def _counter_growth(mine: list[dict[str, Any]], before: Counters, after: Counters, *,
                    window_s: float, limits: Limits, fails: list[str],
                    notes: list[str]) -> dict[str, dict[str, int]]:
    """Each port's error counters over the window, judged; counts that did not grow are
    noted, not judged (they predate the window)."""
    growth: dict[str, dict[str, int]] = {}
    for p in mine:
        k = _key(p)
        b, a = before.get(k), after.get(k)
        if b is None or a is None:
            continue
        grew = {c: a[c] - b[c] for c in ib.ERROR_COUNTERS if c in a and c in b}
        growth[k] = grew
        for c, g in sorted(grew.items()):
            within(limits, "net.error_counter_growth_max", g,
                   f"{p['ca']} port {p['port']} {c} over {window_s:g} s", fails)
        old = {c: a[c] for c in ib.ERROR_COUNTERS if a.get(c) and not grew.get(c)}
        if old:
            notes.append(f"{p['ca']} port {p['port']}: "
                         + ", ".join(f"{c} {v}" for c, v in sorted(old.items()))
                         + " since the counters were last cleared (not growing)")
    return growth


def judge_ports(name: str, layer: str, spec: dict[str, Any] | None,
                ports: list[dict[str, Any]], *, before: Counters, after: Counters,
                window_s: float, limits: Limits, affinity: list[str] | None = None,
                settings: list[str] | None = None) -> Result:
    """Pure: the judged ports of one link layer (InfiniBand or Ethernet)."""
    mine = [p for p in ports if p.get("link_layer") == layer]
    if spec is None:
        if not mine:
            return Result(name, Verdict.PASS, f"no {layer} RDMA port, and the order names "
                          "no fabric", value={"ports": []})
        return Result(name, Verdict.WARN, f"{len(mine)} {layer} RDMA ports found; the order "
                      "names no fabric (nodecert_fabric): not judged",
                      value={"ports": mine},
                      remediation="Describe the fabric in the inventory (nodecert_fabric) "
                                  "to have it judged.")
    if spec["link_layer"] != layer:
        return Result(name, Verdict.PASS, f"the order's fabric is {spec['link_layer']}: no "
                      f"{layer} port is judged", value={"ports": []})
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    devices = spec.get("devices")
    if devices:
        mine = [p for p in mine if p["ca"] in devices]
        absent = [d for d in devices if d not in {p["ca"] for p in mine}]
        if absent:
            fails.append(f"HCA {', '.join(absent)} of the order not found")
    if len(mine) < spec["ports"]:
        fails.append(f"{len(mine)} {layer} ports, the order has {spec['ports']}")
    for p in mine:
        _port_findings(p, spec, limits, fails, warns)
    fails += (affinity or []) + (settings or [])
    growth = _counter_growth(mine, before, after, window_s=window_s, limits=limits,
                             fails=fails, notes=notes)
    summary = (f"{len(mine)} {layer} ports Active at {spec['rate_gbps']:g} Gb/s"
               + (f" {spec['width']}" if spec.get("width") else "")
               + (", error counters steady" if growth else ""))
    res = judge_findings(
        name, fails, warns, summary,
        # the error counters as last read, per port: a count that rises from run to run
        # is a link wearing out (the fleet's trends read it as link_errors)
        value={"ports": mine, "counter_growth": growth, "window_s": window_s,
               "counters": {_key(p): {c: after[_key(p)][c] for c in ib.ERROR_COUNTERS
                                      if c in after[_key(p)]}
                            for p in mine if _key(p) in after}},
        thresholds=limits.pick("net.error_counter_growth_max", "net.post_fec_ber_max"),
        fault_code="NC-FABRIC-PORT" if fails else "",
        remediation="Check the named port's cable and transceiver and the switch port; "
                    "reseat or replace, flash the golden firmware (mlxfwmanager), then "
                    "re-run." if fails else "")
    return res.with_(findings=res.findings + tuple(notes))


def _counters(ports: list[dict[str, Any]], ctx: Ctx, ev: list[Evidence]) -> Counters:
    out: Counters = {}
    for p in ports:
        try:
            r = run(["perfquery", "-x", "-C", p["ca"], "-P", str(p["port"])],
                    timeout=ctx.timeout, name=f"perfquery {p['ca']}")
        except ToolError as exc:
            if exc.evidence:
                ev.append(exc.evidence)
            continue
        ev.append(r.evidence)
        blocks = ib.parse_perfquery(r.text)
        out[_key(p)] = blocks[0]["counters"]
    return out


def _link_details(ctx: Ctx, ports: list[dict[str, Any]], layer: str,
                  ev: list[Evidence]) -> None:
    """Add to each port what the optional tools say: width and speed (ibstatus), and the
    link's own diagnosis on an active port of `layer` (mlxlink, where MFT is installed).
    A tool that is absent or fails leaves those fields unset, never guessed."""
    try:
        st = run(["ibstatus"], timeout=ctx.timeout)
        ev.append(st.evidence)
        extra = {_key(p): p for p in ib.parse_ibstatus(st.text)}
        for p in ports:
            got = extra.get(_key(p), {})
            p["width"], p["speed"] = got.get("width"), got.get("speed")
    except (ToolError, ParseError):
        pass
    for p in ports:
        if p.get("link_layer") != layer or p.get("state") != "Active":
            continue
        try:
            ml = run(["mlxlink", "-d", p["ca"]], timeout=ctx.timeout, name=f"mlxlink {p['ca']}")
        except ToolError as exc:
            if exc.kind == "missing":
                break
            if exc.evidence:
                ev.append(exc.evidence)
            continue
        ev.append(ml.evidence)
        try:
            p["mlxlink"] = ib.parse_mlxlink(ml.text)[0]
        except ParseError:
            continue


def _gather_and_judge(ctx: Ctx, name: str, layer: str) -> Result:
    spec = ctx.spec.get("fabric")
    ev: list[Evidence] = []
    try:
        out = run(["ibstat"], timeout=ctx.timeout)
    except ToolError as exc:
        if spec is None and exc.kind == "missing":
            return Result(name, Verdict.PASS, "no RDMA tools (infiniband-diags) and the order "
                          "names no fabric")
        if exc.kind == "missing":
            return Result(name, Verdict.ERROR, "ibstat is not installed: the ordered fabric "
                          "cannot be read", evidence=(exc.evidence,) if exc.evidence else (),
                          fault_code="NC-TOOL-MISSING",
                          remediation="Install infiniband-diags (the validators role does: "
                                      "validators_packages), then re-run.")
        raise
    ev.append(out.evidence)
    ports = ib.parse_ibstat(out.text)
    _link_details(ctx, ports, layer, ev)
    window = float((ctx.options.get("fabric") or {}).get("counter_window_s", 3))
    judged = [p for p in ports if p.get("link_layer") == layer and p.get("state") == "Active"]
    before: Counters = {}
    after: Counters = {}
    if spec is not None and layer == "InfiniBand" and spec["link_layer"] == layer and judged:
        before = _counters(judged, ctx, ev)
        time.sleep(window)  # the sampling window the counters are judged over
        after = _counters(judged, ctx, ev)
    affinity = None
    if spec is not None and spec["link_layer"] == layer and spec.get("gpu_nic_affinity"):
        matrix, legend, tp_ev = gpu.backend(ctx).topology(ctx)
        ev.append(tp_ev)
        affinity = affinity_problems(matrix, legend, spec["gpu_nic_affinity"],
                                     spec.get("devices"))
    settings = (_roce_settings(ctx, spec, ports, ev) if spec is not None and layer == "Ethernet"
                and spec["link_layer"] == layer and spec.get("roce") else None)
    return judge_ports(name, layer, spec, ports, before=before, after=after, window_s=window,
                       limits=ctx.limits, affinity=affinity,
                       settings=settings).with_(evidence=tuple(ev))


def _ports_check(name: str, order: int, layer: str, tools: tuple[str, ...],
                 description: str) -> Callable[[Ctx], Result]:
    """The ports of one link layer: the same gathering and judging for both layers, each
    its own check (a node may carry both fabrics)."""
    @check(name, order=order, suites=("quick", "standard", "full", "lab"),
           tools=("ibstat", "ibstatus", *tools), description=description)
    def ports(ctx: Ctx) -> Result:
        return _gather_and_judge(ctx, name, layer)
    return ports


net_ib = _ports_check("net.ib", 14, "InfiniBand", ("perfquery", "mlxlink"),
                      "InfiniBand ports: count, state, rate, width and firmware against the "
                      "order; error counters that grow")
net_roce = _ports_check("net.roce", 15, "Ethernet", ("show_gids", "mlnx_qos"),
                        "RoCE (Ethernet RDMA) ports: count, state, rate and firmware against "
                        "the order; RoCE v2 GIDs, PFC, trust and ECN against the site's "
                        "settings")
