"""The shipped stacks' framework locks: every wheel of each environment pinned by sha256,
the lock closed over what its wheels require, and the framework role and mirror build
installing exactly the lock (other indexes only beside it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from nodecert.core.errors import ManifestError
from nodecert.stack.manifest import Stack, find_stack, list_stacks, load_stack
from support.env import REPO
from support.stacks import unlocked_text

pytestmark = pytest.mark.unit

LOCKS = REPO / "tests" / "fixtures" / "wheel-locks"
PYPI = "https://pypi.org/simple"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unmet(lock: dict[str, Any], requires: dict[str, list[str]],
          environment: dict[str, str]) -> list[str]:
    """What the locked wheels require (their Requires-Dist, markers evaluated for the node)
    that the lock does not hold at a version the requirement allows."""
    have = {_norm(pin.split("==")[0]): pin.split("==")[1] for pin in lock}
    out = []
    for pin, reqs in sorted(requires.items()):
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**environment, "extra": ""}):
                continue
            got = have.get(_norm(req.name))
            if got is None or not req.specifier.contains(got, prereleases=True):
                out.append(f"{pin} needs {req}: lock has {got or 'nothing'}")
    return out


@pytest.mark.parametrize("stack", sorted(s.name for s in list_stacks()))
def test_every_shipped_stack_is_locked_and_closed(stack: str) -> None:
    """Each shipped stack pins every wheel of its environment by sha256, and what each
    locked wheel requires on the node (CPython 3.12, x86_64 Linux) is in the lock at an
    allowed version: pip --require-hashes can install it without resolving anything."""
    s = find_stack(stack)
    fw = s.framework
    recorded = json.loads((LOCKS / f"{stack}.json").read_text())
    assert fw.hashes, f"{stack} ships no lock"
    assert {_norm(p) for p in fw.hashes} == {_norm(p) for p in recorded["wheels"]}
    assert f"torch=={fw.pytorch}" in fw.hashes
    if fw.tensorflow:
        assert f"tensorflow=={fw.tensorflow}" in fw.hashes
    assert all(len(d) == 1 and re.fullmatch(r"[0-9a-f]{64}", d[0]) for d in fw.hashes.values())
    assert fw.hashes_source and "L2" in fw.hashes_source
    assert fw.extra_index_urls == (PYPI,)
    requires = {pin: w["requires_dist"] for pin, w in recorded["wheels"].items()}
    assert unmet(dict(fw.hashes), requires, recorded["environment"]) == []


def test_an_open_lock_is_found() -> None:
    """The closure check fails when a wheel's requirement is missing or at another version."""
    s = find_stack("r580-cuda13.0")
    recorded = json.loads((LOCKS / "r580-cuda13.0.json").read_text())
    requires = {pin: w["requires_dist"] for pin, w in recorded["wheels"].items()}
    env = recorded["environment"]
    lock = dict(s.framework.hashes)
    del lock["mpmath==1.3.0"]
    assert unmet(lock, requires, env) == [
        "sympy==1.14.0 needs mpmath<1.4,>=1.1.0: lock has nothing"]
    lock = dict(s.framework.hashes)
    lock["nvidia-nccl-cu13==2.28.3"] = lock.pop("nvidia-nccl-cu13==2.27.7")
    got = unmet(lock, requires, env)
    assert len(got) == 1 and "torch==2.9.1+cu130 needs nvidia-nccl-cu13==2.27.7" in got[0]
    # a requirement for another machine (markers) is not asked of the lock
    assert unmet({}, {"x==1": ['pywin32; sys_platform == "win32"']}, env) == []


def test_the_lock_sources_are_the_registrys() -> None:
    """The framework wheel's digest and the CUDA pins cite their public source; the
    wheels PyPI serves are named with their file, the torch wheel with how its
    requirements were read."""
    from nodecert.stack.compat import default_matrix
    sources = default_matrix().sources
    for s in list_stacks():
        for key in s.framework.hashes_source:
            assert key in sources
        recorded = json.loads((LOCKS / f"{s.name}.json").read_text())
        for pin, wheel in recorded["wheels"].items():
            if pin.startswith("torch=="):
                assert "METADATA" in wheel["from"]
            else:
                assert (wheel["file"].endswith(".whl") and "x86_64" in wheel["file"]) \
                    or wheel["file"].endswith("-any.whl"), wheel


def _write(tmp_path: Path, text: str, sub: str = "s") -> Path:
    p = tmp_path / sub / "r580-cuda13.0.yml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


def test_a_lock_names_its_framework_its_sources_and_its_indexes(tmp_path: Path) -> None:
    base = unlocked_text("r580-cuda13.0")
    assert load_stack(_write(tmp_path, base)).framework.hashes == {}
    at = '  source: P1\n'
    digest = "a" * 64
    for extra, why in (
            (f'  hashes_source: [L2]\n  hashes:\n    "numpy==2.0.0": [{digest}]\n',
             "does not hold torch==2.9.1+cu130"),
            (f'  hashes_source: [L2]\n  hashes:\n    "torch==2.9.0+cu130": [{digest}]\n',
             "it has torch==2.9.0+cu130"),
            (f'  hashes:\n    "torch==2.9.1+cu130": [{digest}]\n',
             "must say where its digests were read"),
            (f'  hashes_source: [NOPE]\n  hashes:\n    "torch==2.9.1+cu130": [{digest}]\n',
             "source 'NOPE' is not in"),
            ('  extra_index_urls: ["https://pypi.org/simple"]\n',
             "extra_index_urls without hashes")):
        with pytest.raises(ManifestError, match=re.escape(why)):
            load_stack(_write(tmp_path, base.replace(at, at + extra), "bad"))
    ok = load_stack(_write(tmp_path, base.replace(at, at + (
        f'  hashes_source: [L2]\n  extra_index_urls: ["{PYPI}"]\n'
        f'  hashes:\n    "torch==2.9.1+cu130": [sha256:{digest}]\n')), "ok"))
    assert ok.framework.hashes == {"torch==2.9.1+cu130": (digest,)}
    assert ok.framework.extra_index_urls == (PYPI,)


# --- the framework role installs the lock, with other indexes only beside it ----------------

def _role_args(manifest: Stack, index_url: str, site: dict[str, Any]) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    tasks = yaml.safe_load((REPO / "roles/framework/tasks/main.yml").read_text())
    facts = next(t for t in tasks if t["name"] == "Work out the wheels to install")
    pip = next(t for t in tasks if t["name"] == "Install the pinned framework wheels into "
                                                "the environment")
    raw = yaml.safe_load(manifest.path.read_text())
    variables: dict[str, Any] = {
        "nodecert_common_manifest": raw, "nodecert_common_stack": manifest.name,
        "framework_index_url": index_url, "framework_wheel_hashes": site,
        "framework_pip_extra_args": []}
    templar = Templar(loader=DataLoader(), variables=variables)
    for key, expr in facts["ansible.builtin.set_fact"].items():
        variables[key] = templar.template(trust_as_template(expr))
    templar = Templar(loader=DataLoader(), variables=variables)
    return str(templar.template(trust_as_template(pip["ansible.builtin.pip"]["extra_args"])))


def test_the_role_takes_dependencies_from_pypi_only_by_digest() -> None:
    """From the stack's own index, a locked stack's dependency wheels may come from PyPI
    (pip --require-hashes: only the locked bytes); from a site's mirror, nothing but the
    mirror is asked."""
    s = find_stack("r580-cuda13.0")
    own = _role_args(s, "", {})
    assert own.split() == ["--index-url", s.framework.index_url, "--require-hashes",
                           f"--extra-index-url={PYPI}"]
    mirror = _role_args(s, "file:///srv/mirror/simple", {})
    assert mirror.split() == ["--index-url", "file:///srv/mirror/simple", "--require-hashes"]
    # a site's own lock replaces the stack's; still by digest
    site = _role_args(s, "file:///srv/mirror/simple",
                      {s.name: {"torch==2.9.1+cu130": ["b" * 64]}})
    assert "--require-hashes" in site.split()
