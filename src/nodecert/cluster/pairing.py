"""Finding the weak node of a cluster: pairing rounds, isolation from pair results, and
bisection of a failing collective. Pure: the jobs these plans describe are run by the
cluster engine; the decisions about which node is at fault are made here.

A pair result can only say that one of two nodes (or the link between them) is bad.
Every node is therefore paired with at least two different partners: a node whose
pairings are all bad while each of its partners does well elsewhere is the culprit;
when its partners have no good pairing either, the evidence cannot tell them apart and
all are named as suspects, never one picked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


def pair_rounds(nodes: Sequence[str], partners: int = 2) -> list[list[Pair]]:
    """Rounds of disjoint pairs (each round runs at once) such that every node meets at
    least `partners` different partners: the circle method of a round-robin, as many
    rounds as it takes (one more for an odd count, where one node sits out per round)."""
    names = sorted(set(nodes))
    if len(names) < 2:
        return []
    want = min(partners, len(names) - 1)
    ring: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    n = len(ring)
    met: dict[str, set[str]] = {x: set() for x in names}
    rounds: list[list[Pair]] = []
    for r in range(n - 1):
        if all(len(v) >= want for v in met.values()):
            break
        order = [ring[0], *ring[1:][r:], *ring[1:][:r]]  # the circle method: rotate all but one
        pairs: list[Pair] = []
        for i in range(n // 2):
            a, b = order[i], order[n - 1 - i]
            if a is None or b is None:
                continue
            pairs.append((a, b) if a < b else (b, a))
            met[a].add(b)
            met[b].add(a)
        rounds.append(sorted(pairs))
    return rounds


@dataclass
class Isolation:
    culprits: list[str] = field(default_factory=list)  # all pairings bad, partners fine
    suspects: list[str] = field(default_factory=list)  # bad pairings nobody can explain
    healthy: list[str] = field(default_factory=list)   # at least one good pairing


def isolate(results: dict[Pair, bool]) -> Isolation:
    """From pair results (True: the pair met the expectation)."""
    good: dict[str, bool] = {}
    partners: dict[str, set[str]] = {}
    for (a, b), ok in results.items():
        for x, y in ((a, b), (b, a)):
            good[x] = good.get(x, False) or ok
            partners.setdefault(x, set()).add(y)
    out = Isolation()
    for node in sorted(good):
        if good[node]:
            out.healthy.append(node)
        elif all(good.get(p, False) for p in partners[node]):
            out.culprits.append(node)
        else:
            out.suspects.append(node)
    return out


@dataclass
class Bisection:
    culprits: list[str]
    rounds: list[list[tuple[str, ...]]]  # the groups each round ran, at once


def bisect(nodes: Sequence[str], run: Callable[[list[tuple[str, ...]]], list[bool]],
           *, reference: str | None = None, max_rounds: int = 12) -> Bisection:
    """Name the node(s) a failing collective over `nodes` comes from. `run` takes one
    round's groups and says which passed (the groups run at once, each a collective of
    its own). A halving that isolates a single node tests it together with a node known
    good (`reference`, or one from a group that passed), since a collective needs two."""
    pending: list[tuple[str, ...]] = [tuple(sorted(set(nodes)))]
    culprits: list[str] = []
    rounds: list[list[tuple[str, ...]]] = []
    known_good = reference
    while pending and len(rounds) < max_rounds:
        jobs: list[tuple[tuple[str, ...], tuple[str, ...]]] = []  # (group run, suspects in it)
        waiting: list[tuple[str, ...]] = []
        for g in pending:
            if len(g) > 1:
                half = len(g) // 2
                parts = [g[:half], g[half:]]
            else:
                parts = [g]
            for part in parts:
                if len(part) > 1:
                    jobs.append((part, part))
                elif part[0] == known_good:
                    continue  # the reference itself: known good, nothing to run
                elif known_good is not None:
                    jobs.append(((part[0], known_good), part))
                else:
                    waiting.append(part)  # tested once a group has passed
        if not jobs:
            culprits += [x for part in waiting for x in part]  # nothing good to pair with
            break
        rounds.append([job for job, _ in jobs])
        passed = run([job for job, _ in jobs])
        pending = list(waiting)
        for (job, suspects), ok in zip(jobs, passed, strict=True):
            if ok:
                known_good = known_good or job[0]
            elif len(suspects) == 1:
                culprits.append(suspects[0])
            else:
                pending.append(suspects)
    return Bisection(sorted(set(culprits)), rounds)


__all__ = ["Bisection", "Isolation", "bisect", "isolate", "pair_rounds"]
