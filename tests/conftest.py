"""Shared helpers and the test tiers.

Tiers (markers): `unit` -- pure CPU, no root, fast (the development loop, `pytest -m
unit`); `lab` -- root, network namespaces, the lab hosts; `gpu` -- a real NVIDIA GPU
(run on a GPU machine with `pytest -m gpu`; never selected by default). A test that
uses the lab fixtures, or a module/test marked `lab`, is a lab test; every other test
is a unit test. A missing prerequisite skips with its reason on a developer machine
and fails in CI (CI=true), where every prerequisite must be installed.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from nodecert.stack.manifest import Stack, load_stack

REPO = Path(__file__).resolve().parent.parent
TODAY = dt.date(2026, 11, 29)


def manifest(
    *,
    name: str = "test-stack",
    driver: str = "580.173.02",
    modules: str = "open",
    cuda: str = "13.0.0",
    cudnn: str = "9.12.0.46",
    nccl: str = "2.27.7-1+cuda13.0",
    dcgm: str = "4.4.2",
    fm: str | None = "same",
    nscq: str | None = "same",
    torch: str | None = "2.9.1+cu130",
    tensorflow: str | None = None,
    cuda_compat: str | None = None,
    os_names: tuple[str, ...] = ("ubuntu-24.04",),
    cudnn_cuda_major: int | None = None,
    dcgm_cuda_major: int | None = None,
    confirmed: bool = True,
) -> dict[str, Any]:
    """A valid manifest dict whose package strings agree with the component versions."""
    branch = driver.split(".", maxsplit=1)[0]
    cmaj, cmin = cuda.split(".")[:2]
    fm_v = driver if fm == "same" else fm
    nscq_v = driver if nscq == "same" else nscq
    components: dict[str, Any] = {"cuda": cuda, "cudnn": cudnn, "nccl": nccl, "dcgm": dcgm}
    pkgs: list[dict[str, Any]] = [
        {"component": "driver", "name": f"nvidia-driver-{branch}-server-open",
         "version": f"{driver}-0ubuntu1"},
        {"component": "cuda", "name": f"cuda-libraries-{cmaj}-{cmin}", "version": f"{cuda}-1"},
        {"component": "cudnn", "name": f"libcudnn9-cuda-{cudnn_cuda_major or cmaj}",
         "version": f"{cudnn}-1"},
        {"component": "nccl", "name": "libnccl2", "version": nccl},
        {"component": "dcgm", "name": f"datacenter-gpu-manager-4-cuda{dcgm_cuda_major or cmaj}",
         "version": f"1:{dcgm}-1"},
    ]
    if fm_v is not None:
        components["fabric_manager"] = fm_v
        pkgs.append({"component": "fabric_manager", "name": f"nvidia-fabricmanager-{branch}",
                     "version": f"{fm_v}-1"})
    if nscq_v is not None:
        components["nscq"] = nscq_v
        pkgs.append({"component": "nscq", "name": f"libnvidia-nscq-{branch}",
                     "version": f"{nscq_v}-1"})
    if cuda_compat is not None:
        components["cuda_compat"] = cuda_compat
        a, b = cuda_compat.split(".")[:2]
        pkgs.append({"component": "cuda_compat", "name": f"cuda-compat-{a}-{b}",
                     "version": f"{driver}-1"})
    for p in pkgs:
        p.update({"origin": "nvidia", "source": "C", "confirmed": confirmed})
    return {
        "schema": "nodecert.stack/v1",
        "name": name,
        "title": "test stack",
        "status": "supported",
        "driver": {"branch": branch, "version": driver, "kernel_modules": modules},
        "components": components,
        "framework": {"python": "3.12", "index_url": "https://download.pytorch.org/whl/x",
                      "pytorch": torch, "tensorflow": tensorflow, "source": "P1"},
        "repository": {
            "url": "https://developer.download.nvidia.com/compute/cuda/repos/{os_repo}/x86_64/",
            "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/x/3bf863cc.pub",
            "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
            "source": ["R2", "KFP"],
        },
        "artifacts": [],
        "os": {o: {"os_repo": o.replace("-", "").replace(".", ""), "packages": pkgs}
               for o in os_names},
    }


def write_manifest(directory: Path, data: dict[str, Any], text: str | None = None) -> Path:
    path = directory / f"{data['name']}.yml"
    path.write_text(text if text is not None else yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def build_stack(tmp_path: Path) -> Callable[..., Stack]:
    def build(**kwargs: Any) -> Stack:
        return load_stack(write_manifest(tmp_path, manifest(**kwargs)))
    return build


# --- the lab (needs root; CI runs as root) -----------------------------------------------

def lab_config(tag: str, third_octet: int) -> Any:
    import ipaddress

    from nodecert.lab.config import LabConfig
    return LabConfig(subnet=ipaddress.IPv4Network(f"10.78.{third_octet}.0/24"),
                     bridge=f"nc{tag}0", prefix=f"nc{tag}", state_name=f"state-{tag}")


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Tests never write into the checkout: no example database for hypothesis, and its
# other caches in a private temporary directory, removed at exit (pytest's cache is
# off in pyproject.toml).
settings.register_profile("nodecert", database=None)
settings.load_profile("nodecert")
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="nodecert-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)
LAB_FIXTURES = frozenset({"lab", "fresh_h1"})


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


# The test files holding lab tests (marked, or using the lab fixtures): pytest-xdist's
# controller sees only test ids, so the split of the whole suite over two workers is by
# file. Collection checks that no lab test lives in any other file.
LAB_FILES = frozenset(
    f.name for f in Path(__file__).parent.glob("test_*.py")
    if re.search(r"mark\.lab\b|\b(?:lab|fresh_h1)\s*:", f.read_text()))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`pytest -m unit` (the development loop) runs on one worker per CPU (pytest-xdist):
    unit tests share nothing. The whole suite (plain `pytest`, what CI runs) runs on two
    workers: every file with lab tests on one of them, in order (one lab at a time,
    session fixtures in one process), the other files beside it. `-n 0`: one process."""
    if (not hasattr(config.option, "numprocesses") or config.option.numprocesses is not None
            or hasattr(config, "workerinput")):
        return
    markexpr = config.getoption("markexpr", "")
    if markexpr == "unit":
        config.option.numprocesses = "auto"
    elif markexpr == "not gpu":  # the default: both tiers
        config.option.numprocesses = 2
        config.option.dist = "loadscope"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With the whole suite on two workers: the lab files as one unit of work."""
    if config.getvalue("dist") != "loadscope" or config.getoption("markexpr", "") != "not gpu":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LabFilesTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "lab" if nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in LAB_FILES \
                else nodeid

    return LabFilesTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu"):
            continue
        if item.get_closest_marker("lab") or LAB_FIXTURES & set(
                getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.lab)
            if item.path.name not in LAB_FILES:
                raise pytest.UsageError(
                    f"{item.nodeid} is a lab test outside the files known to hold them: "
                    "mark the file (pytestmark = pytest.mark.lab) so that it runs with the "
                    "lab tier, never beside it")
        else:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def lab() -> Any:
    """Lab hosts for the whole run: h1, h3 = HGX H200 (8 GPUs), h2 = L40S (4 GPUs)."""
    require_root()
    from nodecert.lab.hosts import Lab
    the_lab = Lab(lab_config("pt", 1), log=lambda m: None)
    try:
        the_lab.up(nodes=3, profiles=("h200-sxm-8", "l40s-pcie-4"))
        yield the_lab
    finally:
        the_lab.down()  # runs even when tests failed: nothing is left behind


@pytest.fixture
def fresh_h1(lab: Any) -> Any:
    """h1 made pristine for this test (its installed packages and files are gone)."""
    lab.apply_faults(None)
    lab.reset("h1")
    return lab
