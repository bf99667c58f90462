"""nodecert's own provenance: its CycloneDX SBOM (checked against the schema, naming
what is installed), a release wheel that carries it, `--version --verbose` naming it,
and a release directory's signed checksums (any changed, added or missing file fails)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from nodecert.certs import release
from nodecert.certs.signing import init_key, load_private_key, load_public_key
from nodecert.cli import main
from support.env import REPO


def test_the_sbom_is_valid_cyclonedx_and_names_what_is_installed() -> None:
    text = release.sbom()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    bom = json.loads(text)
    assert bom["metadata"]["component"]["name"] == "nodecert"
    have = {c["name"].lower(): c["version"] for c in bom["components"]}
    for dep in ("click", "jinja2", "cryptography", "paramiko", "babel", "weasyprint"):
        assert have[dep] == metadata.version(dep), dep
    assert "pytest" not in have and "hypothesis" not in have  # dev tools are not run-time
    root = next(d for d in bom["dependencies"]
                if d["ref"] == bom["metadata"]["component"]["bom-ref"])
    assert "pkg:pypi/click@" + metadata.version("click") in root["dependsOn"]


def test_version_verbose_names_the_sbom_or_says_there_is_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = CliRunner().invoke(main, ["--version", "--verbose"])
    assert r.exit_code == 0 and r.output.startswith("nodecert, version ")
    assert "SBOM: none shipped with this install" in r.output
    sbom = tmp_path / "sbom.cdx.json"
    sbom.write_text(release.sbom())
    monkeypatch.setattr(release, "SBOM_IN_PACKAGE", sbom)
    r = CliRunner().invoke(main, ["--verbose", "--version"])
    serial = json.loads(sbom.read_text())["serialNumber"]
    assert f"SBOM: {sbom} (CycloneDX, {serial}, sha256 " in r.output
    assert CliRunner().invoke(main, ["--version"]).output == (
        f"nodecert, version {metadata.version('nodecert')}\n")


def test_a_release_wheel_carries_its_sbom(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for part in ("src", "validators", "stacks", "inventory", "roles", "playbooks"):
        shutil.copytree(REPO / part, src / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_sbom"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / f, src / f)
    (src / "src/nodecert/_sbom").mkdir()
    (src / "src/nodecert/_sbom/sbom.cdx.json").write_text(release.sbom())
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("nodecert-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        inside = json.loads(z.read("nodecert/_sbom/sbom.cdx.json"))
    assert inside["metadata"]["component"]["name"] == "nodecert"


def test_a_release_is_verified_against_its_signed_checksums(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "nodecert-0.1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 a wheel")
    (dist / "nodecert-0.1.0.cdx.json").write_text(release.sbom())
    key = init_key(tmp_path / "k", name="project")
    r = CliRunner().invoke(main, ["provenance", "sign", str(dist), "--key", str(key.private)])
    assert r.exit_code == 0, r.output
    sums = (dist / release.SUMS).read_text().splitlines()
    assert [line.split("  ")[1] for line in sums] == ["nodecert-0.1.0-py3-none-any.whl",
                                                      "nodecert-0.1.0.cdx.json"]
    ok = CliRunner().invoke(main, ["provenance", "verify", str(dist), "--pubkey",
                                   str(key.public)])
    assert ok.exit_code == 0 and "VALID" in ok.output
    trusted = [load_public_key(key.public)]
    wheel = dist / "nodecert-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 another wheel")
    assert release.verify_release(dist, trusted) == [
        "nodecert-0.1.0-py3-none-any.whl: changed since it was signed"]
    wheel.write_bytes(b"PK\x03\x04 a wheel")
    (dist / "extra.whl").write_bytes(b"x")
    assert release.verify_release(dist, trusted) == ["extra.whl: not signed"]
    (dist / "extra.whl").unlink()
    (dist / release.SUMS).write_text("0" * 64 + "  nodecert-0.1.0-py3-none-any.whl\n")
    assert release.verify_release(dist, trusted) == [
        f"{release.SUMS}: differs from the signed statement"]
    other = init_key(tmp_path / "o", name="o")
    bad = release.verify_release(dist, [load_public_key(other.public)])
    assert bad and "no valid signature from a trusted key" in bad[0]
    release.sign_release(dist, load_private_key(key.private))  # re-signed: holds again
    assert release.verify_release(dist, trusted) == []
