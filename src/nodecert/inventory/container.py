"""The order's GPU container (`nodecert_container` in the inventory): the image every
node must run with all its GPUs (container.gpu_smoke), pinned by digest.

    nodecert_container:
      engine: podman                   # podman (default) or docker, with CDI support
      image: registry.example/cuda@sha256:<64 hex>   # pulled by digest, or:
      archive: /srv/images/cuda-base.oci.tar         # an image archive on the node
      image_id: sha256:<64 hex>        #   (air-gapped sites) and the image's id in it
      cdi_spec: /etc/cdi/nvidia.yaml   # optional: where the CDI spec is

Sent to the node in the plan's spec. A reference without a digest is refused: a tag
can point at another image tomorrow.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert.core.yamldoc import keyed

KEYS = {"engine", "image", "archive", "image_id", "cdi_spec"}
ENGINES = ("podman", "docker")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]{0,250}@sha256:[0-9a-f]{64}$")
_PATH = re.compile(r"^/[A-Za-z0-9_.@/+-]*$")


def parse_container(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong)."""
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    engine = str(raw.get("engine") or "podman")
    if engine not in ENGINES:
        return None, f"engine {engine!r} is not one of {', '.join(ENGINES)}"
    out: dict[str, Any] = {"engine": engine}
    for key in ("archive", "cdi_spec"):
        if raw.get(key) is not None:
            path = str(raw[key])
            # written into a command line on the node: a plain absolute path
            if not _PATH.match(path) or ".." in path.split("/"):
                return None, f"{key} {path!r} is not a plain absolute path"
            out[key] = path
    if "archive" in out:
        image_id = str(raw.get("image_id") or "")
        if not _DIGEST.match(image_id):
            return None, ("an image archive needs image_id: sha256:<64 hex> (the image's id, "
                          "as `podman load` reports it)")
        out["image_id"] = image_id
    elif raw.get("image"):
        ref = str(raw["image"])
        if not _REF.match(ref):
            return None, (f"image {ref!r} is not pinned by digest: write it as "
                          "NAME@sha256:<64 hex>")
        out["image"] = ref
    else:
        return None, "give the image (NAME@sha256:...) or an archive with its image_id"
    return out, None


__all__ = ["parse_container"]
