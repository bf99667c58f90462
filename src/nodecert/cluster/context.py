"""What a cluster run is given and what one pairing found: the nodes, their engine
names, endpoints and specs, the launch host, the engine's settings and the expected
figures, resolved from the inventory before any job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodecert.cluster.judge import Expectation, Reading
from nodecert.inventory.cluster import ClusterConfig
from nodecert.inventory.reader import HostSpec
from nodecert.transport.ssh import Endpoint
from nodecert_node.contract import Threshold


@dataclass
class PairOutcome:
    nodes: tuple[str, str]
    round: int
    reading: Reading
    job: str
    ok: bool
    rails_ok: dict[str, bool] = field(default_factory=dict)
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "round": self.round, "job": self.job,
                "ok": self.ok, "busbw": self.reading.busbw, "oob": self.reading.oob,
                "rails": self.reading.rails or {}, "rails_ok": self.rails_ok,
                "problem": self.reading.problem, "error": self.error}


@dataclass
class ClusterContext:
    """Everything a cluster run needs, resolved from the inventory before any job."""

    nodes: list[str]  # inventory names
    engine_names: dict[str, str]  # inventory name -> the engine's name for it
    specs: dict[str, HostSpec]
    endpoints: dict[str, Endpoint]
    launch: Endpoint
    cfg: ClusterConfig
    exp: Expectation
    simulated: bool
    # error counters may gain this much while the jobs run (net.error_counter_growth_max)
    counter_limit: Threshold = field(default_factory=lambda: Threshold(0, "<=", "errors"))
    # the nodes' resolved thresholds (the scaling stage's floors)
    limits: dict[str, Threshold] = field(default_factory=dict)
    # the scaling job's timed and warm-up steps (the suite's load.scaling_steps/_warmup)
    scaling_steps: tuple[int, int] = (30, 10)
    # the order's shared file system (nodecert_shared_fs), None where it names none
    shared_fs: dict[str, Any] | None = None


__all__ = ["ClusterContext", "PairOutcome"]
