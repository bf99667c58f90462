"""The firmware images of an air-gapped mirror: `<mirror>/firmware/manifest.json` lists
each image file (relative to firmware/) with its sha256, size, component and version
(and the recipe it belongs to). An image is used only when its bytes hash to the
manifest's sha256; the manifest itself is untrusted text and is checked like any input.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import ManifestError

SCHEMA = "nodecert.firmware-images/v1"
MAX_IMAGE = 512 * 1024 * 1024


@dataclass(frozen=True)
class Image:
    file: str
    sha256: str
    size: int
    component: str
    version: str
    recipe: str

    def path(self, mirror: Path) -> Path:
        return mirror / "firmware" / self.file


class ImageError(Exception):
    """An image that must not be pushed (missing, wrong size or digest)."""


_PLAIN = re.compile(r"[A-Za-z0-9._+-]{1,200}")


def safe_file_name(name: str) -> bool:
    """A file name that can go into a multipart header as it is: no quote, CR, LF or
    anything else a header or a BMC's parser could read as structure."""
    return bool(_PLAIN.fullmatch(name)) and name not in (".", "..")


def load_manifest(mirror: Path) -> list[Image]:
    path = mirror / "firmware" / "manifest.json"
    try:
        doc: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError("the mirror has no firmware images", where=str(path),
                            hint="build the mirror with its firmware images "
                                 "(firmware/manifest.json and the image files)") from None
    except ValueError as exc:
        raise ManifestError(f"not JSON: {exc}", where=str(path)) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(
            doc.get("images"), list):
        raise ManifestError(f"expected {{schema: {SCHEMA}, images: [...]}}", where=str(path))
    out = []
    for n, raw in enumerate(doc["images"]):
        keys = ("file", "sha256", "size", "component", "version", "recipe")
        if not isinstance(raw, dict) or any(k not in raw for k in keys):
            raise ManifestError(f"image {n}: needs {', '.join(keys)}", where=str(path))
        img = Image(str(raw["file"]), str(raw["sha256"]).lower(), int(raw["size"]),
                    str(raw["component"]), str(raw["version"]), str(raw["recipe"]))
        if ".." in Path(img.file).parts or Path(img.file).is_absolute():
            raise ManifestError(f"image {n}: {img.file!r} leaves the firmware directory",
                                where=str(path))
        if not safe_file_name(Path(img.file).name):
            raise ManifestError(f"image {n}: file name {img.file[:120]!r} is not plain "
                                "(letters, digits, . _ + -): it goes into the upload's "
                                "headers", where=str(path))
        if len(img.sha256) != 64 or any(c not in "0123456789abcdef" for c in img.sha256):
            raise ManifestError(f"image {n}: sha256 {img.sha256!r} is not a SHA-256 digest",
                                where=str(path))
        out.append(img)
    return out


def find_image(images: list[Image], recipe: str, component: str,
               version: str) -> Image | None:
    return next((i for i in images if i.recipe == recipe and i.component == component
                 and i.version == version), None)


def read_verified(mirror: Path, image: Image) -> bytes:
    """The image's bytes, only when they hash to the manifest's digest."""
    path = image.path(mirror)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImageError(f"image {image.file}: {exc.strerror}") from None
    if size != image.size or size > MAX_IMAGE:
        raise ImageError(f"image {image.file} is {size} bytes, the manifest says "
                         f"{image.size}: not pushed")
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != image.sha256:
        raise ImageError(f"image {image.file} hashes to {got}, the manifest says "
                         f"{image.sha256}: not pushed")
    return data


def write_manifest(mirror: Path, images: list[Image]) -> Path:
    path = mirror / "firmware" / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": SCHEMA, "images": [
        {"file": i.file, "sha256": i.sha256, "size": i.size, "component": i.component,
         "version": i.version, "recipe": i.recipe} for i in images]}, indent=1) + "\n")
    return path


__all__ = ["Image", "ImageError", "find_image", "load_manifest", "read_verified",
           "safe_file_name",
           "write_manifest"]
