"""Where the node keeps its state: the plans the control side sent, scheduled-run history.

The state directory exists only where the validators role installed the schedule;
elsewhere nothing is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from nodecert_node.contract import write_atomic

STATE = os.environ.get("NODECERT_STATE_DIR", "/var/lib/nodecert")


def plan_path(suite: str) -> str:
    return os.path.join(STATE, "plans", f"{suite}.json")


def for_schedule(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as the timer may use it: never a raw device, never the permission to
    overwrite one (an operator allows that for one attended run, not for every night)."""
    out: dict[str, Any] = json.loads(json.dumps(plan))
    storage = (out.get("options") or {}).get("storage")
    if isinstance(storage, dict):
        storage["allow_raw_devices"] = []
        storage["targets"] = [t for t in storage.get("targets") or []
                              if isinstance(t, str) and not t.startswith("/dev/")]
    return out


def save_plan(plan: dict[str, Any]) -> None:
    """Keep the control side's plan for scheduled runs (only where the schedule is
    installed: the state directory exists), without raw-device targets or permission.
    A partial plan (some of the suite's checks) is never kept: the schedule would then
    judge only those."""
    if not os.path.isdir(STATE) or not plan.get("suite") or plan.get("partial"):
        return
    plan = for_schedule(plan)
    with contextlib.suppress(OSError):
        os.makedirs(os.path.join(STATE, "plans"), exist_ok=True)
        write_atomic(plan_path(str(plan["suite"])), json.dumps(plan).encode(), mode=0o600)


DRAINS = "slurm-drains.json"  # Slurm node -> the reason nodecert drained it with


def kept_drains() -> dict[str, str]:
    """The Slurm drains this node's scheduled runs made (recorded before each drain)."""
    try:
        with open(os.path.join(STATE, DRAINS), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def last_judged(verdicts: tuple[str, ...]) -> dict[str, Any] | None:
    """{verdict, suite, finished} of the newest kept run that judged the node (not
    skipped), or None."""
    hist = os.path.join(STATE, "history")
    try:
        names = sorted((f for f in os.listdir(hist) if f.endswith(".json")), reverse=True)
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(hist, name), encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and not rec.get("skipped") and rec.get("verdict") in verdicts:
            return {k: rec.get(k) for k in ("verdict", "suite", "finished")}
    return None
