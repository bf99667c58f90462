"""A valid stack manifest whose package strings agree with its component versions, to vary
one field at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.env import REPO


def manifest(
    *,
    name: str = "test-stack",
    driver: str = "580.173.02",
    modules: str = "open",
    cuda: str = "13.0.0",
    cudnn: str = "9.12.0.46",
    nccl: str = "2.27.7-1+cuda13.0",
    dcgm: str = "4.4.2",
    fm: str | None = "same",
    nscq: str | None = "same",
    imex: str | None = None,
    torch: str | None = "2.9.1+cu130",
    tensorflow: str | None = None,
    cuda_compat: str | None = None,
    os_names: tuple[str, ...] = ("ubuntu-24.04",),
    cudnn_cuda_major: int | None = None,
    dcgm_cuda_major: int | None = None,
    confirmed: bool = True,
) -> dict[str, Any]:
    """A valid manifest dict whose package strings agree with the component versions."""
    branch = driver.split(".", maxsplit=1)[0]
    cmaj, cmin = cuda.split(".")[:2]
    fm_v = driver if fm == "same" else fm
    nscq_v = driver if nscq == "same" else nscq
    components: dict[str, Any] = {"cuda": cuda, "cudnn": cudnn, "nccl": nccl, "dcgm": dcgm}
    pkgs: list[dict[str, Any]] = [
        {"component": "driver", "name": f"nvidia-driver-{branch}-server-open",
         "version": f"{driver}-0ubuntu1"},
        {"component": "cuda", "name": f"cuda-libraries-{cmaj}-{cmin}", "version": f"{cuda}-1"},
        {"component": "cudnn", "name": f"libcudnn9-cuda-{cudnn_cuda_major or cmaj}",
         "version": f"{cudnn}-1"},
        {"component": "nccl", "name": "libnccl2", "version": nccl},
        {"component": "dcgm", "name": f"datacenter-gpu-manager-4-cuda{dcgm_cuda_major or cmaj}",
         "version": f"1:{dcgm}-1"},
    ]
    if fm_v is not None:
        components["fabric_manager"] = fm_v
        pkgs.append({"component": "fabric_manager", "name": f"nvidia-fabricmanager-{branch}",
                     "version": f"{fm_v}-1"})
    if nscq_v is not None:
        components["nscq"] = nscq_v
        pkgs.append({"component": "nscq", "name": f"libnvidia-nscq-{branch}",
                     "version": f"{nscq_v}-1"})
    if imex is not None:
        imex_v = driver if imex == "same" else imex
        components["imex"] = imex_v
        pkgs.append({"component": "imex", "name": "nvidia-imex", "version": f"{imex_v}-1"})
    if cuda_compat is not None:
        components["cuda_compat"] = cuda_compat
        a, b = cuda_compat.split(".")[:2]
        pkgs.append({"component": "cuda_compat", "name": f"cuda-compat-{a}-{b}",
                     "version": f"{driver}-1"})
    for p in pkgs:
        p.update({"origin": "nvidia", "source": "C", "confirmed": confirmed})
    return {
        "schema": "nodecert.stack/v1",
        "name": name,
        "title": "test stack",
        "status": "supported",
        "driver": {"branch": branch, "version": driver, "kernel_modules": modules},
        "components": components,
        "framework": {"python": "3.12", "index_url": "https://download.pytorch.org/whl/x",
                      "pytorch": torch, "tensorflow": tensorflow, "source": "P1"},
        "repository": {
            "url": "https://developer.download.nvidia.com/compute/cuda/repos/{os_repo}/x86_64/",
            "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/x/3bf863cc.pub",
            "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
            "source": ["R2", "KFP"],
        },
        "artifacts": [],
        "os": {o: {"os_repo": o.replace("-", "").replace(".", ""), "packages": pkgs}
               for o in os_names},
    }


def write_manifest(directory: Path, data: dict[str, Any], text: str | None = None) -> Path:
    path = directory / f"{data['name']}.yml"
    path.write_text(text if text is not None else yaml.safe_dump(data, sort_keys=False))
    return path


def unlocked_text(stack: str) -> str:
    """The shipped manifest with its lock taken out (the framework block's lock lines)."""
    lines = (REPO / "stacks" / f"{stack}.yml").read_text().splitlines(keepends=True)
    start = lines.index("framework:\n")
    end = next(k for k in range(start + 1, len(lines)) if lines[k][:1] not in " #\n")
    keep = [ln for ln in lines[start + 1:end] if not ln.startswith(
        ("  hashes", "  extra_index_urls", "    ", "  #"))]
    return "".join(lines[:start + 1] + keep + lines[end:])
