"""nodecert's own provenance: what an installed nodecert is made of (a CycloneDX SBOM of
its runtime dependency closure, as installed), and a release directory's checksums,
signed.

A release (docs/releases.md) is the wheel, its SBOM and `SHA256SUMS`, with
`SHA256SUMS.intoto.dsse.json`: an in-toto Statement whose subjects are those files and
their sha256, in a DSSE envelope signed with the project's key. A site checks the
directory offline with `nodecert provenance verify DIR --pubkey project.pub` before it
installs. A wheel built by the procedure carries its SBOM inside
(`nodecert/_sbom/sbom.cdx.json`), which `nodecert --version --verbose` names.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from nodecert import __version__
from nodecert.certs import signing
from nodecert.certs.intoto import PAYLOAD_TYPE, STATEMENT_TYPE
from nodecert.core.errors import NodecertError
from nodecert_node.contract import write_atomic

RELEASE_PREDICATE_TYPE = "https://nodecert.dev/attestation/release/v1"
SUMS = "SHA256SUMS"
SUMS_SIGNED = "SHA256SUMS.intoto.dsse.json"
SBOM_IN_PACKAGE = Path(__file__).resolve().parent.parent / "_sbom" / "sbom.cdx.json"


class ReleaseError(NodecertError):
    """A release directory that cannot be signed or does not verify."""


def _requirements(dist: metadata.Distribution, extras: frozenset[str]) -> list[Requirement]:
    out = []
    for text in dist.requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        env_extras = extras or frozenset({""})
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in env_extras):
            out.append(req)
    return out


def closure(name: str = "nodecert") -> dict[str, tuple[metadata.Distribution, list[str]]]:
    """Every distribution nodecert needs at run time, as installed here: canonical name ->
    (distribution, the canonical names it needs). Extras of nodecert itself are left
    out; a requirement not installed is left out (and is not in the SBOM)."""
    seen: dict[str, tuple[metadata.Distribution, list[str]]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset())]
    while todo:
        wanted, extras = todo.pop()
        key = canonicalize_name(wanted)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(wanted)
        except metadata.PackageNotFoundError:
            continue
        reqs = _requirements(dist, extras)
        needs = [str(canonicalize_name(r.name)) for r in reqs]
        seen[key] = (dist, needs)
        todo += [(r.name, frozenset(r.extras)) for r in reqs]
    return seen


def _component(dist: metadata.Distribution, kind: ComponentType) -> Component:
    name, version = dist.metadata["Name"], dist.version
    purl = PackageURL(type="pypi", name=canonicalize_name(name), version=version)
    return Component(name=name, version=version, type=kind, purl=purl, bom_ref=str(purl))


def sbom(name: str = "nodecert") -> str:
    """The CycloneDX 1.6 SBOM (JSON) of `name` and its run-time closure, as installed."""
    deps = closure(name)
    if canonicalize_name(name) not in deps:
        raise ReleaseError(f"{name} is not installed here: no SBOM to write")
    comps = {k: _component(d, ComponentType.APPLICATION if k == canonicalize_name(name)
                           else ComponentType.LIBRARY) for k, (d, _) in deps.items()}
    bom = Bom()
    bom.metadata.component = comps[canonicalize_name(name)]
    for k, comp in comps.items():
        if k != canonicalize_name(name):
            bom.components.add(comp)
    for k, (_, needs) in deps.items():
        bom.register_dependency(comps[k], [comps[n] for n in needs if n in comps])
    text: str = JsonV1Dot6(bom).output_as_string(indent=1)
    return text


def installed_sbom() -> Path | None:
    """The SBOM this installed nodecert was released with, where it has one."""
    return SBOM_IN_PACKAGE if SBOM_IN_PACKAGE.is_file() else None


def version_details() -> list[str]:
    """What `nodecert --version --verbose` says beyond the version."""
    found = installed_sbom()
    deps = closure()
    lines = [f"python {platform.python_version()} ({sys.executable})",
             f"installed at {Path(__file__).resolve().parent.parent}",
             f"run-time dependencies: {len(deps) - 1} installed"]
    if found is not None:
        data = found.read_bytes()
        serial = str(json.loads(data).get("serialNumber", ""))
        lines.append(f"SBOM: {found} (CycloneDX, {serial}, sha256 "
                     f"{hashlib.sha256(data).hexdigest()})")
    else:
        lines.append("SBOM: none shipped with this install (a development checkout); "
                     "`nodecert provenance sbom --out FILE` writes one for it")
    return lines


def _digests(directory: Path) -> dict[str, str]:
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.is_symlink()
                   and p.name not in (SUMS, SUMS_SIGNED))
    if not files:
        raise ReleaseError(f"{directory}: no files to sign",
                           hint="pass the directory the wheel and its SBOM are in")
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def sign_release(directory: Path, key: signing.PrivateKey, now: dt.datetime | None = None
                 ) -> tuple[Path, Path]:
    """Write SHA256SUMS (sha256sum's format) and its signed in-toto Statement."""
    digests = _digests(directory)
    sums = "".join(f"{d}  {n}\n" for n, d in digests.items())
    st = {"_type": STATEMENT_TYPE,
          "subject": [{"name": n, "digest": {"sha256": d}} for n, d in digests.items()],
          "predicateType": RELEASE_PREDICATE_TYPE,
          "predicate": {"tool": {"name": "nodecert", "version": __version__},
                        "issued": (now or dt.datetime.now(dt.UTC)).isoformat(
                            timespec="seconds")}}
    env = signing.sign_envelope(signing.canonical_json(st), PAYLOAD_TYPE, key)
    write_atomic(str(directory / SUMS), sums.encode())
    write_atomic(str(directory / SUMS_SIGNED), json.dumps(env, indent=1).encode() + b"\n")
    return directory / SUMS, directory / SUMS_SIGNED


def verify_release(directory: Path, trusted: list[signing.PublicKey]) -> list[str]:
    """What is wrong with a release directory (empty: its files are the ones signed)."""
    try:
        env: Any = json.loads((directory / SUMS_SIGNED).read_bytes())
        _, payload, _ = signing.verify_envelope(env, trusted)
        st = json.loads(payload)
        if st.get("predicateType") != RELEASE_PREDICATE_TYPE:
            return [f"{SUMS_SIGNED}: not a nodecert release statement"]
        signed = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{SUMS_SIGNED}: unreadable ({exc})"]
    except signing.SignatureError as exc:
        return [f"{SUMS_SIGNED}: {exc}"]
    try:
        have = _digests(directory)
    except ReleaseError as exc:
        return [exc.what]
    problems = [f"{n}: changed since it was signed" for n, d in have.items()
                if n in signed and signed[n] != d]
    problems += [f"{n}: missing" for n in signed if n not in have]
    problems += [f"{n}: not signed" for n in have if n not in signed]
    sums = directory / SUMS
    want = "".join(f"{d}  {n}\n" for n, d in signed.items())
    if sums.is_file() and sums.read_text() != want:
        problems.append(f"{SUMS}: differs from the signed statement")
    return problems


__all__ = ["RELEASE_PREDICATE_TYPE", "SUMS", "SUMS_SIGNED", "ReleaseError", "closure",
           "installed_sbom", "sbom", "sign_release", "verify_release", "version_details"]
