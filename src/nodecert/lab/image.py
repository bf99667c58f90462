"""The lab's container image: the lab's Debian base as an OCI image archive, built here
without any registry, byte for byte the same from the same base (sorted entries, fixed
times and owners), so its image id is known before any host loads it.

The archive lies in the lab's mirror (images/), which every host sees read-only; the
inventory pins it by id (nodecert_container: {archive, image_id}), as an air-gapped site
pins the CUDA base image it ships.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

ARCHIVE = "images/nodecert-lab-base.oci.tar"
REF = "nodecert-lab/base:1"
TOP = ("bin", "lib", "lib64", "sbin", "etc", "usr")
SKIP = ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info",
        "etc/ssh/ssh_host_", "etc/machine-id", "etc/shadow", "etc/gshadow")
EMPTY = ("dev", "proc", "sys", "tmp", "run", "var/tmp", "root")


def _layer(base: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(path: Path, rel: str) -> None:
            ti = tar.gettarinfo(str(path), arcname=rel)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
            ti.pax_headers = {}
            if ti.isreg():
                with path.open("rb") as f:
                    tar.addfile(ti, f)
            else:
                tar.addfile(ti)

        for top in TOP:
            start = base / top
            if not os.path.lexists(start):
                continue
            add(start, top)
            if start.is_symlink() or not start.is_dir():
                continue
            for root, dirs, files in os.walk(start):
                dirs.sort()
                for name in sorted(dirs) + sorted(files):
                    p = Path(root) / name
                    rel = str(p.relative_to(base))
                    if rel.startswith(SKIP):
                        if name in dirs:
                            dirs.remove(name)
                        continue
                    add(p, rel)
        for d in EMPTY:
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if d.endswith("tmp") else 0o755
            tar.addfile(ti)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    ti = tarfile.TarInfo(f"blobs/sha256/{digest}")
    ti.size, ti.mode = len(data), 0o644
    tar.addfile(ti, io.BytesIO(data))
    return digest


def build_image(base: Path, mirror: Path) -> str:
    """Write the archive into the mirror; returns the image id (sha256:<config digest>)."""
    layer = _layer(base)
    diff = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/sh"],
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff}"]},
        "history": [{"created_by": "nodecert lab: the lab's Debian base"}]},
        sort_keys=True).encode()
    out = mirror / ARCHIVE
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        cfg_digest = _blob(tar, config)
        _blob(tar, layer)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": f"sha256:{cfg_digest}", "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": f"sha256:{diff}", "size": len(layer)}]},
            sort_keys=True).encode()
        man_digest = _blob(tar, manifest)
        index = json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": f"sha256:{man_digest}", "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": REF}}]},
            sort_keys=True).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", index)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            tar.addfile(ti, io.BytesIO(data))
    tmp.replace(out)
    image_id = f"sha256:{cfg_digest}"
    (mirror / "images" / "image-id").write_text(image_id + "\n")
    return image_id


def image_id(mirror: Path) -> str | None:
    p = mirror / "images" / "image-id"
    return p.read_text().strip() if p.is_file() else None


__all__ = ["ARCHIVE", "REF", "build_image", "image_id"]
