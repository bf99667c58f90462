"""pytest's hooks, the test tiers and the shared fixtures (helpers live in tests/support).

Tiers (markers): `unit` -- pure CPU, no root, fast (the development loop, `pytest -m
unit`); `integration` -- no root, but end to end on this machine: the node side in child
processes against the hardware simulator, the real PyTorch on the CPU, real fio, wheel
and mirror builds (seconds each; `pytest -m integration`); `lab` -- root, network
namespaces, the lab hosts; `gpu` -- a real NVIDIA GPU (run on a GPU machine with
`pytest -m gpu`; never selected by default). A test that uses the lab fixtures, or a
module/test marked `lab`, is a lab test; one marked `integration` is an integration
test; every other test is a unit test. A missing prerequisite skips with its reason on a
developer machine and fails in CI (CI=true), where every prerequisite must be installed.
"""

from __future__ import annotations

import os
import sys

# Bytecode outside the checkout. Where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines) every worker would compile the sources and rewrite the tests'
# asserts again on every run, a third of the unit tier's time; the tests keep that
# bytecode in the user's cache instead, never in the checkout. Set first, so that the
# modules this file imports are kept there too.
if sys.dont_write_bytecode and not sys.pycache_prefix:
    sys.pycache_prefix = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "nodecert-tests", "pycache")
    sys.dont_write_bytecode = False

import atexit
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from nodecert.stack.manifest import Stack, load_stack
from support.env import require_root
from support.lab import lab_config
from support.stacks import manifest, write_manifest


@pytest.fixture
def build_stack(tmp_path: Path) -> Callable[..., Stack]:
    def build(**kwargs: Any) -> Stack:
        return load_stack(write_manifest(tmp_path, manifest(**kwargs)))
    return build


# Tests never write into the checkout: no example database for hypothesis, and its
# other caches in a private temporary directory, removed at exit (pytest's cache is
# off in pyproject.toml).
settings.register_profile("nodecert", database=None)
settings.load_profile("nodecert")
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="nodecert-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)
LAB_FIXTURES = frozenset({"lab", "fresh_h1"})
# The fixtures that run the lab's Redfish emulators as servers on loopback (a rack's
# management endpoints, a node's BMC): a test using one runs end to end over real
# HTTPS and sampling intervals, an integration test.
SERVER_FIXTURES = frozenset({"endpoints", "bmc"})


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a verifier remembers (the revocation lists it has seen) goes to a directory
    of each test's own, never the user's: tests stay independent and leave nothing."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))

# The test files holding lab tests (marked, or using the lab fixtures): pytest-xdist's
# controller sees only test ids, so the split of the whole suite over two workers is by
# file. Collection checks that no lab test lives in any other file.
LAB_FILES = frozenset(
    f.name for f in Path(__file__).parent.glob("test_*.py")
    if re.search(r"mark\.lab\b|\b(?:lab|fresh_h1)\s*:", f.read_text()))


# The lab files that bring up labs of their own (their own subnet, bridge and names) and
# never use the shared one (`lab`, `fresh_h1`), each named for the unit of work it is in:
# the lab tier runs these units beside the files that share the session's lab, on other
# workers. Collection checks the claim.
OWN_LAB_FILES = {"test_cluster_lab.py": "the cluster lab",
                 # a Slurm cluster of 18 trays: the heaviest lab never runs beside the
                 # cluster lab's timed Ctrl-C test
                 "test_rack_lab.py": "the cluster lab",
                 # Ansible provisioning two trays: a unit of its own, taken by whichever
                 # worker frees up first (with the cluster lab's, that unit was the tier's
                 # long pole; docs/benchmarks.md)
                 "test_imex_lab.py": "the imex lab",
                 "test_validate_lab.py": "the validation lab",
                 "test_bmc_container_lab.py": "small own labs",
                 "test_roce_fabric_lab.py": "small own labs"}
# Single tests with labs of their own in files that otherwise share the session's lab.
OWN_LAB_TESTS = frozenset({
    "test_lab.py::test_down_after_a_crash_leaves_nothing_behind",
    "test_lab.py::test_refuses_a_subnet_already_in_use",
    "test_lab.py::test_never_touches_a_bridge_it_did_not_create",
    "test_lab.py::test_never_takes_another_labs_objects_for_its_own_leftovers",
    "test_lab.py::test_lab_up_grows_and_shrinks_a_running_lab",
    "test_lab.py::test_validate_as_a_non_root_user_through_a_jump_host"})
# The lab tier's workers: the shared lab, the cluster's and the validation's labs each
# keep one busy from the start; the small own labs go to whichever frees first. On two
# cores each lab test then runs about 1.5 times as long, and the tier still ends sooner
# (docs/benchmarks.md).
LAB_WORKERS = 3
# The order the lab tier hands its units to the workers: the longest first (the longest-
# processing-time rule), so that no long unit waits behind a short one and the short
# ones fill in at the end. Seconds each took in a CI rehearsal on this 2-core machine
# (docs/benchmarks.md): the cluster lab's 2,450, the shared lab's 2,400, the validation
# lab's 1,730, the small own labs' 845, the IMEX lab's 330.
UNIT_ORDER = ("the cluster lab", "the shared lab", "the validation lab", "small own labs",
              "the imex lab")


def _own_lab_unit(nodeid: str) -> str | None:
    path, _, test = nodeid.partition("::")
    name = path.rsplit("/", 1)[-1]
    if name in OWN_LAB_FILES:
        return OWN_LAB_FILES[name]
    return "small own labs" if f"{name}::{test.split('[', 1)[0]}" in OWN_LAB_TESTS else None


def _own_lab(nodeid: str) -> bool:
    return _own_lab_unit(nodeid) is not None

# CI's first phase (.ci/run): every test but the lab's, on one worker per CPU; the lab
# tier follows (`-m lab`), never beside CPU-heavy tests: a lab verdict must not depend
# on how busy the machine is. It runs on LAB_WORKERS workers: one takes every file that
# shares the session's lab, the others the files with labs of their own.
NOT_LAB = "not lab and not gpu"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`pytest -m unit` (the development loop), `-m integration` and `-m "not lab and not
    gpu"` (CI's first phase) run on one worker per CPU (pytest-xdist): those tests share
    nothing. The whole suite (plain `pytest`) runs on two workers: every file with lab
    tests on one of them, in order (one lab at a time, session fixtures in one process),
    the other files beside it. `-n 0`: one process."""
    if (not hasattr(config.option, "numprocesses") or config.option.numprocesses is not None
            or hasattr(config, "workerinput")):
        return
    markexpr = config.getoption("markexpr", "")
    if markexpr in ("unit", "integration", NOT_LAB):
        config.option.numprocesses = "auto"
    elif markexpr in ("not gpu", "lab"):  # the default (both tiers), or the lab tier
        config.option.numprocesses = LAB_WORKERS if markexpr == "lab" else 2
        config.option.dist = "loadscope"
        # the lab tier's units in UNIT_ORDER (collection leaves them so), not by their
        # number of tests
        config.option.loadscopereorder = markexpr != "lab"


def _lab_scope(nodeid: str, markexpr: str) -> str:
    """The unit of work a test belongs to when the suite runs on several workers.

    Whole suite: every lab file is one unit (one lab at a time), each other test its own.
    Lab tier: the files sharing the session's lab are one unit; those with labs of their
    own are in the units OWN_LAB_FILES names."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    if markexpr == "lab":
        return _own_lab_unit(nodeid) or "the shared lab"
    return "lab" if name in LAB_FILES else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """On the lab's workers: the lab files in the units `_lab_scope` names."""
    markexpr = config.getoption("markexpr", "")
    if config.getvalue("dist") != "loadscope" or markexpr not in ("not gpu", "lab"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LabUnits(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _lab_scope(nodeid, markexpr)

    return LabUnits(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_tiers(items)
    if config.getoption("markexpr", "") == "lab":
        # stable: a unit's tests keep their order
        items.sort(key=lambda i: UNIT_ORDER.index(_lab_scope(i.nodeid, "lab")))


def _mark_tiers(items: list[pytest.Item]) -> None:
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
            if _own_lab(item.nodeid) and LAB_FIXTURES & set(
                    getattr(item, "fixturenames", ())):
                raise pytest.UsageError(
                    f"{item.nodeid} uses the shared lab, but it is in OWN_LAB_FILES or "
                    "OWN_LAB_TESTS (it runs beside the shared lab's tests, in another "
                    "process): use a lab of its own, or take it out of those")
        elif item.get_closest_marker("integration") or SERVER_FIXTURES & set(
                getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        else:
            item.add_marker(pytest.mark.unit)
        tiers = [m for m in ("unit", "integration", "lab") if item.get_closest_marker(m)]
        if len(tiers) > 1:
            # one test, one tier: `pytest -m unit` must never run an integration test
            raise pytest.UsageError(
                f"{item.nodeid} is in {len(tiers)} tiers ({', '.join(tiers)}): a test is in "
                "one; drop the module's tier mark where some of its tests are in another")


# --- the lab (needs root; CI runs as root) -----------------------------------------------

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
