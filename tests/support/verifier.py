"""NVIDIA's local GPU verifier, in the environment of its own that .ci/run makes
(.venv/verifier: it pins its own cryptography, lxml and PyJWT), and the helper run in it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support.env import REPO, require

FIXTURE = REPO / "tests" / "fixtures" / "attestation" / "replayed-sample-offline.json"


def verifier_python() -> str:
    path = os.environ.get("NODECERT_VERIFIER_PYTHON") or str(REPO / ".venv" / "verifier" /
                                                             "bin" / "python")
    require(Path(path).exists(), f"NVIDIA's local verifier is not installed at {path} "
                                 "(.ci/run: python3 -m venv .venv/verifier && "
                                 ".venv/verifier/bin/pip install nv-local-gpu-verifier==2.7.3)")
    return path


def helper(tmp: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """Run nodecert_node.attest_gpu in the verifier's Python: (exit code, its document
    or None, its stderr)."""
    out = tmp / f"out-{len(list(tmp.glob('out-*')))}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "validators"), "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run([verifier_python(), "-m", "nodecert_node.attest_gpu", *args,
                        "--out", str(out)], cwd=tmp, env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    doc = json.loads(out.read_text()) if out.exists() else None
    return p.returncode, doc, p.stderr


def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())
