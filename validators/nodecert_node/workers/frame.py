"""What the framework workers share: their event lines, and how they start -- the
stack's PyTorch imported, or an error event saying it cannot be; in the lab, the
SIMULATED torch's hardware model answering in the worker's place.

The workers run as scripts under the stack's python (each puts its package on the path
first), and are imported as modules by the node side and the tests.
"""

from __future__ import annotations

import json
from typing import Any

# What the lab's SIMULATED framework wheels carry (nodecert.lab.wheelhouse): a real
# framework has no such attribute.
LAB_HOOK = "_nodecert_lab_worker"


def emit(event: str, **kw: Any) -> None:
    """One event: a JSON object on its own line, flushed at once (the node side reads
    the stream as it comes)."""
    print(json.dumps(dict(event=event, **kw), sort_keys=True), flush=True)


def start_torch(worker: str, args: dict[str, Any]) -> tuple[Any, int | None]:
    """(torch, None) to go on; (None, exit code) when the worker is done already:
    PyTorch cannot be imported (3, with an error event), or the lab's simulated torch
    answered for it."""
    try:
        import torch
    except ImportError as exc:
        emit("error", message=f"PyTorch is not importable in this environment: {exc}")
        return None, 3
    sim = getattr(torch, LAB_HOOK, None)
    if sim is not None:  # the lab's SIMULATED torch: its hardware model answers
        return None, int(sim(worker, args))
    return torch, None
