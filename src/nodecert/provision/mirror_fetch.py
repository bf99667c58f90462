"""Fetching for the mirror: HTTP(S), file: URLs and plain paths, each with a time
limit and a size limit; a file is kept only when its sha256 and size match the index
that names it."""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

from nodecert.core.errors import NodecertError

FETCH_TIMEOUT_S = 60
MAX_INDEX_BYTES = 256 * 1024 * 1024


class MirrorError(NodecertError):
    """A mirror could not be built or does not verify."""


def join_url(base: str, rel: str) -> str:
    rel_path = PurePosixPath(rel)
    if rel_path.is_absolute() or ".." in rel_path.parts:
        raise MirrorError(f"the upstream names a file outside its repository: {rel!r}")
    if "://" in base or base.startswith("file:"):
        return base.rstrip("/") + "/" + str(rel_path)
    return str(Path(base) / rel_path)


def _open(url: str) -> Any:
    if url.startswith(("http://", "https://")):
        return urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S)
    path = urllib.parse.urlparse(url).path if url.startswith("file:") else url
    return Path(path).open("rb")


def fetch_bytes(url: str, limit: int = MAX_INDEX_BYTES) -> bytes | None:
    """The file's content, None where it does not exist; MirrorError past the limit."""
    try:
        with _open(url) as f:
            data: bytes = f.read(limit + 1)
    except FileNotFoundError:
        return None
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise MirrorError(f"{url}: HTTP {exc.code}") from None
    except (OSError, urllib.error.URLError) as exc:
        raise MirrorError(f"cannot fetch {url}: {exc}",
                          hint="check the upstream URL and that it is reachable") from None
    if len(data) > limit:
        raise MirrorError(f"{url} is larger than {limit} bytes")
    return data


def fetch_file(url: str, dest: Path, sha256: str, size: int | None) -> None:
    """Copy url to dest, refusing a file whose sha256 or size differs from the index's."""
    h = hashlib.sha256()
    n = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 3600
    try:
        with _open(url) as src, dest.open("wb") as out:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                n += len(chunk)
                out.write(chunk)
                if time.monotonic() > deadline:
                    raise MirrorError(f"{url}: download took longer than an hour")
    except (OSError, urllib.error.URLError) as exc:
        raise MirrorError(f"cannot fetch {url}: {exc}") from None
    if h.hexdigest() != sha256 or (size is not None and n != size):
        dest.unlink()
        raise MirrorError(f"{url}: sha256 {h.hexdigest()[:16]}... size {n} does not match "
                          f"the upstream's index ({sha256[:16]}..., {size})",
                          hint="the upstream or the path to it was tampered with or is "
                               "mid-update; try again later")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


__all__ = ["FETCH_TIMEOUT_S", "MAX_INDEX_BYTES", "MirrorError", "fetch_bytes", "fetch_file",
           "join_url", "sha256_file"]
