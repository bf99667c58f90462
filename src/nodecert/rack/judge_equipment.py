"""The rack's power and cooling equipment judged: its power shelves and rack PDUs
(rack.power) and its CDU (rack.cooling), from what the endpoints' walks read
(nodecert.rack.infra's shapes), over consecutive samples. Pure."""

from __future__ import annotations

from typing import Any

from nodecert.rack.judge_common import BAD_HEALTH, judge_findings, note_health, read_of_kind
from nodecert_node.contract import Result


def judge_power(rack: dict[str, Any], comps: list[dict[str, Any]]) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    shelves = [c for c in comps if c["kind"] == "power_shelf"]
    supplies = 0
    for c, last in read_of_kind(comps, "power_shelf", fails):
        if not last["shelves"]:
            fails.append(f"power shelf {c['name']}: its Redfish service lists no power shelf")
        for s in last["shelves"]:
            if not s.get("supplies"):
                warns.append(f"power shelf {c['name']}: reports no supplies: they were not "
                             "checked")
            who = f"power shelf {c['name']}" + (f" ({s['id']})" if s["id"] != "1" else "")
            note_health(who, s.get("health"), s.get("state"), fails, warns)
            for cond in s.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            for r in s.get("redundancy") or []:
                if r.get("health") in BAD_HEALTH or r.get("health") == "Warning":
                    fails.append(f"{who}: supply redundancy {r.get('type')} health "
                                 f"{r.get('health')}")
            for p in s.get("supplies") or []:
                supplies += 1
                pw = f"{who} supply {p['id']}"
                if p.get("state") == "Absent":
                    warns.append(f"{pw}: bay empty")
                    continue
                note_health(pw, p.get("health"), p.get("state"), fails, warns)
                if p.get("line_input") not in (None, "Normal"):
                    fails.append(f"{pw}: input {p['line_input']}")
    pdus = [c for c in comps if c["kind"] == "rack_pdu"]
    circuits = _judge_pdus(comps, fails, warns)
    if not shelves and not pdus:
        return None  # not judged: the record says so
    return judge_findings("rack.power", fails, warns,
                          f"{len(shelves)} power shelves healthy, {supplies} supplies OK"
                          + (f"; {len(pdus)} rack PDU endpoint(s) healthy, {circuits} mains "
                             "circuits closed" if pdus else ""),
                          value={"shelves": len(shelves), "supplies": supplies,
                                 "pdus": len(pdus), "mains": circuits},
                          fault_code="NC-RACK-POWER" if fails else "")


def _judge_pdus(comps: list[dict[str, Any]], fails: list[str], warns: list[str]) -> int:
    """Each rack PDU healthy and enabled, each of its mains circuits with its breaker
    Normal (a tripped or off breaker cuts the trays it feeds); the circuits judged."""
    circuits = 0
    for c, last in read_of_kind(comps, "rack_pdu", fails):
        if not last["pdus"]:
            fails.append(f"rack PDU {c['name']}: its Redfish service lists no rack PDU")
        for pdu in last["pdus"]:
            who = f"rack PDU {c['name']}" + (f" ({pdu['id']})" if pdu["id"] != "1" else "")
            note_health(who, pdu.get("health"), pdu.get("state"), fails, warns)
            for cond in pdu.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            if not pdu["mains"]:
                warns.append(f"{who}: reports no mains circuit: its breakers were not checked")
            for m in pdu["mains"]:
                circuits += 1
                mw = f"{who} mains {m['id']}"
                note_health(mw, m.get("health"), m.get("state"), fails, warns)
                if m.get("breaker") not in (None, "Normal"):
                    fails.append(f"{mw}: breaker {m['breaker']}")
    return circuits


def _level(v: float, t: dict[str, float]) -> int:
    """2 beyond a critical threshold, 1 beyond a caution one, 0 inside."""
    if ("upper_critical" in t and v > t["upper_critical"]) or \
            ("lower_critical" in t and v < t["lower_critical"]):
        return 2
    if ("upper_caution" in t and v > t["upper_caution"]) or \
            ("lower_caution" in t and v < t["lower_caution"]):
        return 1
    return 0


def sustained(values: list[float | None], thresholds: dict[str, float]
              ) -> tuple[int, int, str]:
    """(level held over every sample read, worst level seen, what it was) over consecutive
    samples: a level counts only when every sample holds it -- a single spike is a
    transient (GB trays and their coolant move tens of degrees in seconds), reported but
    not a verdict on its own. Pure."""
    read = [v for v in values if v is not None]
    if not read or not thresholds:
        return 0, 0, ""
    levels = [_level(v, thresholds) for v in read]
    shown = ", ".join(f"{v:g}" for v in read)
    return min(levels), max(levels), shown


def _value(sample: dict[str, Any], unit: str, key: str) -> float | None:
    for u in sample["units"]:
        if u["id"] == unit:
            return next((r["value"] for r in u["readings"] if r["key"] == key), None)
    return None


def _leak_detectors(cdu: str, good: list[dict[str, Any]], fails: list[str],
                    warns: list[str]) -> None:
    """A CDU's leak detectors: a leak in any sample is a leak; a detector that does not
    watch (absent, disabled, offline) is no "no leak"; one whose health is bad cannot be
    trusted to say there is none."""
    leaks: dict[str, set[str]] = {}
    for s in good:
        for u in s["units"]:
            for d in u["leaks"]:
                if d.get("state") not in ("OK", None):
                    leaks.setdefault(f"{u['id']}:{d['name']}", set()).add(d["state"])
    for u in good[-1]["units"]:
        for d in u["leaks"]:
            kind = f" ({d['type']})" if d.get("type") else ""
            if d.get("status_state") in ("Absent", "Disabled", "UnavailableOffline",
                                         "StandbyOffline"):
                warns.append(f"CDU {cdu}: leak detector {d['name']}{kind} is "
                             f"{d['status_state']}: it watches nothing")
            elif d.get("health") in BAD_HEALTH and d.get("state") in ("OK", None):
                fails.append(f"CDU {cdu}: leak detector {d['name']}{kind} health "
                             f"{d['health']}: its reading cannot be trusted")
    for name, states in sorted(leaks.items()):
        fails.append(f"CDU {cdu}: LEAK detected by {name.split(':', 1)[1]} "
                     f"({', '.join(sorted(states))})")


def judge_cooling(rack: dict[str, Any], comps: list[dict[str, Any]]) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    units = [c for c in comps if c["kind"] == "cdu"]
    judged = 0
    for c, _ in read_of_kind(comps, "cdu", fails):
        good = [s for s in c["samples"] if s is not None]
        if len(good) < len(c["samples"]):
            warns.append(f"CDU {c['name']}: {len(c['samples']) - len(good)} of "
                         f"{len(c['samples'])} samples could not be read")
        _leak_detectors(c["name"], good, fails, warns)
        if not any(u["leaks"] for u in good[-1]["units"]):
            warns.append(f"CDU {c['name']}: reports no leak detector: leaks were not checked")
        if not any(u["readings"] for u in good[-1]["units"]):
            warns.append(f"CDU {c['name']}: reports no coolant readings (temperatures, flow, "
                         "pressure): the loop was not checked")
        for u in good[-1]["units"]:
            who = f"CDU {c['name']}"
            note_health(who, u.get("health"), u.get("state"), fails, warns)
            for cond in u.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            for p in u["pumps"]:
                note_health(f"{who} pump {p['id']}", p.get("health"), p.get("state"), fails,
                        warns)
            for r in u["readings"]:
                series = [_value(s2, u["id"], r["key"]) for s2 in good]
                if all(v is None for v in series):
                    warns.append(f"{who} {r['label']}: no reading")
                    continue
                judged += 1
                held, peak, shown = sustained(series, r["thresholds"])
                limits = ", ".join(f"{k.replace('_', ' ')} {v:g}"
                                   for k, v in sorted(r["thresholds"].items()))
                what = (f"{who} {r['label']} {shown} {r['unit']} over {len(series)} "
                        f"samples ({limits})")
                if held == 2:
                    fails.append(f"{what}: beyond its critical threshold in every sample")
                elif held == 1 or peak == 2:
                    warns.append(f"{what}: " + ("beyond its caution threshold in every "
                                                "sample" if held == 1 else
                                                "beyond its critical threshold in some "
                                                "samples only (transient)"))
                elif peak == 1:
                    warns.append(f"{what}: beyond its caution threshold in some samples")
    if not units:
        return None  # not judged: the record says so
    return judge_findings("rack.cooling", fails, warns,
                          f"no leak; CDU healthy, {judged} coolant readings inside their "
                          f"thresholds over {rack.get('samples', 3)} samples",
                          value={"cdus": len(units), "readings": judged},
                          fault_code="NC-RACK-COOLING" if fails else "",
                          remediation="A leak or a failed pump stops the rack: isolate the "
                                      "loop as the CDU's service manual says before any "
                                      "load." if fails else "")


__all__ = ["judge_cooling", "judge_power", "sustained"]
