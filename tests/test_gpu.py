"""The gpu tier: the node checks on a real NVIDIA GPU (pytest -m gpu, on a GPU machine).

Never selected by default (pyproject's addopts deselect `gpu`). On a machine without
a GPU it skips with the reason; in CI (no GPU there) it is never selected.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodecert.inventory.reader import HostSpec
from nodecert.profiles import thresholds
from nodecert.validation.plan import build_plan
from nodecert_node.contract import Result, Verdict
from support.env import REPO, require

pytestmark = pytest.mark.gpu

MODELS = {"NVIDIA H200": "H200-SXM", "NVIDIA H100 80GB HBM3": "H100-SXM",
          "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB", "NVIDIA L40S": "L40S"}


def real_gpus() -> list[str]:
    require(shutil.which("nvidia-smi"), "no nvidia-smi: this tier needs a real NVIDIA GPU")
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60, check=False)
    require(out.returncode == 0, f"nvidia-smi failed: {out.stdout}{out.stderr}")
    return [n.strip() for n in out.stdout.splitlines() if n.strip()]


@pytest.mark.parametrize("check", ["hardware.inventory", "hardware.pcie", "health.gpu",
                                   "power.limit"])
def test_node_checks_read_the_real_gpu(check: str, tmp_path: Path) -> None:
    names = real_gpus()
    model = MODELS.get(names[0])
    require(model, f"no threshold profile for {names[0]!r}")
    spec = HostSpec(name="gpu", address="127.0.0.1", port=22, groups=(), gpu_model=str(model),
                    gpu_count=len(names), cpu_cores=1, ram_gb=1, nvme_count=0)
    plan = build_plan(spec, thresholds.suite("standard"), None, "gpu", cli_thresholds={},
                      scratch=str(tmp_path), checks=(check,))
    p = subprocess.run([sys.executable, "-m", "nodecert_node", "check", check],
                       input=json.dumps(plan.as_dict()), capture_output=True, text=True,
                       cwd=REPO / "validators", timeout=300, check=False)
    res = Result.from_dict(json.loads(p.stdout.strip().splitlines()[-1]))
    # A real GPU's output is read: never a parse error or a crash, never SIMULATED.
    assert res.verdict is not Verdict.ERROR, (res.summary, res.evidence)
    assert not res.simulated
