"""The NVLink domain's bandwidth sweep: which GPU pairs each sampling round measures,
and which GPU the measurements name. Pure: the jobs these plans describe are run by
rack.load; the decisions about which GPU is slow are made here.

Sampling is linear in the GPUs, never every pair: each round pairs every GPU of the
rack with one GPU on another tray (the trays' pairing rounds, each tray meeting two
other trays, so each GPU meets two partners on two other trays); the pairs of a round
run at once across tray pairs. A pair's figure can only say one of its two GPUs (or the
path between them) is slow, so a GPU is named when both of its pairs are slow while each
partner did well with its other partner (cluster.pairing.isolate, at GPU level). A named
GPU -- and a slow pairing the evidence cannot pin on one GPU -- is then measured once
more with a GPU known good on a tray it has not met: a bounded confirmation, one pair per
name. Only a GPU slow in the confirmation too is a failure; one that does well there was
a transient, and says so.

A pair is slow below `peer` (a fraction) of the median pair of the whole sweep: pairs
through the same switch trays at the same sizes deliver the same bandwidth, so the
median is what the domain gives (the rack's all-reduce judges that against its floor).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nodecert.cluster.pairing import Isolation, isolate, pair_rounds
from nodecert_node.contract import Result, Threshold, Verdict


@dataclass(frozen=True, order=True)
class GpuPair:
    """One measurement: GPU gpus[0] of trays[0] with GPU gpus[1] of trays[1]."""

    trays: tuple[str, str]
    gpus: tuple[int, int]
    round: int  # 1, 2, ... the sampling rounds; 0 the confirmation

    @property
    def ends(self) -> tuple[str, str]:
        return gpu_name(self.trays[0], self.gpus[0]), gpu_name(self.trays[1], self.gpus[1])

    def label(self) -> str:
        return f"{self.ends[0]} + {self.ends[1]}"


def gpu_name(tray: str, gpu: int) -> str:
    return f"{tray} GPU {gpu}"


def plan(trays: Sequence[str], gpus: int) -> list[list[GpuPair]]:
    """The sampling rounds: every GPU once per round, with a GPU of another tray; GPU g
    of one tray meets GPU g + k - 1 (mod gpus) of its partner tray in round k, so the
    pairs of a round differ from the last even where trays meet again."""
    out: list[list[GpuPair]] = []
    for k, tray_pairs in enumerate(pair_rounds(trays, partners=2), 1):
        out.append([GpuPair((a, b), (g, (g + k - 1) % gpus), k)
                    for a, b in tray_pairs for g in range(gpus)])
    return out


def median_of(figures: dict[GpuPair, float | None]) -> float | None:
    got = [v for p, v in figures.items() if v is not None and p.round > 0]
    return statistics.median(got) if got else None


def slow(figures: dict[GpuPair, float | None], peer: Threshold) -> dict[GpuPair, bool]:
    """Pair -> whether it met `peer` of the sampling rounds' median (pairs without a
    figure are left out: they did not run, which is an error, not a verdict)."""
    mid = median_of(figures)
    if not mid:
        return {}
    return {p: bool(peer.check(round(v / mid, 3))) for p, v in figures.items()
            if v is not None}


def named(figures: dict[GpuPair, float | None], peer: Threshold) -> Isolation:
    """The GPUs the sampling rounds name (pairing.isolate over the GPU pairs)."""
    ok = slow({p: v for p, v in figures.items() if p.round > 0}, peer)
    return isolate({p.ends: good for p, good in ok.items()})


def confirmations(names: Sequence[str], figures: dict[GpuPair, float | None],
                  peer: Threshold) -> list[GpuPair]:
    """One pair per named GPU: it with a GPU known good (its pairs all met `peer`) on a
    tray it has not met, each good GPU used once where there are enough."""
    ok = slow(figures, peer)
    bad_ends = {e for p, good in ok.items() if not good for e in p.ends}
    good: list[tuple[str, int]] = sorted({(p.trays[k], p.gpus[k]) for p in ok for k in (0, 1)
                                          if p.ends[k] not in bad_ends})
    met: dict[str, set[str]] = {}
    for p in figures:
        met.setdefault(p.ends[0], set()).add(p.trays[1])
        met.setdefault(p.ends[1], set()).add(p.trays[0])
    used: set[tuple[str, int]] = set()
    out: list[GpuPair] = []
    for name in names:
        tray, gpu = name.rsplit(" GPU ", 1)
        seen = met.get(name, set()) | {tray}
        choice = (next((g for g in good if g[0] not in seen and g not in used), None)
                  or next((g for g in good if g[0] not in seen), None)
                  or next((g for g in good if g[0] != tray), None))
        if choice is None:
            continue  # nothing known good to compare with: the name stands unconfirmed
        used.add(choice)
        out.append(GpuPair((tray, choice[0]), (int(gpu), choice[1]), 0))
    return out


def heatmap(figures: dict[GpuPair, float | None]) -> dict[str, dict[str, float | None]]:
    """tray -> GPU -> the best pair figure it reached (GB/s): a GPU is as fast as its best
    pairing shows, so only a slow GPU itself reads low; None: no pair of it ran."""
    out: dict[str, dict[str, float | None]] = {}
    for p, v in figures.items():
        for tray, gpu in zip(p.trays, p.gpus, strict=True):
            cell = out.setdefault(tray, {})
            old = cell.get(str(gpu))
            cell[str(gpu)] = v if old is None else (old if v is None else max(old, v))
    return {t: dict(sorted(g.items(), key=lambda kv: int(kv[0])))
            for t, g in sorted(out.items())}


def judge(figures: dict[GpuPair, float | None], errors: dict[GpuPair, str],
          peer: Threshold, *, simulated: bool) -> tuple[Result, list[str]]:
    """(rack.sweep, the GPUs it names) from every pair's bus bandwidth (GB/s) and the
    pairs whose job failed (pure)."""
    mid = median_of(figures)
    rounds = max((p.round for p in figures), default=0)
    iso = named(figures, peer)
    confirm = {p.ends[0]: p for p in figures if p.round == 0}
    ok = slow(figures, peer)
    fails, warns, culprits = _confirmed(figures, errors, peer, iso.culprits + iso.suspects)
    # A slow pair that names nobody (each of its GPUs did well elsewhere) is still slow:
    # never a pass.
    ends = set(iso.culprits + iso.suspects)
    fails += [f"{p.label()}: {figures[p]:.1f} GB/s in round {p.round}, below "
              f"{peer.describe()} of the median pair, while each GPU did well in another "
              "pairing (the path between them?)" for p, good in sorted(ok.items())
              if not good and p.round > 0 and not ends & set(p.ends)]
    errs = [f"{p.label()} (round {p.round or 'confirmation'}): {why}"
            for p, why in sorted(errors.items())]
    value: dict[str, Any] = {"gpus": len({e for p in figures for e in p.ends}),
                             "rounds": rounds, "confirmations": len(confirm),
                             "pairs": len(figures), "median_gbs": round(mid, 1) if mid else None,
                             "peer_fraction_min": peer.value,
                             "heatmap": heatmap(figures)}
    v = Verdict.FAIL if fails else Verdict.WARN if warns else Verdict.PASS
    if errs:
        v = max(v, Verdict.ERROR)
    if mid is None:
        v = Verdict.ERROR
        summary = "no GPU pair of the sweep gave a figure"
    elif v == Verdict.PASS:
        summary = (f"{value['gpus']} GPUs in {rounds} sampling rounds of pairs across trays: "
                   f"every pair within {peer.describe()} of the median ({mid:.1f} GB/s)")
    else:
        summary = (fails or warns or errs)[0][:300]
    return (Result("rack.sweep", v, summary, value=value, unit="GB/s",
                   thresholds={"peer": peer}, findings=tuple(fails + warns + errs),
                   fault_code="NC-RACK-SWEEP" if v == Verdict.FAIL else "",
                   simulated=simulated), culprits)


def _confirmed(figures: dict[GpuPair, float | None], errors: dict[GpuPair, str],
               peer: Threshold, named_gpus: list[str]) -> tuple[list[str], list[str],
                                                                  list[str]]:
    """(fails, warns, culprits): each GPU the sampling rounds named, as its confirmation
    pairing (with a GPU known good) settles it: still slow, a transient, or not
    confirmed (never cleared without a figure)."""
    mid = median_of(figures)
    confirm = {p.ends[0]: p for p in figures if p.round == 0}
    ok = slow(figures, peer)
    fails: list[str] = []
    warns: list[str] = []
    culprits: list[str] = []
    for name in named_gpus:
        own = sorted((p for p in figures if p.round > 0 and name in p.ends),
                     key=lambda p: p.round)
        seen = ", ".join(f"{figures[p]:.1f} GB/s with {_other(p, name)}" for p in own
                         if figures[p] is not None)
        c = confirm.get(name)
        again = figures.get(c) if c else None
        if c is None or again is None or not mid:
            why = errors.get(c, "not run") if c else "no GPU known good to confirm it with"
            fails.append(f"{name}: slow in every sampling round ({seen}); not confirmed: "
                         f"{why}")
            culprits.append(name)
        elif not ok.get(c, False):
            culprits.append(name)
            fails.append(f"{name}: {seen}, and {again:.1f} GB/s with {_other(c, name)} in "
                         f"confirmation: {peer.check(round(again / mid, 3)).message} of the "
                         f"median pair ({mid:.1f} GB/s)")
        else:
            warns.append(f"{name}: slow in the sampling rounds ({seen}) but {again:.1f} GB/s "
                         f"with {_other(c, name)} in confirmation: a transient, not named")
    return fails, warns, culprits


def _other(p: GpuPair, name: str) -> str:
    return p.ends[1] if p.ends[0] == name else p.ends[0]


__all__ = ["GpuPair", "confirmations", "gpu_name", "heatmap", "judge", "median_of",
           "named", "plan", "slow"]
