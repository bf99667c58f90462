"""`nodecert mirror build` and `mirror verify`: the air-gapped mirror `provision
--mirror` installs from.

A build takes one stack on one OS and fetches exactly what provisioning installs from
outside the OS archive: the stack's pinned NVIDIA packages at their pinned versions
plus every dependency the same repository satisfies (resolved from the upstream's own
Packages index), and the framework's wheels with their dependencies. The upstream's
index files are kept verbatim, so a node still checks NVIDIA's signature on them;
every file is checked against the index that names it (sha256, size) as it arrives.
The layout is the one `--mirror` expects:

    DIR/nvidia/         flat apt repository (Release, Release.gpg, Packages, the debs)
    DIR/wheels/         the framework's wheels
    DIR/simple/         PEP 503 index of the wheels, each link with its sha256
    DIR/nodecert-mirror.json  what was fetched from where, with every file's sha256

A build is written to a temporary directory beside DIR and renamed into place when
complete; a failed build leaves nothing behind.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nodecert.core.errors import ManifestError
from nodecert.provision import aptrepo
from nodecert.provision.locks import lock_differences
from nodecert.provision.mirror_fetch import (
    FETCH_TIMEOUT_S,
    MirrorError,
    fetch_bytes,
    fetch_file,
    join_url,
    sha256_file,
)
from nodecert.provision.mirror_verify import (
    MANIFEST,
    SCHEMA,
    mirror_manifest,
    read_manifest,
    verify,
)
from nodecert.provision.rolepkgs import role_pins
from nodecert.stack.manifest import Stack, find_stack, load_stack

PIP_TIMEOUT_S = 3600
# Where the framework's wheels are built for: the node's CPython on x86_64 Linux.
# pip matches --platform tags exactly, so every glibc the supported OSes reach is named:
# Ubuntu 22.04's 2.35 is the oldest, and NVIDIA's CUDA 13 wheels are tagged 2_25 and 2_27.
WHEEL_PLATFORMS = (*(f"manylinux_2_{n}_x86_64" for n in range(35, 4, -1)),
                   "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
                   "linux_x86_64")


# --- the apt part ----------------------------------------------------------------------------

@dataclass
class AptResult:
    packages: list[dict[str, Any]] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    signature: str = ""


def _verify_signature(repo: Path, key: Path | None, fingerprint: str,
                      allow_unsigned: bool) -> str:
    release, sig = repo / "Release", repo / "Release.gpg"
    if key is None:
        if allow_unsigned:
            return "not checked (--allow-unsigned-upstream: a repository you control)"
        raise MirrorError("the upstream's signature cannot be checked without its key",
                          hint="give --key FILE (NVIDIA's repository key, checked against "
                               f"the stack's fingerprint {fingerprint}), or "
                               "--allow-unsigned-upstream for a local repository you control")
    with tempfile.TemporaryDirectory(prefix="nodecert-gpg-") as home:
        env = {**os.environ, "GNUPGHOME": home}
        show = subprocess.run(["gpg", "--batch", "--show-keys", "--with-colons", str(key)],
                              capture_output=True, text=True, timeout=60, env=env,
                              check=False)
        pubs = [ln for ln in show.stdout.splitlines() if ln.startswith("pub:")]
        fprs = [ln.split(":")[9] for ln in show.stdout.splitlines() if ln.startswith("fpr:")]
        if show.returncode != 0 or len(pubs) != 1 or not fprs or fprs[0] != fingerprint:
            raise MirrorError(f"{key} is not exactly the stack's repository key "
                              f"{fingerprint}", hint="use the key file the stack names")
        ring = Path(home) / "ring.gpg"
        subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(ring), str(key)],
                       capture_output=True, timeout=60, env=env, check=True)
        if not sig.is_file():
            raise MirrorError("the upstream has no Release.gpg to check",
                              hint="mirror the repository from its origin")
        ok = subprocess.run(["gpgv", "--keyring", str(ring), str(sig), str(release)],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
        if ok.returncode != 0:
            raise MirrorError("the upstream's Release signature does not verify with "
                              f"{fingerprint}: {ok.stderr.strip()[-200:]}")
    shutil.copy2(key, repo / Path(key).name)
    return f"Release.gpg verified with {fingerprint}"


def _index(upstream: str, repo: Path) -> list[aptrepo.Stanza]:
    """Fetch Release (+ signatures) and Packages verbatim; Packages checked against the
    Release's SHA256 list where there is one."""
    release = fetch_bytes(join_url(upstream, "Release"))
    if release is None:
        raise MirrorError(f"{upstream} has no Release file: not a flat apt repository",
                          hint="give the directory that holds Packages and Release")
    (repo / "Release").write_bytes(release)
    for extra in ("Release.gpg", "InRelease"):
        data = fetch_bytes(join_url(upstream, extra))
        if data is not None:
            (repo / extra).write_bytes(data)
    sums = aptrepo.release_sha256(release.decode("utf-8", "replace"), f"{upstream}/Release")
    unlisted = []
    for name in ("Packages.gz", "Packages"):
        data = fetch_bytes(join_url(upstream, name))
        if data is None:
            continue
        want = sums.get(name)
        if want is None:
            # Only what the (signed) Release lists is anchored to its signature.
            unlisted.append(name)
            continue
        if (hashlib.sha256(data).hexdigest(), len(data)) != want:
            raise MirrorError(f"{upstream}/{name} does not match the Release file's SHA256",
                              hint="the upstream is mid-update or was tampered with")
        (repo / name).write_bytes(data)
        text = gzip.decompress(data) if name.endswith(".gz") else data
        return aptrepo.parse_stanzas(text.decode("utf-8", "replace"), f"{upstream}/{name}")
    if unlisted:
        raise MirrorError(f"{upstream}/{unlisted[0]} is not listed in {upstream}/Release's "
                          "SHA256 list: nothing vouches for it",
                          hint="the upstream is mid-update or was tampered with")
    raise MirrorError(f"{upstream} has no Packages index")


def build_apt(stack: Stack, os_name: str, upstream: str, repo: Path, *, key: Path | None,
              allow_unsigned: bool, extra: tuple[str, ...] = ()) -> AptResult:
    repo.mkdir(parents=True)
    stanzas = _index(upstream, repo)
    out = AptResult(signature=_verify_signature(repo, key, stack.repository.key_fingerprint,
                                                allow_unsigned))
    pins = stack.os[os_name].packages
    wanted: list[tuple[str, str | None]] = [(p.name, str(p.version)) for p in pins]
    # What the roles pin besides the stack (the container toolkit): provisioning installs
    # it from this repository too, so a host that never saw another one needs it here.
    by_role = {(r.name, r.version): r.role for r in role_pins()}
    role_wanted = [nv for nv in by_role if nv not in wanted]
    wanted += role_wanted
    for item in extra:  # site tools from the same repository: NAME or NAME=VERSION
        name, _, version = item.partition("=")
        wanted.append((name, version or None))
    res = aptrepo.resolve(stanzas, wanted, upstream)
    distro = {p.name for p in pins if p.origin == "distro"}
    lost = [f"{n}={v}" + (f" (the {by_role[(n, v)]} role's)" if (n, v) in by_role else "")
            for n, v in res.missing_pins if n not in distro]
    if lost:
        raise MirrorError(f"the upstream lacks pinned package(s): {', '.join(lost)}",
                          hint=f"check the stack's strings with `apt-cache madison` against "
                               f"{upstream}")
    out.external = res.external + [f"{n} (= {v})" for n, v in res.missing_pins]
    pinned = {(p.name, str(p.version)) for p in pins}
    extra_names = {n for n, _ in wanted[len(pins) + len(role_wanted):]}
    for s in res.selected:
        rel = s.get("Filename", "")
        sha = s.get("SHA256", "")
        if not rel or len(sha) != 64:
            raise MirrorError(f"{upstream}: package {s.get('Package')} has no Filename or "
                              "SHA256 in the index")
        size = int(s["Size"]) if s.get("Size", "").isdigit() else None
        dest = repo / PurePosixPath(rel)
        fetch_file(join_url(upstream, rel), dest, sha, size)
        out.packages.append({"name": s["Package"], "version": s.get("Version", ""),
                             "file": str(PurePosixPath("nvidia") / PurePosixPath(rel)),
                             "sha256": sha,
                             "role": "pinned" if (s["Package"], s.get("Version")) in pinned
                             else f"role:{by_role[(s['Package'], s.get('Version', ''))]}"
                             if (s["Package"], s.get("Version", "")) in by_role
                             else "extra" if s["Package"] in extra_names else "dependency"})
    return out


# --- the wheels ------------------------------------------------------------------------------

def framework_pins(stack: Stack) -> list[str]:
    fw = stack.framework
    return ([f"torch=={fw.pytorch}"] if fw.pytorch is not None else []) + (
        [f"tensorflow=={fw.tensorflow}"] if fw.tensorflow else [])


def _wheel_name(path: Path) -> tuple[str, str]:
    dist, version = path.name.split("-")[:2]
    return dist.replace("_", "-").lower(), version


def _pip_download(py: str, wheels: Path, index_url: str,
                  extra_index_urls: tuple[str, ...]) -> list[str]:
    """pip download of binary wheels only, for the node's Python (`py`) and platforms,
    from these indexes alone (no cache, no user's pip configuration)."""
    abi = "cp" + py.replace(".", "")
    return [sys.executable, "-m", "pip", "download", "--dest", str(wheels), "--index-url",
            index_url, *[a for x in extra_index_urls for a in ("--extra-index-url", x)],
            "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check",
            "--timeout", str(FETCH_TIMEOUT_S), "--python-version", py,
            "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
            *[a for p in WHEEL_PLATFORMS for a in ("--platform", p)]]


def _wheel_hashes(wheels: Path) -> dict[str, list[str]]:
    """{"name==version": [sha256 of each of its wheels]} of what pip downloaded."""
    hashes: dict[str, list[str]] = {}
    for whl in sorted(wheels.glob("*.whl")):
        dist, version = _wheel_name(whl)
        hashes.setdefault(f"{dist}=={version}", []).append(sha256_file(whl))
    return hashes


def build_wheels(stack: Stack, index_url: str, out: Path, *,
                 lock: Mapping[str, Any] | None = None,
                 extra_index_urls: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """pip download of the framework pins and their dependencies, for the node's Python;
    {"name==version": [sha256]} of every wheel. With a lock (the stack's own unless one
    is given; {} for none), exactly the locked wheels: pip downloads them with
    --require-hashes, so no other build of a pin is taken from any index, and a wheel or
    pin the lock does not match stops the build."""
    lock = dict(stack.framework.hashes if lock is None else lock)
    pins = framework_pins(stack)
    wheels = out / "wheels"
    wheels.mkdir(parents=True)
    if not pins:
        return {}
    argv = _pip_download(stack.framework.python or "3", wheels, index_url, extra_index_urls)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    with tempfile.TemporaryDirectory(prefix="nodecert-pins-") as d:
        if lock:
            # Every locked wheel by its digest: pip takes only these bytes, and refuses a
            # dependency the lock does not hold (the lock must be closed).
            req = Path(d) / "requirements.txt"
            req.write_text("".join(
                f"{pin} " + " ".join(f"--hash=sha256:{str(x).removeprefix('sha256:')}"
                                     for x in digests) + "\n"
                for pin, digests in sorted(lock.items())))
            argv += ["--require-hashes", "-r", str(req)]
        else:
            argv += pins
        try:
            proc = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=PIP_TIMEOUT_S, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise MirrorError(f"pip download from {index_url} took longer than "
                              f"{PIP_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip()
        if lock:
            raise MirrorError(
                f"pip could not download the {len(lock)} wheels stack {stack.name} is "
                f"locked to from {index_url}: {said[-900:]}",
                hint="the index serves other bytes or lacks a locked wheel: use the index "
                     "the lock was made from, or lock again (nodecert stack lock, or the "
                     "site's framework_wheel_hashes) after checking why")
        raise MirrorError(f"pip could not download {' '.join(pins)} from {index_url}: "
                          f"{said[-600:]}")
    hashes = _wheel_hashes(wheels)
    if lock:  # a locked stack: the lock decides, every wheel and every pin
        problems = lock_differences(lock, hashes)
        if problems:
            raise MirrorError(f"the wheels downloaded from {index_url} are not the ones "
                              f"stack {stack.name} is locked to: " + "; ".join(problems[:8])
                              + (f" (and {len(problems) - 8} more)" if len(problems) > 8
                                 else ""),
                              hint="the index serves other builds than the stack was locked "
                                   "against: use the index it was locked from, or lock the "
                                   "stack again (nodecert stack lock) after checking why")
    write_simple_index(out)
    return hashes


def lock_stack(stack_name: str, out: Path, index_url: str | None = None) -> dict[str, Any]:
    """Write `out`: the stack's manifest with `framework.hashes` set to the sha256 of
    every wheel its environment installs (the framework's and each dependency's), as
    downloaded now from the index; pip then installs it with --require-hashes."""
    stack = find_stack(stack_name)
    if out.exists():
        raise MirrorError(f"{out} exists", hint="give a new file (a lock never overwrites)")
    if out.name != f"{stack.name}.yml":
        raise MirrorError(f"{out}: a stack file is named after its stack",
                          hint=f"name it {stack.name}.yml (in $NODECERT_HOME/stacks)")
    # From the stack's own index, its dependency wheels may come from the indexes it names
    # beside it (PyPI); a site's index (--index-url) must carry them all.
    extras = () if index_url else stack.framework.extra_index_urls
    with tempfile.TemporaryDirectory(prefix="nodecert-lock-") as d:
        hashes = build_wheels(stack, index_url or stack.framework.index_url, Path(d),
                              lock={}, extra_index_urls=extras)
    if not hashes:
        raise MirrorError(f"stack {stack.name} installs no framework wheels: nothing to lock")
    text = stack.path.read_text()
    lines = text.splitlines()
    start = next((k for k, ln in enumerate(lines) if ln.rstrip() == "framework:"), None)
    if start is None:
        raise ManifestError(f"{stack.path}: no top-level framework: block to lock")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in " #"):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    # The old lock goes whole: its digests, where they were read, its indexes and the
    # comments about them (the framework block's comments are the lock's).
    body = [ln for ln in lines[start + 1:end] if not ln.startswith(
        ("  hashes", "  extra_index_urls:", "    ", "  #"))]
    block = ["  # sha256 of every wheel, as `nodecert stack lock` downloaded them from "
             f"{' and '.join((index_url or stack.framework.index_url, *extras))}",
             "  hashes_source: [LOCK]",
             *([f"  extra_index_urls: [{', '.join(json.dumps(x) for x in extras)}]"]
               if extras else []),
             "  hashes:"] + [
        f"    \"{pin}\": [{', '.join(digests)}]" for pin, digests in sorted(hashes.items())]
    out.parent.mkdir(parents=True, exist_ok=True)
    new = "\n".join(lines[:start + 1] + body + block + lines[end:]) + "\n"
    with tempfile.TemporaryDirectory(prefix="nodecert-lock-", dir=out.parent) as d:
        tmp = Path(d) / f"{stack.name}.yml"
        tmp.write_text(new)
        locked = load_stack(tmp)  # the lock must read back as a valid stack
        tmp.rename(out)
    return {"stack": locked.name, "file": str(out),
            "hashes": {k: list(v) for k, v in locked.framework.hashes.items()}}


def write_simple_index(out: Path) -> None:
    """out/simple: a PEP 503 index of out/wheels, each link carrying its sha256 (pip
    checks it)."""
    by_project: dict[str, list[Path]] = {}
    for whl in sorted((out / "wheels").glob("*.whl")):
        by_project.setdefault(_wheel_name(whl)[0], []).append(whl)
    simple = out / "simple"
    simple.mkdir()
    for project, files in by_project.items():
        (simple / project).mkdir()
        links = "".join(f'<a href="../../wheels/{f.name}#sha256='
                        f'{sha256_file(f)}">{f.name}</a><br>\n' for f in files)
        (simple / project / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    (simple / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "".join(
        f'<a href="{p}/">{p}</a><br>\n' for p in sorted(by_project)) + "</body></html>\n")


# --- build and verify -----------------------------------------------------------------------

def _all_files(root: Path) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(root)): {"sha256": sha256_file(p), "size": p.stat().st_size}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST}


def build(stack_name: str, os_name: str, out: Path, *, apt_upstream: str | None = None,
          index_url: str | None = None, key: Path | None = None,
          allow_unsigned: bool = False, extra: tuple[str, ...] = (),
          site_lock: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Build the mirror into `out` (which must not exist or be empty); its manifest.

    The wheels are the stack's lock, or the site's (`site_lock`, as the inventory's
    framework_wheel_hashes gives it) in its place; with neither, what the index serves."""
    stack = find_stack(stack_name)
    if os_name not in stack.os:
        raise ManifestError(f"stack {stack.name} has no packages for {os_name}",
                            hint=f"it covers: {', '.join(sorted(stack.os))}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MirrorError(f"{out} exists and is not an empty directory",
                          hint="give a new directory (a mirror is never built over files)")
    upstream = apt_upstream or stack.repository.url.replace(
        "{os_repo}", stack.os[os_name].os_repo)
    index = index_url or stack.framework.index_url
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        apt = build_apt(stack, os_name, upstream, tmp / "nvidia", key=key,
                        allow_unsigned=allow_unsigned, extra=extra)
        lock = dict(site_lock) if site_lock else stack.framework.hashes
        # The locked dependency wheels may come from the indexes the stack names beside its
        # own (by digest); a site's index (--index-url) must carry them all.
        wheels = build_wheels(stack, index, tmp, lock=lock, extra_index_urls=(
            stack.framework.extra_index_urls if lock and not index_url else ()))
        manifest = {
            "schema": SCHEMA, "stack": stack.name, "os": os_name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "upstreams": {"apt": upstream, "index": index}, "signature": apt.signature,
            "lock": "site" if site_lock else "stack" if stack.framework.hashes else None,
            "extra_packages": list(extra),
            "packages": apt.packages,
            "from_os_archive": apt.external,
            "wheels": wheels,
            "files": _all_files(tmp),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


__all__ = ["MANIFEST", "SCHEMA", "MirrorError", "build", "fetch_bytes", "framework_pins",
           "lock_stack", "mirror_manifest", "read_manifest", "verify", "write_simple_index"]
