"""Version parsing and ordering: examples, properties, and dpkg as the oracle."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodecert.core.errors import VersionError
from nodecert.stack.versions import (
    DebianVersion,
    DottedVersion,
    DriverVersion,
    NcclVersion,
    TorchVersion,
)

# --- examples from the reference -----------------------------------------------------------

def test_dcgm_epoch() -> None:
    v = DebianVersion.parse("1:4.2.3-1")
    assert (v.epoch, v.upstream, v.revision) == (1, "4.2.3", "1")
    assert str(v) == "1:4.2.3-1"
    # The epoch dominates: 1:4.2.3-1 is newer than any epoch-less 4.x.
    assert v > DebianVersion.parse("9.9.9-1")


def test_ubuntu_driver_version() -> None:
    v = DebianVersion.parse("580.173.02-0ubuntu0.24.04.1")
    assert (v.upstream, v.revision) == ("580.173.02", "0ubuntu0.24.04.1")


def test_nccl_with_cuda_suffix() -> None:
    n = NcclVersion.parse("2.21.5-1+cuda12.4")
    assert (str(n.release), n.revision, n.cuda) == ("2.21.5", 1, "12.4")
    d = DebianVersion.parse("2.21.5-1+cuda12.4")
    assert d.revision == "1+cuda12.4"
    assert d < DebianVersion.parse("2.21.5-1+cuda12.5")


def test_nccl_extra_suffix_kept() -> None:
    n = NcclVersion.parse("2.30.1-1+cuda13.0~custom1")
    assert n.cuda == "13.0" and n.extra == "~custom1"


@pytest.mark.parametrize("bad", ["2.21.5-1", "2.21.5+cuda12.4", "2.21-1+cuda12.4", ""])
def test_nccl_without_suffix_rejected(bad: str) -> None:
    with pytest.raises(VersionError):
        NcclVersion.parse(bad)


@pytest.mark.parametrize(("a", "b"), [
    ("580.95.05", "580.126.09"),   # numeric, not lexical: 95 < 126
    ("570.26", "570.124.06"),      # two-part versions compare numerically too
    ("550.163.01", "570.86.15"),
])
def test_driver_order(a: str, b: str) -> None:
    assert DriverVersion.parse(a) < DriverVersion.parse(b)


@pytest.mark.parametrize("bad", ["580", "58.95.05", "580.95.05.1", "580.x.05", " 580.95.05"])
def test_driver_rejects(bad: str) -> None:
    with pytest.raises(VersionError):
        DriverVersion.parse(bad)


@pytest.mark.parametrize("bad", ["", "a1.0", "1.0-", "x:1.0", "1.0-rev_1", "1.0 "])
def test_debian_rejects(bad: str) -> None:
    with pytest.raises(VersionError):
        DebianVersion.parse(bad)


def test_torch_labels() -> None:
    assert TorchVersion.parse("2.8.0+cu128").cuda == "12.8"
    assert TorchVersion.parse("2.9.1+cu130").cuda == "13.0"
    assert TorchVersion.parse("2.3.0+cu118").cuda == "11.8"
    with pytest.raises(VersionError):
        TorchVersion.parse("2.8.0")


def test_dotted_equality_ignores_trailing_zeros() -> None:
    assert DottedVersion.parse("12.8") == DottedVersion.parse("12.8.0")
    assert DottedVersion.parse("12.10") > DottedVersion.parse("12.9.1")


# --- properties ------------------------------------------------------------------------------

_upstream = st.builds(
    lambda head, tail: head + tail,
    st.text("0123456789", min_size=1, max_size=4),
    st.text("0123456789.+~abcz", max_size=8),
)
_revision = st.text("0123456789.+~abuntz", min_size=1, max_size=8)
debian_versions = st.builds(
    lambda epoch, up, rev: (f"{epoch}:" if epoch is not None else "") + up
    + (f"-{rev}" if rev is not None else ""),
    st.one_of(st.none(), st.integers(0, 3)),
    _upstream,
    st.one_of(st.none(), _revision),
)


@given(debian_versions)
def test_debian_round_trip(text: str) -> None:
    assert str(DebianVersion.parse(text)) == text


@given(debian_versions, debian_versions)
def test_debian_order_is_antisymmetric(a: str, b: str) -> None:
    va, vb = DebianVersion.parse(a), DebianVersion.parse(b)
    assert va.compare(vb) == -vb.compare(va)


@given(debian_versions, debian_versions, debian_versions)
def test_debian_order_is_transitive(a: str, b: str, c: str) -> None:
    va, vb, vc = sorted([DebianVersion.parse(x) for x in (a, b, c)])
    assert va <= vb <= vc
    assert va <= vc


@given(st.integers(100, 999), st.integers(0, 998), st.one_of(st.none(), st.integers(0, 99)))
def test_driver_round_trip_and_order(branch: int, minor: int, patch: int | None) -> None:
    text = f"{branch}.{minor}" + (f".{patch:02d}" if patch is not None else "")
    v = DriverVersion.parse(text)
    assert str(v) == text
    assert v.branch == branch
    assert v < DriverVersion.parse(f"{branch}.{minor + 1}")


@given(st.integers(1, 9), st.integers(0, 40), st.integers(0, 20), st.integers(1, 3),
       st.integers(11, 13), st.integers(0, 9))
def test_nccl_round_trip(a: int, b: int, c: int, rev: int, cmaj: int, cmin: int) -> None:
    text = f"{a}.{b}.{c}-{rev}+cuda{cmaj}.{cmin}"
    n = NcclVersion.parse(text)
    assert str(n) == text and n.cuda == f"{cmaj}.{cmin}" and n.revision == rev
    # The same string is a valid Debian version, and the suffix orders as dpkg would.
    assert DebianVersion.parse(text) < DebianVersion.parse(f"{a}.{b}.{c}-{rev}+cuda{cmaj + 1}.0")


DPKG = shutil.which("dpkg")


# dpkg is the oracle: nodecert's control machines and CI are Debian-family hosts.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(debian_versions, debian_versions)
def test_debian_order_matches_dpkg(a: str, b: str) -> None:
    assert DPKG is not None, "dpkg not found: install it (apt-get install dpkg)"
    ours = DebianVersion.parse(a).compare(DebianVersion.parse(b))
    for op, expected in (("lt", ours < 0), ("eq", ours == 0), ("gt", ours > 0)):
        rc = subprocess.run([DPKG, "--compare-versions", a, op, b], check=False,
                            timeout=10, capture_output=True).returncode
        assert (rc == 0) is expected, f"dpkg says {a} {op} {b} is {rc == 0}"
