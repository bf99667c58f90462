"""The lab's rack endpoint emulator writes its tree out only when it changed: a switch
tray's unchanged tick leaves the served tree as it is, a fault written to component.json
is served at the next tick, and a power shelf's readings (which move with time) are
written again. It renders when asked, at most once a tick: an endpoint nobody reads
does no work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodecert.lab import racksim

pytestmark = pytest.mark.unit


def _component(d: Path, **doc: object) -> None:
    (d / "component.json").write_text(json.dumps(doc))


def _served(d: Path) -> str:
    return (d / "mockup").resolve().name


def test_an_unchanged_switch_tray_is_not_written_again(tmp_path: Path) -> None:
    _component(tmp_path, kind="switch_tray", name="nvsw-01", gpus=[])
    tree = racksim.render(tmp_path)
    first = _served(tmp_path)
    assert racksim.render(tmp_path, tree) == tree
    assert _served(tmp_path) == first
    assert [p.name for p in tmp_path.glob("tree.*")] == [first]


def test_a_fault_is_served_at_the_next_tick(tmp_path: Path) -> None:
    _component(tmp_path, kind="switch_tray", name="nvsw-01", gpus=[])
    tree = racksim.render(tmp_path)
    first = _served(tmp_path)
    _component(tmp_path, kind="switch_tray", name="nvsw-01", gpus=[],
               faults={"firmware": {"version": "9.9.9"}})
    after = racksim.render(tmp_path, tree)
    assert after != tree and _served(tmp_path) != first
    assert json.loads((tmp_path / "mockup" / next(iter(after)) / "index.json")
                      .read_text()) == after[next(iter(after))]


def test_a_power_shelf_is_written_as_its_readings_move(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _component(tmp_path, kind="power_shelf", name="ps-01")
    clock = iter([100.0, 103.0])
    monkeypatch.setattr(racksim.time, "time", lambda: next(clock))
    tree = racksim.render(tmp_path)
    first = _served(tmp_path)
    assert racksim.render(tmp_path, tree) != tree
    assert _served(tmp_path) != first


def test_the_tree_is_made_again_when_asked_and_a_tick_old(tmp_path: Path) -> None:
    _component(tmp_path, kind="switch_tray", name="nvsw-01", gpus=[])
    now = [50.0]
    fresh = racksim.Fresh(tmp_path, clock=lambda: now[0])
    first = _served(tmp_path)
    _component(tmp_path, kind="switch_tray", name="nvsw-01", gpus=[],
               faults={"firmware": {"version": "9.9.9"}})
    now[0] += racksim.TICK_S / 2
    fresh()  # asked within the tick: the tree served stays
    assert _served(tmp_path) == first
    now[0] += racksim.TICK_S / 2
    fresh()  # a tick old: the fault is served
    assert _served(tmp_path) != first
    assert "9.9.9" in json.dumps(fresh.served)


def test_an_endpoint_nobody_asks_runs_nothing_beside_its_server(tmp_path: Path) -> None:
    import threading
    _component(tmp_path, kind="power_shelf", name="ps-01")
    before = set(threading.enumerate())
    racksim.Fresh(tmp_path)
    assert set(threading.enumerate()) == before  # no ticking thread: work only when asked
