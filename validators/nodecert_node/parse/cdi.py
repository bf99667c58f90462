"""The NVIDIA Container Toolkit's CDI spec (`nvidia-ctk cdi generate`, YAML or JSON),
`nvidia-ctk cdi list`, and `nvidia-smi -L` (inside and outside a container).

The spec is read as text, not as YAML (the node side has no YAML parser): its device
names, its kind, and the driver version it was generated for, which nvidia-ctk writes
in the enable-cuda-compat hook (`--host-driver-version=575.64.03`) and in the driver
libraries it mounts (`libcuda.so.575.64.03`). Two different versions in one spec are
refused as ambiguous.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nodecert_node.parse import ParseError

_HOST_DRIVER = re.compile(r"--host-driver-version=([0-9]+(?:\.[0-9]+){1,2})")
_LIB = re.compile(r"lib(?:cuda|nvidia-ml|nvidia-ptxjitcompiler)\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)")
_KIND = re.compile(r'^\s*"?kind"?\s*:\s*"?([A-Za-z0-9.\-]+/[A-Za-z0-9.\-]+)"?', re.MULTILINE)
_NAME = re.compile(r'^\s*(?:-\s+)?name:\s*"?([^"\s]+)"?\s*$')


def spec_kind(text: str) -> str | None:
    m = _KIND.search(text)
    return m.group(1) if m else None


def driver_version(text: str) -> str | None:
    """The driver version the spec was generated for, or None when it names none."""
    found = set(_HOST_DRIVER.findall(text)) | set(_LIB.findall(text))
    if len(found) > 1:
        raise ParseError(f"the CDI spec names several driver versions: "
                         f"{', '.join(sorted(found))}")
    return next(iter(found), None)


def device_names(text: str) -> list[str]:
    """The names of the spec's devices ("0", "GPU-<uuid>", "all")."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc: Any = json.loads(stripped)
        except ValueError as exc:
            raise ParseError(f"the CDI spec is not valid JSON: {exc}") from None
        devices = doc.get("devices") if isinstance(doc, dict) else None
        if not isinstance(devices, list):
            raise ParseError("the CDI spec has no devices list")
        return [str(d.get("name")) for d in devices if isinstance(d, dict) and d.get("name")]
    names: list[str] = []
    in_devices = False
    indent = 0
    for line in text.splitlines():
        if re.match(r"^devices:\s*$", line):
            in_devices, indent = True, 0
            continue
        if in_devices and line and not line[0].isspace() and not line.startswith("-"):
            in_devices = False  # the next top-level key
        if in_devices:
            m = _NAME.match(line)
            # a device's own name sits at the list item's level, not in its edits
            lead = len(line) - len(line.lstrip(" -"))
            if m and (indent == 0 or lead <= indent):
                indent = lead
                names.append(m.group(1))
    return names


def parse_ctk_list(text: str) -> list[str]:
    """`nvidia-ctk cdi list`: the fully qualified device names it found."""
    return [line.strip() for line in text.splitlines()
            if re.match(r"^\s*[A-Za-z0-9.\-]+/[A-Za-z0-9.\-]+=\S+\s*$", line)]


_SMI_L = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")


def parse_smi_list(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -L`: index, name and UUID of each GPU (MIG lines are skipped). NVML
    that cannot start ("Failed to initialize NVML: ...") is an error, never no GPUs."""
    out = []
    for line in text.splitlines():
        if "Failed to initialize NVML" in line or "couldn't communicate with the NVIDIA " \
                "driver" in line:
            raise ParseError(f"nvidia-smi: {line.strip()}")
        m = _SMI_L.match(line.strip())
        if m:
            out.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3)})
    if not out:
        raise ParseError("nvidia-smi -L listed no GPU")
    return out


__all__ = ["device_names", "driver_version", "parse_ctk_list", "parse_smi_list", "spec_kind"]
