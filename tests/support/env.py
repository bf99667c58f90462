"""The repository, the suite's fixed date, and prerequisites: a missing one skips with its
reason on a developer machine and fails in CI (CI=true), where every one must be there."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
TODAY = dt.date(2026, 11, 29)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(ok: object, reason: str) -> None:
    """A prerequisite: skip with the reason outside CI, fail in CI."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason)


def require_root() -> None:
    require(os.geteuid() == 0, "lab tests need root (network namespaces, overlay mounts, "
                               "nspawn): run the suite as root, as CI does")


def require_tool(*names: str) -> str:
    """The first of `names` on PATH (skip/fail as require() does when none is)."""
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    require(found, f"{' or '.join(names)} is not installed (.ci/run installs it)")
    return str(found)
