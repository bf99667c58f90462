"""Why a container engine could not give a container its GPUs.

`docker run --gpus all`, `podman run --device nvidia.com/gpu=all` and a pod's
`nvidia-smi` fail with messages from several layers (the Docker daemon, the OCI runtime
hook, nvidia-container-cli, the CDI resolver, NVML inside the container). Each message
this module knows names one cause and its fix; the texts are the tools' own, as the NVIDIA
Container Toolkit's troubleshooting guide and the engines print them. Text it does not
know is not guessed at: `classify_engine_error` returns None for it.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

# (what matches, cause code, cause, fix) -- first match wins, most specific first.
CAUSES: tuple[tuple[str, str, str, str], ...] = (
    (r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]',
     "no-gpu-driver-registered",
     "Docker has no GPU device driver registered: the NVIDIA Container Toolkit is not "
     "installed, or Docker was not configured for it",
     "Install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure "
     "--runtime=docker` and restart Docker (the container_toolkit role does both)"),
    (r"unknown or invalid runtime name: nvidia",
     "nvidia-runtime-not-configured",
     "the engine knows no 'nvidia' runtime",
     "Run `nvidia-ctk runtime configure --runtime=docker` (or containerd/crio) and restart "
     "the engine"),
    (r"unresolvable CDI devices? (\S+)",
     "cdi-spec-missing",
     "no CDI specification names the requested device",
     "Generate the spec for the running driver: `nvidia-ctk cdi generate --output="
     "/etc/cdi/nvidia.yaml` (regenerate after every driver change)"),
    (r"load library failed: libnvidia-ml\.so\.1",
     "driver-library-missing",
     "the host has no NVIDIA driver user-space library (libnvidia-ml.so.1)",
     "Install the NVIDIA driver on the host (the driver role) and check `nvidia-smi` there"),
    (r"nvml error: driver not loaded|NVIDIA-SMI has failed because it couldn't communicate "
     r"with the NVIDIA driver",
     "driver-not-loaded",
     "the NVIDIA kernel module is not loaded on the host",
     "Load the driver (`modprobe nvidia`) or reboot after the driver install; read "
     "`dmesg | grep NVRM` for why it did not load"),
    (r"Driver/library version mismatch",
     "driver-library-mismatch",
     "the loaded kernel module and the driver's user-space library differ (the driver was "
     "upgraded without a reboot)",
     "Reboot the node (or unload and reload the nvidia modules) so both are the held "
     "version"),
    (r"unsatisfied condition: cuda\s*>=\s*(\S+?),",
     "driver-too-old-for-image",
     "the image needs a newer CUDA than the host driver supports",
     "Use an image built for the driver's CUDA version, or provision a newer driver through "
     "the stack"),
    (r"Failed to initialize NVML: Unknown Error",
     "nvml-lost-device-access",
     "NVML inside a running container lost access to the GPU device nodes (seen after "
     "`systemctl daemon-reload` when the devices were injected by the legacy runtime hook "
     "under the systemd cgroup driver)",
     "Inject the GPUs through CDI (`--device nvidia.com/gpu=all`) so device access survives "
     "a daemon-reload, and restart the container"),
)


def classify_engine_error(text: str) -> dict[str, Any] | None:
    """{"cause_code", "cause", "fix", "line": the line that said it} for the first known
    cause in the text, or None when the text names none this module knows."""
    for pattern, code, cause, fix in CAUSES:
        m = re.search(pattern, text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start:end if end >= 0 else len(text)].strip()
            detail = m.group(1) if m.groups() else None
            return {"cause_code": code, "cause": cause + (f" ({detail})" if detail else ""),
                    "fix": fix, "line": line[:300]}
    return None


def parse_engine_error(text: str) -> dict[str, Any]:
    """For triage: the classified cause of a container engine's GPU error; text that
    names no known cause is refused, never classified by a guess."""
    got = classify_engine_error(text)
    if got is None:
        raise ParseError("no GPU error this parser knows (docker/podman/nvidia-container-cli/"
                         "CDI/NVML)")
    return got


__all__ = ["CAUSES", "classify_engine_error", "parse_engine_error"]
