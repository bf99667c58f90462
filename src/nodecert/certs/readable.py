"""A check's figures as a person reads them: labelled values with their units, not JSON.

Pure: the signed value in, lines out. A label comes from the figure's key ("cpu_cores"
is "CPU cores", "seq_read_mbps" is "seq read" in MB/s); a unit from the key's suffix,
or from the check's own unit for a bare number. Per-GPU maps read "GPU 0: 665.6,
GPU 1: ..." on one line, lists of records a line per record. What a node sent is
untrusted text: every piece is cleaned here and escaped by the page. An absent value
reads "not reported", never 0.

`closest_to_floor` finds, across a certificate's results, the figures nearest the floor
they were judged against (a threshold with >= or >), so the summary can say how much
room the node had, not only that it passed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from nodecert.certs.i18n import ENGLISH, N_, Voice
from nodecert.core.textsafe import clean

Tr = Voice
_same = ENGLISH


MAX_LINES = 16  # lines shown per check; the raw evidence holds the rest
MAX_ITEMS = 16  # per-GPU entries or list items on one line
_DEPTH = 3

# Words written the way the industry writes them.
_WORDS = {"cpu": "CPU", "cpus": "CPUs", "gpu": "GPU", "gpus": "GPUs", "nvme": "NVMe",
          "ram": "RAM", "ecc": "ECC", "pcie": "PCIe", "nvlink": "NVLink", "nvswitches":
          "NVSwitches", "iops": "IOPS", "tflops": "TFLOPS", "numa": "NUMA", "ib": "IB",
          "roce": "RoCE", "xid": "Xid", "cdi": "CDI", "bmc": "BMC", "uuid": "UUID", "id": "ID",
          "nccl": "NCCL", "busbw": "bus bandwidth", "algbw": "algorithm bandwidth",
          "hca": "HCA", "fw": "firmware", "sm": "SM", "h2d": "host to GPU",
          "d2h": "GPU to host", "p2p": "GPU to GPU", "acs": "ACS", "iommu": "IOMMU",
          "mtu": "MTU", "pstate": "P-state", "dimms": "DIMMs", "os": "OS", "dtype": "data type"}
# A key's suffix and the unit it names (longest first).
_SUFFIX_UNITS = (("_tflops", "TFLOPS"), ("_gflops", "Gflop/s"), ("_mbps", "MB/s"),
                 ("_gbps", "Gb/s"), ("_gbs", "GB/s"), ("_mhz", "MHz"), ("_iops", "IOPS"),
                 ("_mib", "MiB"), ("_gib", "GiB"), ("_gb", "GB"), ("_kw", "kW"),
                 ("_wh", "Wh"), ("_kj", "kJ"), ("_j", "J"), ("_w", "W"), ("_c", "°C"),
                 ("_pct", "%"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_h", "h"))
# Keys that are themselves a unit's quantity.
_KEY_UNITS = {"seconds": "s", "busbw": "GB/s", "algbw": "GB/s", "tflops": "TFLOPS",
              "temp": "°C", "power": "W"}
_NAME_KEYS = ("device", "name", "ca", "hca", "gpu", "bus_id", "port", "path", "id")
# Floors worth showing how close a node came to: measured rates, not counts or limits.
_RATE_UNITS = {"TFLOPS", "Gflop/s", "GB/s", "MB/s", "Gb/s", "IOPS", "tokens/s"}
_CHECK_UNITS = {"TFLOPS", "GB/s", "MB/s", "Gb/s", "W", "C", "°C", "MHz", "IOPS", "ms", "s",
                "h", "%", "GB", "MiB"}


@dataclass(frozen=True)
class Line:
    label: str  # "" for a check whose value is one figure
    text: str


def _unit_of(key: str) -> tuple[str, str]:
    """(the key without its unit suffix, the unit) -- ("seq_read", "MB/s")."""
    k = key.lower()
    for stem in ("_per_gpu", "_per_node", "_per_rail", "_per_pair"):
        if k.endswith(stem):
            base, unit = _unit_of(k[: -len(stem)])
            return base + stem, unit
    if k in _KEY_UNITS:
        return k, _KEY_UNITS[k]
    for suffix, unit in _SUFFIX_UNITS:
        if k.endswith(suffix) and len(k) > len(suffix):
            return k[: -len(suffix)], unit
    for part, unit in _KEY_UNITS.items():
        if k.startswith(part + "_"):
            return k, unit
    return k, ""


# Labels a page shows often, in the catalogue (a label not in it is shown as composed).
KNOWN_LABELS = (N_("CPU arch"), N_("CPU cores"), N_("CPU model"), N_("GPU model"),
                N_("GPUs"), N_("NVMe"), N_("RAM"), N_("RAM source"), N_("Links"),
                N_("Counter growth"), N_("Ports"), N_("Limits"), N_("Ratio"),
                N_("Seq read"), N_("Seq write"), N_("Rand read"), N_("Checkpoint"),
                N_("TFLOPS per GPU"), N_("Temp per GPU"), N_("Peak temp"),
                N_("ECC corrected per GPU"), N_("ECC volatile uncorrectable"),
                N_("Remap pending"), N_("Classified"), N_("Events"), N_("Checked"),
                N_("Problems"), N_("Below"), N_("Judged"), N_("Driver"), N_("Samples"),
                N_("Seconds"), N_("Data type"), N_("Load"), N_("Pairs NVLink"),
                N_("Performance"), N_("GPUs inside"), N_("CDI spec"), N_("Toolkit"))


def label(key: str, tr: Tr = _same) -> str:
    """'cpu_cores' -> 'CPU cores'; 'tflops_per_gpu' -> 'TFLOPS per GPU'."""
    base, _ = _unit_of(str(key))
    words = [w for w in re.split(r"[_\s.]+", base) if w]
    out = " ".join(_WORDS.get(w, w) for w in words)
    out = clean(out[:1].upper() + out[1:]) if out else clean(str(key))
    return tr(out[:80])


_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")


def key_text(key: Any, tr: Tr = _same) -> str:
    """A figure's key as a label; a name the node reported (a PCI address, a port,
    a counter's own name) as it is."""
    k = str(key)
    if k.isdigit():
        return f"GPU {k}"
    return label(k, tr) if _IDENT.match(k) else clean(k)[:80]


def number(v: float) -> str:
    """A measured number as read: no float noise, thousands apart."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}".rstrip("0").rstrip(".")


def scalar(v: Any, unit: str = "", tr: Tr = _same) -> str:
    """One value with its unit; absent is "not reported", never 0."""
    if v is None:
        return tr("not reported")
    if isinstance(v, bool):
        return tr("yes") if v else tr("no")
    if isinstance(v, int | float):
        u = "°C" if unit == "C" else unit
        return tr.localize(number(v)) + (("" if u == "%" else " ") + u if u else "")
    return clean(str(v))[:200]


def _is_per_index(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(str(k).isdigit() for k in v)


def _more(n: int, tr: Tr) -> str:
    return " " + tr("(and %(num)d more)") % {"num": n} if n > 0 else ""


def _per_index(v: dict[str, Any], unit: str, tr: Tr) -> str:
    items = sorted(v.items(), key=lambda kv: int(kv[0]))
    shown = ", ".join(f"GPU {clean(str(k))}: {scalar(x, unit, tr)}"
                      for k, x in items[:MAX_ITEMS])
    return shown + _more(len(items) - MAX_ITEMS, tr)


def _record(item: dict[str, Any], tr: Tr = _same) -> tuple[str, str]:
    """A record of a list (a PCIe link, a port): named by its name field, the rest as
    'field value' pairs."""
    name_key = next((k for k in _NAME_KEYS if isinstance(item.get(k), str | int)), None)
    name = clean(str(item[name_key]))[:80] if name_key else ""
    plain = {k: v for k, v in item.items()
             if k != name_key and not isinstance(v, dict | list)}
    if len(plain) > 4 and len({repr(v) for v in plain.values()}) == 1:
        v = next(iter(plain.values()))  # eight error counters, all 0: said once
        return name, tr("%(num)d figures, all %(value)s") % {"num": len(plain),
                                                             "value": scalar(v, "", tr)}
    parts = []
    for k, v in item.items():
        if k == name_key or isinstance(v, dict | list):
            continue
        _, unit = _unit_of(str(k))
        text = key_text(k, tr)
        parts.append(f"{text.lower() if _IDENT.match(str(k)) else text} "
                     f"{scalar(v, unit, tr)}")
    return name, ", ".join(parts[:MAX_ITEMS])


def _walk(key: str, v: Any, unit: str, depth: int, out: list[Line], *, tr: Tr) -> None:
    if _is_per_index(v) and not any(isinstance(x, dict | list) for x in v.values()):
        out.append(Line(key, _per_index(v, unit, tr)))
    elif isinstance(v, dict):
        if depth >= _DEPTH or not v:
            out.append(Line(key, tr("(none)") if not v else tr("(see the evidence)")))
            return
        if all(isinstance(x, dict) and x and not _is_per_index(x)
               and not any(isinstance(y, dict | list) for y in x.values())
               for x in v.values()):
            for k, x in v.items():  # records by name: a line each
                sub = key_text(k, tr)
                out.append(Line(f"{key} / {sub}" if key else sub, _record(x, tr)[1]))
            return
        for k, x in v.items():
            _, u = _unit_of(str(k))
            sub = key_text(k, tr)
            _walk(f"{key} / {sub}" if key else sub, x, u or unit, depth + 1, out, tr=tr)
    elif isinstance(v, list):
        if not v:
            out.append(Line(key, tr("(none)")))
        elif all(isinstance(x, dict) for x in v):
            for item in v[:MAX_ITEMS]:
                name, text = _record(item, tr)
                out.append(Line(f"{key}: {name}" if key and name else name or key, text))
            if len(v) > MAX_ITEMS:
                out.append(Line(key, tr("and %(num)d more (see the evidence)")
                                % {"num": len(v) - MAX_ITEMS}))
        else:
            shown = ", ".join(scalar(x, unit, tr) if not isinstance(x, dict | list)
                              else "(…)" for x in v[:MAX_ITEMS])
            out.append(Line(key, shown + _more(len(v) - MAX_ITEMS, tr)))
    else:
        out.append(Line(key, scalar(v, unit, tr)))


def lines(value: Any, unit: str | None = None, tr: Tr = _same) -> tuple[list[Line], int]:
    """The value as labelled lines (at most MAX_LINES) and how many more there were."""
    check_unit = unit if unit in _CHECK_UNITS else ""
    if value is None:
        return [], 0
    out: list[Line] = []
    if isinstance(value, dict | list):
        _walk("", value, "", 0, out, tr=tr)
    else:
        out.append(Line("", scalar(value, check_unit or (clean(unit or "")[:20]), tr)))
    return out[:MAX_LINES], max(0, len(out) - MAX_LINES)


@dataclass(frozen=True)
class Margin:
    check: str
    figure: str  # what was measured, labelled ("Seq read, /scratch", "TFLOPS, GPU 3")
    value: float
    floor: float
    unit: str
    source: str

    @property
    def room(self) -> float:
        """How far above its floor, as a fraction of the floor (0.05: 5 % above)."""
        return (self.value - self.floor) / self.floor


def _threshold_base(key: str) -> str:
    """'burnin.tflops_min_bf16' -> 'tflops'; 'storage.seq_read_mbps' -> 'seq_read_mbps'."""
    last = key.rsplit(".", 1)[-1].lower()
    return re.split(r"_(?:min|max)(?:_|$)", last)[0]


def _numeric(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _leaves(v: Any, path: tuple[str, ...], depth: int = 0
            ) -> list[tuple[tuple[str, ...], float]]:
    if depth > _DEPTH:
        return []
    if isinstance(v, dict):
        return [leaf for k, x in v.items() for leaf in _leaves(x, (*path, str(k)), depth + 1)]
    if isinstance(v, list):
        out = []
        for item in v:
            if isinstance(item, dict):
                name = next((str(item[k]) for k in _NAME_KEYS
                             if isinstance(item.get(k), str | int)), "")
                out += _leaves({k: x for k, x in item.items() if k not in _NAME_KEYS},
                               (*path, name), depth + 1)
        return out
    n = _numeric(v)
    return [(path, n)] if n is not None else []


def _matches(path: tuple[str, ...], base: str) -> int | None:
    """Where in the path the threshold's figure is named (None: not this figure)."""
    for k, part in enumerate(path):
        p = part.lower()
        if p == base or p.startswith(base + "_per_"):
            return k
    return None


def closest_to_floor(results: list[dict[str, Any]], limit: int = 5,
                     tr: Tr = _same) -> list[Margin]:
    """The figures nearest the floors they were judged against, nearest first (one per
    check and floor: its lowest figure)."""
    found: list[Margin] = []
    for r in results:
        if not isinstance(r, dict) or r.get("verdict") not in ("PASS", "WARN", "FAIL"):
            continue  # a skipped or broken check measured nothing
        value = r.get("value")
        for key, t in (r.get("thresholds") or {}).items():
            floor = _numeric((t or {}).get("value")) if isinstance(t, dict) else None
            if (floor is None or floor <= 0 or t.get("op") not in (">=", ">")
                    or t.get("unit") not in _RATE_UNITS):
                continue
            base = _threshold_base(str(key))
            whole = _numeric(value)
            cands: list[tuple[tuple[str, ...], float]]
            if whole is not None and len(r.get("thresholds") or {}) == 1:
                cands = [((), whole)]
            else:
                cands = [(p, n) for p, n in _leaves(value, ())
                         if _matches(p, base) is not None]
            if not cands:
                continue
            path, low = min(cands, key=lambda c: c[1])
            k = _matches(path, base)
            where = [("GPU " + part if part.isdigit() else part)
                     for i, part in enumerate(path) if i != k]
            figure = label(path[k], tr) if path and k is not None else label(base, tr)
            found.append(Margin(clean(str(r.get("check", "")))[:60],
                                ", ".join([figure, *[clean(w)[:60] for w in where if w]]),
                                low, floor, clean(str(t.get("unit") or ""))[:20],
                                clean(str(t.get("origin") or t.get("source") or ""))[:120]))
    return sorted(found, key=lambda m: m.room)[:limit]


__all__ = ["MAX_LINES", "Line", "Margin", "closest_to_floor", "label", "lines", "number",
           "scalar"]
