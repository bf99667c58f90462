"""Pairing rounds, isolation and bisection: the decisions that name a bad node."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert.cluster.pairing import bisect, isolate, pair_rounds


@given(st.integers(min_value=2, max_value=40), st.integers(min_value=1, max_value=4))
def test_every_node_meets_enough_different_partners(n: int, partners: int) -> None:
    nodes = [f"n{i:02d}" for i in range(n)]
    rounds = pair_rounds(nodes, partners)
    met: dict[str, set[str]] = {x: set() for x in nodes}
    for pairs in rounds:
        busy = [x for p in pairs for x in p]
        assert len(busy) == len(set(busy))  # a node runs one job per round
        for a, b in pairs:
            assert a != b
            met[a].add(b)
            met[b].add(a)
    assert all(len(v) >= min(partners, n - 1) for v in met.values())
    assert len(rounds) <= min(partners, n - 1) + 1 + (n % 2)


def _fabric(bad: set[str]) -> dict[tuple[str, str], bool]:
    nodes = [f"n{i:02d}" for i in range(16)]
    return {p: not (set(p) & bad) for r in pair_rounds(nodes, 2) for p in r}


def test_a_slow_node_among_16_is_named_after_one_pairing() -> None:
    iso = isolate(_fabric({"n05"}))
    assert iso.culprits == ["n05"] and not iso.suspects
    assert len(iso.healthy) == 15


def test_two_bad_neighbours_are_suspects_not_a_guess() -> None:
    # n00 and n01 only ever meet each other and bad nodes: the evidence cannot say which
    results = {("n00", "n01"): False, ("n00", "n02"): False, ("n01", "n02"): False,
               ("n02", "n03"): True}
    iso = isolate(results)
    assert iso.culprits == [] and iso.suspects == ["n00", "n01"]
    assert iso.healthy == ["n02", "n03"]


@pytest.mark.parametrize("bad", [{"n07"}, {"n00"}, {"n15"}, {"n03", "n12"}])
def test_bisection_names_the_culprits(bad: set[str]) -> None:
    nodes = [f"n{i:02d}" for i in range(16)]
    seen: list[int] = []

    def run(groups: list[tuple[str, ...]]) -> list[bool]:
        seen.append(len(groups))
        return [not (set(g) & bad) for g in groups]

    got = bisect(nodes, run)
    assert got.culprits == sorted(bad)
    if len(bad) == 1:
        assert len(got.rounds) <= 5  # about log2(16) rounds
    assert all(len(g) >= 2 for r in got.rounds for g in r)  # a collective needs two


def test_a_whole_that_fails_only_at_scale_names_nobody() -> None:
    got = bisect([f"n{i}" for i in range(8)], lambda groups: [True] * len(groups))
    assert got.culprits == [] and len(got.rounds) == 1
