"""A built mirror read back: its manifest (from a directory or, for `provision --mirror`,
a URL) and `nodecert mirror verify` -- every listed file present and unchanged, nothing
unlisted, the apt index still anchored to its Release, and never a path leading out of
the mirror.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from nodecert.core.errors import ManifestError
from nodecert.provision import aptrepo
from nodecert.provision.mirror_fetch import (
    MAX_INDEX_BYTES,
    MirrorError,
    fetch_bytes,
    join_url,
    sha256_file,
)

SCHEMA = "nodecert.mirror/v1"
MANIFEST = "nodecert-mirror.json"


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_INDEX_BYTES:
            raise ValueError("too large")
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise MirrorError(f"{path}: not a readable mirror manifest ({exc})",
                          hint="build the mirror with `nodecert mirror build`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(
            data.get("files"), dict):
        raise MirrorError(f"{path}: not a {SCHEMA} manifest")
    return data


def _inside(root: Path, rel: str) -> Path | None:
    """root/rel when rel names a file inside the mirror: relative, no "..", and no part
    of the way a symbolic link (which could lead out: a manifest must not make verify
    hash, and so reveal, files elsewhere). None otherwise."""
    pp = PurePosixPath(rel)
    if not rel or pp.is_absolute() or ".." in pp.parts or "\0" in rel:
        return None
    p = root
    for part in pp.parts:
        p = p / part
        if p.is_symlink():
            return None
    return p


def verify(root: Path) -> list[str]:
    """Every problem with the mirror at root: a file missing, changed or unlisted; an
    index that no longer matches its Release, or one it does not list; a deb that no
    longer matches its index; a path leading out of the mirror."""
    manifest = read_manifest(root)
    problems: list[str] = []
    for rel, want in sorted(manifest["files"].items()):
        p = _inside(root, rel)
        if p is None:
            problems.append(f"{rel}: not a path inside the mirror (absolute, .., or "
                            "through a symbolic link): refused")
            continue
        if not p.is_file():
            problems.append(f"{rel}: missing")
            continue
        got = sha256_file(p)
        if got != want.get("sha256") or p.stat().st_size != want.get("size"):
            problems.append(f"{rel}: changed (sha256 {got[:16]}..., listed "
                            f"{str(want.get('sha256'))[:16]}...)")
    listed = set(manifest["files"])
    problems += [f"{rel}: not listed in {MANIFEST}" for rel in _all_files_names(root)
                 if rel not in listed]
    repo = root / "nvidia"
    release = repo / "Release"
    try:
        sums = aptrepo.release_sha256(release.read_text(errors="replace"), str(release)) \
            if release.is_file() else {}
    except ManifestError as exc:
        problems.append(f"nvidia/Release: unreadable ({exc.what})")
        sums = {}
    for name, (sha, size) in sums.items():
        p = _inside(repo, name) if name.startswith("Packages") else None
        if p is not None and p.is_file() and (
                sha256_file(p), p.stat().st_size) != (sha, size):
            problems.append(f"nvidia/{name}: does not match nvidia/Release")
    for index in ("Packages", "Packages.gz"):
        if (repo / index).is_file() and index not in sums:
            problems.append(f"nvidia/{index}: not listed in nvidia/Release, so nothing "
                            "vouches for it")
    for pkg in manifest.get("packages", []):
        p = _inside(root, str(pkg.get("file", "")))
        if p is None:
            problems.append(f"{pkg.get('file')}: not a path inside the mirror: refused")
            continue
        if p.is_file() and sha256_file(p) != pkg.get("sha256"):
            problems.append(f"{pkg.get('file')}: does not match the upstream index's sha256")
    return problems


def _all_files_names(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
            if (p.is_file() or p.is_symlink()) and p.name != MANIFEST]


def mirror_manifest(mirror: str) -> dict[str, Any] | None:
    """The manifest of the mirror at a URL or path (for `provision --mirror`), None where
    there is none (a mirror not built by nodecert, or a path only the nodes see)."""
    data = fetch_bytes(join_url(mirror, MANIFEST))
    if data is None:
        return None
    try:
        manifest = json.loads(data)
    except ValueError:
        raise MirrorError(f"{mirror}/{MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or not isinstance(
            manifest.get("wheels"), dict):
        raise MirrorError(f"{mirror}/{MANIFEST} is not a {SCHEMA} manifest")
    return manifest


__all__ = ["MANIFEST", "SCHEMA", "mirror_manifest", "read_manifest", "verify"]
