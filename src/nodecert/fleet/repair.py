"""What to do about a fault: each fault code's action chain (validators/fault-codes.yml),
the action NVIDIA's health tooling names for it, and whether a repair must be proven
under load before the node goes back into service."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.fleet.samples import FleetDataError
from nodecert.profiles.datafiles import validators_dir

NVIDIA_ACTIONS = ("NONE", "COMPONENT_RESET", "CONTACT_SUPPORT", "RUN_FIELDDIAG", "RESTART_VM",
                  "RESTART_BM", "REPLACE_VM", "RUN_DCGMEUD", "RESTART_APP", "UNKNOWN")


@dataclass(frozen=True)
class Action:
    code: str
    chain: tuple[str, ...]
    nvidia: str  # NVSentinel RecommendedAction
    loaded_retest: bool
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "chain": list(self.chain), "nvidia": self.nvidia,
                "loaded_retest": self.loaded_retest, "source": self.source}


UNKNOWN = Action("", ("drain", "service"), "CONTACT_SUPPORT", True,
                 "REPAIR (a fault code this list does not hold: treated as hardware)")


def codes_file() -> Path:
    return validators_dir() / "fault-codes.yml"


@functools.lru_cache(maxsize=4)
def load(path: Path | None = None) -> dict[str, Action]:
    """code -> Action; FleetDataError naming the file and code on anything malformed."""
    path = path or codes_file()
    root = yamldoc.load(path)
    doc = root.value
    actions = set(doc.get("actions") or [])
    sources = doc.get("sources") or {}
    out = {}
    for code, d in (doc.get("codes") or {}).items():
        chain = tuple(d.get("chain") or ())
        bad = [a for a in chain if a not in actions]
        if not chain or bad or d.get("nvidia") not in NVIDIA_ACTIONS \
                or d.get("source") not in sources:
            raise FleetDataError(f"{path}: fault code {code}: needs a chain of known actions "
                                 f"({', '.join(sorted(actions))}), nvidia one of "
                                 f"{', '.join(NVIDIA_ACTIONS)} and a listed source"
                                 + (f" (unknown actions: {', '.join(bad)})" if bad else ""))
        out[str(code)] = Action(str(code), chain, str(d["nvidia"]), d.get("retest") == "load",
                                str(d["source"]))
    return out


def action(code: str) -> Action:
    if not code:
        return Action("", ("none",), "NONE", False, "no fault")
    return load().get(code) or Action(code, UNKNOWN.chain, UNKNOWN.nvidia, True, UNKNOWN.source)


__all__ = ["NVIDIA_ACTIONS", "Action", "action", "codes_file", "load"]
