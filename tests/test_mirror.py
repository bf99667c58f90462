"""`nodecert mirror`: Debian version order and dependency resolution (pure), then builds
from a local upstream laid out like NVIDIA's flat repository and a local package index,
verification, the signature check and what `provision --mirror` takes from a mirror."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from nodecert.cli import main
from nodecert.core.errors import InventoryError, ManifestError
from nodecert.lab.wheelhouse import build_wheelhouse
from nodecert.provision import aptrepo, mirror
from nodecert.stack.manifest import Stack, find_stack
from support.env import REPO

STACK, OS = "r580-cuda13.0", "debian-12"

# --- Debian version order against dpkg itself ---------------------------------------------

_part = st.text(alphabet="0123456789abz.+~", min_size=1, max_size=6).filter(
    lambda s: s[0].isdigit())


@given(st.tuples(st.integers(0, 2), _part, st.sampled_from(["", "1", "1ubuntu2", "0~b1"])),
       st.tuples(st.integers(0, 2), _part, st.sampled_from(["", "1", "1ubuntu2", "0~b1"])))
def test_version_order_is_dpkgs(a: tuple[int, str, str], b: tuple[int, str, str]) -> None:
    def text(v: tuple[int, str, str]) -> str:
        return (f"{v[0]}:" if v[0] else "") + v[1] + (f"-{v[2]}" if v[2] else "")
    va, vb = text(a), text(b)
    ours = aptrepo.compare_versions(va, vb)
    lt = subprocess.run(["dpkg", "--compare-versions", va, "lt", vb], check=False).returncode
    eq = subprocess.run(["dpkg", "--compare-versions", va, "eq", vb], check=False).returncode
    assert (ours < 0) == (lt == 0) and (ours == 0) == (eq == 0), (va, vb, ours)


def test_relations_are_read_or_refused() -> None:
    got = aptrepo.parse_depends("libc6 (>= 2.17), a:any | b (<< 2~) [amd64], c", "t")
    assert [[str(d) for d in g] for g in got] == [["libc6 (>= 2.17)"], ["a", "b (<< 2~)"],
                                                  ["c"]]
    with pytest.raises(ManifestError, match="cannot read the relation"):
        aptrepo.parse_depends("libc6 (>= 2.17", "t")
    with pytest.raises(ManifestError, match="not a 'Field: value' line"):
        aptrepo.parse_stanzas("Package: a\nthis is not a field\n", "Packages")


# --- a local upstream ---------------------------------------------------------------------

DEPS = {  # extra structure on top of the stack's pins
    "cuda-libraries-13-0": "cuda-cudart-13-0 (>= 13.0.0), cuda-nvrtc-13-0 | cuda-nvrtc-alt",
    "libcudnn9-cuda-13": "libc6 (>= 2.17)",
}
EXTRA = [("cuda-cudart-13-0", "13.0.0-1"), ("cuda-cudart-13-0", "13.0.48-1"),
         ("cuda-nvrtc-alt", "1.0-1"), ("nvidia-open", "590.44.01-1"),
         ("nccl-tests", "2.17.8-1"), ("unrelated", "1.0-1")]
# The container toolkit role's own pins (not the stack's): NVIDIA's repository has them.
TOOLKIT = [(name, "1.17.8-1") for name in ("nvidia-container-toolkit",
           "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1")]


def make_upstream(root: Path, *, drop: str = "") -> Path:
    """A flat repository with the stack's debian-12 pins (and a newer driver, and
    dependencies), Packages and a Release listing its SHA256."""
    repo = root / "upstream"
    repo.mkdir(parents=True)
    pins = [(p.name, str(p.version)) for p in find_stack(STACK).os[OS].packages]
    stanzas = []
    for name, version in pins + EXTRA + TOOLKIT:
        if name == drop:
            continue
        deb = f"{name}_{version.split(':')[-1]}_amd64.deb"
        data = f"{name} {version}\n".encode() * 10
        (repo / deb).write_bytes(data)
        dep = f"Depends: {DEPS[name]}\n" if name in DEPS else ""
        stanzas.append(f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n{dep}"
                       f"Filename: ./{deb}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\nDescription: test\n"
                       " second line\n")
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    (repo / "Release").write_text(
        "Origin: test\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")
    return repo


@pytest.fixture(autouse=True)
def _stand_in_wheels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test index serves stand-in wheels, not the ones the shipped stack is locked to:
    the builds here take the stack without its lock (the shipped lock meets them in
    test_the_shipped_lock_refuses_other_wheels_and_a_site_lock_takes_its_place)."""
    monkeypatch.setattr(mirror, "find_stack", lambda name: _locked({}) if name == STACK
                        else find_stack(name))


@pytest.fixture
def upstreams(tmp_path: Path) -> tuple[Path, str]:
    build_wheelhouse(tmp_path / "pypi")
    return make_upstream(tmp_path), f"file://{tmp_path / 'pypi' / 'simple'}"


def _build(up: tuple[Path, str], out: Path, **kw: object) -> dict[str, object]:
    return mirror.build(STACK, OS, out, apt_upstream=str(up[0]), index_url=up[1],
                        allow_unsigned=True, **kw)  # type: ignore[arg-type]


@pytest.mark.integration
def test_a_mirror_holds_the_pins_and_what_they_need(upstreams: tuple[Path, str],
                                                    tmp_path: Path) -> None:
    out = tmp_path / "m"
    m = _build(upstreams, out, extra=("nccl-tests",))
    got = {(p["name"], p["version"], p["role"]) for p in m["packages"]}  # type: ignore[attr-defined]
    assert ("nvidia-open", "580.173.02-1", "pinned") in got  # the pin, not the newer one
    assert ("cuda-cudart-13-0", "13.0.48-1", "dependency") in got  # highest that fits
    assert ("cuda-nvrtc-alt", "1.0-1", "dependency") in got  # the alternative present
    assert ("nccl-tests", "2.17.8-1", "extra") in got
    # what the container toolkit role installs, from its own defaults
    assert {(n, v, "role:container_toolkit") for n, v in TOOLKIT} <= got
    assert not any(n in ("unrelated",) for n, _, _ in got)
    assert len(got) == 16  # 9 pins, 4 toolkit packages, 2 dependencies, 1 extra
    assert m["from_os_archive"] == ["libc6 (>= 2.17)"]
    assert m["wheels"] == {"torch==2.9.1+cu130": [mirror.sha256_file(
        next((out / "wheels").glob("torch-*.whl")))]}
    # the upstream's index files are kept verbatim; the index links carry sha256
    assert (out / "nvidia/Packages").read_bytes() == (upstreams[0] / "Packages").read_bytes()
    assert "#sha256=" in (out / "simple/torch/index.html").read_text()
    assert mirror.verify(out) == []
    r = CliRunner().invoke(main, ["mirror", "verify", str(out)])
    assert r.exit_code == 0 and "all match the manifest" in r.output


@pytest.mark.integration
def test_verify_names_every_change(upstreams: tuple[Path, str], tmp_path: Path) -> None:
    out = tmp_path / "m"
    _build(upstreams, out)
    deb = next((out / "nvidia").glob("libnccl2_*.deb"))
    deb.write_bytes(b"tampered")
    (out / "wheels" / "planted.whl").write_bytes(b"x")
    (out / "nvidia" / "Packages").write_bytes(b"Package: x\n")
    problems = mirror.verify(out)
    assert f"nvidia/{deb.name}: changed" in " ".join(problems)
    assert "wheels/planted.whl: not listed in nodecert-mirror.json" in problems
    assert "nvidia/Packages: does not match nvidia/Release" in problems
    assert f"nvidia/{deb.name}: does not match the upstream index's sha256" in problems
    r = CliRunner().invoke(main, ["mirror", "verify", str(out), "--json"])
    assert r.exit_code == 1 and '"ok": false' in r.output


def test_a_file_that_does_not_match_its_index_stops_the_build(
        upstreams: tuple[Path, str], tmp_path: Path) -> None:
    up = upstreams[0]
    next(up.glob("libnccl2_*.deb")).write_bytes(b"swapped on the way")
    with pytest.raises(mirror.MirrorError, match=r"libnccl2_.*does not match the upstream"):
        _build(upstreams, tmp_path / "m")
    assert not (tmp_path / "m").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".m.")] == []


def test_an_index_that_does_not_match_its_release_stops_the_build(
        upstreams: tuple[Path, str], tmp_path: Path) -> None:
    with (upstreams[0] / "Packages").open("a") as f:
        f.write("\n")
    with pytest.raises(mirror.MirrorError, match="does not match the Release file's SHA256"):
        _build(upstreams, tmp_path / "m")


def test_an_index_the_release_does_not_list_stops_the_build(
        upstreams: tuple[Path, str], tmp_path: Path) -> None:
    """Only what the (signed) Release lists is vouched for: a Packages it does not name
    is refused by the build, and by verify once in a mirror."""
    up = upstreams[0]
    release = (up / "Release").read_text()
    (up / "Release").write_text(release.replace(" Packages\n", " Packages.old\n"))
    with pytest.raises(mirror.MirrorError, match=r"Packages is not listed in .*Release"):
        _build(upstreams, tmp_path / "m")
    (up / "Release").write_text(release)
    out = tmp_path / "m2"
    _build(upstreams, out)
    (out / "nvidia" / "Release").write_text("Origin: test\nSHA256:\n")
    assert "nvidia/Packages: not listed in nvidia/Release, so nothing vouches for it" in \
        mirror.verify(out)


@pytest.mark.integration
def test_verify_never_reads_outside_the_mirror(upstreams: tuple[Path, str],
                                               tmp_path: Path) -> None:
    """A manifest naming an absolute path, a .. path or a path through a symbolic link
    is refused without the file being read (else verify reveals files elsewhere)."""
    out = tmp_path / "m"
    _build(upstreams, out)
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t")
    manifest = json.loads((out / mirror.MANIFEST).read_text())
    (out / "link").symlink_to(tmp_path)
    want = {"sha256": mirror.sha256_file(secret), "size": 6}
    for rel in (str(secret), "../secret", "link/secret"):
        m = {**manifest, "files": {**manifest["files"], rel: want}}
        (out / mirror.MANIFEST).write_text(json.dumps(m))
        problems = mirror.verify(out)
        assert f"{rel}: not a path inside the mirror (absolute, .., or through a symbolic " \
               "link): refused" in problems, problems
        assert not any(p.startswith(f"{rel}: changed") for p in problems)
    assert "link: not listed in nodecert-mirror.json" in problems


def test_a_missing_role_package_is_named(tmp_path: Path) -> None:
    up = make_upstream(tmp_path, drop="libnvidia-container1")
    with pytest.raises(mirror.MirrorError,
                       match=r"libnvidia-container1=1.17.8-1 \(the container_toolkit role's\)"):
        mirror.build(STACK, OS, tmp_path / "m", apt_upstream=str(up),
                     index_url="file:///nonexistent", allow_unsigned=True)


def test_every_package_a_role_installs_has_a_known_source() -> None:
    """A role that starts installing another list of packages must say where the list
    comes from (the stack, its own pins, the OS archive), or the mirror may lack it."""
    import re

    from nodecert.provision.rolepkgs import APT_SOURCES, role_pins
    lists = set()
    for tasks in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        text = tasks.read_text()
        for block in re.findall(r"ansible\.builtin\.apt:\n((?:    .*\n)+)", text):
            expr = re.search(r"name: (.*)", block)
            if expr is None and "update_cache" in block:
                continue  # refreshes the lists, installs nothing
            assert expr and "{{" in expr.group(1), \
                f"{tasks}: an apt task whose package list is not a role variable"
            lists |= set(re.findall(r"\b(\w+_(?:packages|selected|retired))\b", expr.group(1)))
        lists |= set(re.findall(r"nodecert_common_pins: \"\{\{ (\w+)", text))
    assert len(lists) >= 6, lists  # the tasks were read
    unknown = lists - set(APT_SOURCES)
    assert unknown == set(), f"package lists with no known source: {unknown}"
    assert {p.role for p in role_pins()} == {"container_toolkit"}


def test_a_missing_pin_is_named(tmp_path: Path) -> None:
    build_wheelhouse(tmp_path / "pypi")
    up = make_upstream(tmp_path, drop="libnccl2")
    with pytest.raises(mirror.MirrorError, match=r"lacks pinned package\(s\): "
                                                 r"libnccl2=2\.27\.7-1\+cuda13\.0"):
        mirror.build(STACK, OS, tmp_path / "m", apt_upstream=str(up),
                     index_url=f"file://{tmp_path / 'pypi' / 'simple'}", allow_unsigned=True)


def test_bad_requests_are_refused(upstreams: tuple[Path, str], tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    r = CliRunner().invoke(main, ["mirror", "build", "--stack", STACK, "--os", OS, "--out",
                                  str(busy), "--apt-upstream", str(upstreams[0]),
                                  "--allow-unsigned-upstream"])
    assert r.exit_code == 2 and "is not an empty directory" in r.output
    assert (busy / "keep.txt").read_text() == "mine"
    with pytest.raises(ManifestError, match="has no packages for centos-9"):
        mirror.build(STACK, "centos-9", tmp_path / "x")
    # an upstream whose signature cannot be checked is refused unless allowed
    with pytest.raises(mirror.MirrorError, match="cannot be checked without its key"):
        mirror.build(STACK, OS, tmp_path / "y", apt_upstream=str(upstreams[0]),
                     index_url=upstreams[1])


def _gpg(home: Path, *args: str) -> str:
    return subprocess.run(["gpg", "--batch", "--homedir", str(home), *args],
                          capture_output=True, text=True, check=True, timeout=120).stdout


@pytest.fixture
def gnupg_home(tmp_path: Path) -> Iterator[Path]:
    """A private GnuPG home; the agent that signing starts in it is stopped afterwards
    (it would otherwise outlive the test as a daemon under pytest's temporary directory)."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    try:
        yield home
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"],
                       capture_output=True, timeout=60, check=False)
        left = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True,
                              timeout=30, check=False).stdout.split()
        assert left == [], f"processes left running under {home}: {left}"


@pytest.mark.integration
def test_the_upstream_signature_is_checked_with_the_pinned_key(
        upstreams: tuple[Path, str], tmp_path: Path, gnupg_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    home = gnupg_home
    _gpg(home, "--passphrase", "", "--quick-gen-key", "repo@example.invalid", "ed25519",
         "sign", "never")
    fpr = next(ln.split(":")[9] for ln in _gpg(home, "--with-colons", "--list-keys")
               .splitlines() if ln.startswith("fpr:"))
    key = tmp_path / "repo.pub"
    key.write_text(_gpg(home, "--armor", "--export", fpr))
    up = upstreams[0]
    _gpg(home, "--armor", "--detach-sign", "-o", str(up / "Release.gpg"), str(up / "Release"))
    real = _locked({})
    pinned = dataclasses.replace(real, repository=dataclasses.replace(
        real.repository, key_fingerprint=fpr))
    monkeypatch.setattr(mirror, "find_stack", lambda name: pinned)
    m = mirror.build(STACK, OS, tmp_path / "m", apt_upstream=str(up), index_url=upstreams[1],
                     key=key)
    assert m["signature"] == f"Release.gpg verified with {fpr}"
    assert (tmp_path / "m" / "nvidia" / "repo.pub").is_file()  # nodes fetch it from here
    binary = tmp_path / "repo.gpg"  # the same key exported without armour
    subprocess.run(["gpg", "--batch", "--homedir", str(home), "--export", "-o", str(binary),
                    fpr], check=True, timeout=60, capture_output=True)
    assert mirror.build(STACK, OS, tmp_path / "mb", apt_upstream=str(up),
                        index_url=upstreams[1], key=binary)["signature"].endswith(fpr)
    # a Release changed after signing is refused
    with (up / "Release").open("a") as f:
        f.write("Label: changed\n")
    with pytest.raises(mirror.MirrorError, match="does not verify"):
        mirror.build(STACK, OS, tmp_path / "m2", apt_upstream=str(up),
                     index_url=upstreams[1], key=key)
    # the stack's real fingerprint does not match this key: refused before anything
    monkeypatch.setattr(mirror, "find_stack", lambda name: real)
    with pytest.raises(mirror.MirrorError, match="is not exactly the stack's repository key"):
        mirror.build(STACK, OS, tmp_path / "m3", apt_upstream=str(up),
                     index_url=upstreams[1], key=key)


@pytest.mark.integration
def test_provision_takes_the_mirrors_repository_key_and_digests(
        upstreams: tuple[Path, str], tmp_path: Path) -> None:
    from nodecert.provision.mirrorvars import mirror_vars
    out = tmp_path / "m"
    m = _build(upstreams, out)
    got = mirror_vars(str(out), {STACK: _locked({})})
    assert got["nvidia_repo_url"] == f"{out}/nvidia"
    assert got["framework_index_url"] == f"file://{out}/simple"
    assert got["nvidia_repo_key_url"] == f"{out}/nvidia/3bf863cc.pub"
    assert got["framework_wheel_hashes"] == {STACK: m["wheels"]}
    with pytest.raises(InventoryError, match=f"holds stack {STACK}; this run provisions "
                                             "r570-cuda12.8"):
        mirror_vars(str(out), {"r570-cuda12.8": find_stack("r570-cuda12.8")})
    # a mirror without a manifest (not built by nodecert): repository and index only
    plain = tmp_path / "plain"
    shutil.copytree(out, plain)
    os.unlink(plain / mirror.MANIFEST)
    assert "framework_wheel_hashes" not in mirror_vars(str(plain), {STACK: _locked({})})


@pytest.mark.integration
def test_stack_lock_pins_every_wheel_by_sha256(upstreams: tuple[Path, str],
                                               tmp_path: Path) -> None:
    from nodecert.stack.manifest import load_stack
    out = tmp_path / "site" / "stacks" / f"{STACK}.yml"
    out.parent.mkdir(parents=True)
    r = CliRunner().invoke(main, ["stack", "lock", STACK, "--out", str(out), "--index-url",
                                  upstreams[1], "--json"])
    assert r.exit_code == 0, r.output
    locked = load_stack(out)
    whl = next((tmp_path / "pypi" / "wheels").glob("torch-2.9.1+cu130-*.whl"))
    assert locked.framework.hashes == {"torch==2.9.1+cu130": (mirror.sha256_file(whl),)}
    # everything else is the shipped stack, comments included
    shipped = find_stack(STACK)
    assert locked.os == shipped.os and locked.repository == shipped.repository
    assert "# R580 LTSB" in out.read_text()
    again = CliRunner().invoke(main, ["stack", "lock", STACK, "--out", str(out)])
    assert again.exit_code == 2 and "exists" in again.output
    odd = CliRunner().invoke(main, ["stack", "lock", STACK, "--out", str(tmp_path / "x.yml")])
    assert odd.exit_code == 2 and f"name it {STACK}.yml" in odd.output


def _locked(hashes: dict[str, tuple[str, ...]]) -> Stack:
    real = find_stack(STACK)
    return dataclasses.replace(real, framework=dataclasses.replace(real.framework,
                                                                   hashes=hashes))


@pytest.mark.integration
def test_a_locked_stack_decides_the_wheels(upstreams: tuple[Path, str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With a lock, the mirror's list must be the lock, wheel for wheel: the build fails
    on any wheel or pin the lock does not match, provisioning refuses a mirror listing
    others, and the mirror's list is never handed to pip in the lock's place."""
    from nodecert.provision.mirrorvars import mirror_vars
    whl = next((tmp_path / "pypi" / "wheels").glob("torch-2.9.1+cu130-*.whl"))
    right = {"torch==2.9.1+cu130": (mirror.sha256_file(whl),)}
    # pip itself refuses other bytes or a pin the index lacks: it downloads by digest
    for lock, why in (({"torch==2.9.1+cu130": ("0" * 64,)}, "Expected sha256 " + "0" * 64),
                      ({**right, "numpy==2.0.0": ("1" * 64,)}, "numpy==2.0.0"),
                      ({"other==1.0": ("2" * 64,)}, "other==1.0")):
        monkeypatch.setattr(mirror, "find_stack", lambda name, lock=lock: _locked(lock))
        with pytest.raises(mirror.MirrorError, match=re.escape(why)):
            _build(upstreams, tmp_path / f"m{len(why)}")
    monkeypatch.setattr(mirror, "find_stack", lambda name: _locked(right))
    out = tmp_path / "m"
    _build(upstreams, out)
    got = mirror_vars(str(out), {STACK: _locked(right)})
    assert "framework_wheel_hashes" not in got  # the roles use the stack's own lock
    # a mirror whose manifest was changed to list other wheels is refused
    manifest = json.loads((out / mirror.MANIFEST).read_text())
    manifest["wheels"] = {"torch==2.9.1+cu130": ["3" * 64]}
    (out / mirror.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InventoryError, match=r"lists other wheels than stack .* is locked to"):
        mirror_vars(str(out), {STACK: _locked(right)})


@pytest.mark.integration
def test_the_shipped_lock_refuses_other_wheels_and_a_site_lock_takes_its_place(
        upstreams: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped stack is locked to the real wheels: built from an index serving other
    bytes, nothing is built. A site that locks its own wheels (the inventory's
    framework_wheel_hashes, given to the build as --wheel-hashes) gets its mirror, and
    provisioning takes that lock in the stack's place, and only that one."""
    from nodecert.provision.mirrorvars import mirror_vars
    monkeypatch.setattr(mirror, "find_stack", find_stack)
    shipped = find_stack(STACK)
    assert shipped.framework.hashes
    with pytest.raises(mirror.MirrorError, match=f"the {len(shipped.framework.hashes)} "
                                                 f"wheels stack {STACK} is locked to"):
        _build(upstreams, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    whl = next((tmp_path / "pypi" / "wheels").glob("torch-2.9.1+cu130-*.whl"))
    site = {"torch==2.9.1+cu130": [mirror.sha256_file(whl)]}
    group_vars = tmp_path / "site.yml"
    group_vars.write_text(json.dumps({"framework_wheel_hashes": {STACK: site}}))
    out = tmp_path / "m"
    r = CliRunner().invoke(main, [
        "mirror", "build", "--stack", STACK, "--os", OS, "--out", str(out), "--apt-upstream",
        str(upstreams[0]), "--index-url", upstreams[1], "--allow-unsigned-upstream",
        "--wheel-hashes", str(group_vars), "--json"])
    assert r.exit_code == 0, r.output
    built = json.loads((out / mirror.MANIFEST).read_text())
    assert built["lock"] == "site" and built["wheels"] == site
    # provisioning: the site's lock decides; the roles install with it, not the mirror's list
    assert "framework_wheel_hashes" not in mirror_vars(str(out), {STACK: shipped},
                                                       site_locks={STACK: site})
    with pytest.raises(InventoryError, match=r"is locked to: torch==2\.9\.1\+cu130: sha256"):
        mirror_vars(str(out), {STACK: shipped})
    other = {"torch==2.9.1+cu130": ["0" * 64]}
    with pytest.raises(InventoryError, match="is locked to by the inventory"):
        mirror_vars(str(out), {STACK: shipped}, site_locks={STACK: other})
    # a --wheel-hashes file without the stack's digests is refused, naming the file
    group_vars.write_text("framework_wheel_hashes: {r570-cuda12.8: {}}\n")
    r = CliRunner().invoke(main, [
        "mirror", "build", "--stack", STACK, "--os", OS, "--out", str(tmp_path / "n"),
        "--wheel-hashes", str(group_vars)])
    assert r.exit_code == 2 and f"{group_vars}: framework_wheel_hashes has no digests for " \
        f"stack {STACK}" in r.output


def test_an_unlocked_stack_over_plain_http_is_warned_about(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.provision import mirrorvars
    from nodecert.provision.mirrorvars import mirror_vars
    built = {"schema": mirror.SCHEMA, "stack": STACK, "wheels": {"torch==1": ["a" * 64]}}
    monkeypatch.setattr(mirrorvars, "mirror_manifest", lambda base: built)
    said: list[str] = []
    for url in ("http://mirror.example/m", "https://mirror.example/m"):
        got = mirror_vars(url, {STACK: _locked({})}, warn=said.append)
        assert got["framework_wheel_hashes"] == {STACK: built["wheels"]}
    assert len(said) == 1 and "not locked" in said[0] and "plain http" in said[0]
