"""The compatibility matrix: sourced facts the stack gate reasons with.

Loaded from ``stacks/compat/matrix.yml`` and ``stacks/compat/sources.yml``.
Every row keeps the key of its source so each verdict can cite it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from nodecert.core import yamldoc
from nodecert.core.errors import UnknownNameError
from nodecert.core.paths import compat_dir
from nodecert.stack.versions import DottedVersion, DriverVersion


@dataclass(frozen=True)
class Source:
    """Where a compatibility fact comes from: a published document's title and URL."""

    key: str
    title: str
    url: str


@dataclass(frozen=True)
class CudaMinDriver:
    """The oldest driver a CUDA release runs on (NVIDIA's CUDA toolkit release notes)."""

    cuda: DottedVersion
    min_driver: DriverVersion
    source: str


@dataclass(frozen=True)
class MinorVersionCompat:
    """CUDA minor-version compatibility: every release of a major runs on this driver
    or newer, with the features of that driver."""

    cuda_major: int
    min_driver: DriverVersion
    source: str


@dataclass(frozen=True)
class ForwardCompat:
    """NVIDIA's forward-compatibility package, which lets a newer CUDA run on an older
    driver branch; data-center GPUs only."""

    package_prefix: str
    requires_datacenter_gpu: bool
    source: str


@dataclass(frozen=True)
class DriverBranch:
    """A driver branch and its support window: production or new-feature, and when it
    reaches end of life."""

    branch: str
    designation: str
    eol: dt.date | None  # last day of support; None with eol_past=True when undated
    eol_past: bool
    source: str


@dataclass(frozen=True)
class GpuModel:
    """A GPU model as the gate knows it: PCI ids, architecture, whether it sits on
    NVSwitches, and which driver modules (open or proprietary) it runs."""

    key: str
    name: str
    pci_device_ids: tuple[str, ...]
    architecture: str
    datacenter: bool
    nvswitch: bool
    open_modules: str  # required | supported | unsupported
    first_driver_open: DriverVersion | None
    first_driver_proprietary: DriverVersion | None
    practical_min_branch: str | None
    memory_gb: int
    source: str
    # A compute tray GPU of a rack-scale NVLink domain (GB200/GB300): IMEX on the host,
    # no Fabric Manager there (the NVLink switches live in the switch trays).
    imex: bool = False


@dataclass(frozen=True)
class CudnnCuda:
    """A cuDNN release range and the CUDA releases it is built for (cuDNN's support
    matrix), with the driver that range needs where the matrix names one."""

    cudnn_from: DottedVersion
    cudnn_to: DottedVersion
    cuda_from: DottedVersion
    cuda_to: DottedVersion
    min_driver: DriverVersion | None
    source: str

    def covers(self, cudnn: DottedVersion, cuda: DottedVersion) -> bool:
        c2 = cudnn.prefix(2)
        k2 = cuda.prefix(2)
        return (self.cudnn_from.prefix(2) <= c2 <= self.cudnn_to.prefix(2)
                and self.cuda_from.prefix(2) <= k2 <= self.cuda_to.prefix(2))


@dataclass(frozen=True)
class TorchBuilds:
    """The CUDA builds PyTorch publishes for one release: the stable wheels and the
    experimental ones."""

    torch: str
    stable: tuple[str, ...]
    experimental: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class TorchArchFloor:
    """The oldest GPU architecture PyTorch's wheels for a CUDA major still carry
    kernels for."""

    cuda_major: int
    min_architecture: str
    source: str


@dataclass(frozen=True)
class TensorflowBuild:
    """A TensorFlow release and the CUDA and cuDNN it was built and tested with."""

    tensorflow: str
    cuda: DottedVersion
    cudnn: DottedVersion
    source: str


@dataclass(frozen=True)
class Matrix:
    """Every compatibility fact the gate uses, each row naming its source: drivers,
    CUDA, cuDNN, the frameworks' builds and the GPU models."""

    sources: dict[str, Source]
    cuda_min_driver: tuple[CudaMinDriver, ...]
    minor_version_compat: tuple[MinorVersionCompat, ...]
    forward_compat: ForwardCompat
    driver_branches: dict[str, DriverBranch]
    architectures: tuple[str, ...]
    gpus: dict[str, GpuModel]
    cudnn_cuda: tuple[CudnnCuda, ...]
    torch_builds: dict[str, TorchBuilds]
    torch_arch_floor: tuple[TorchArchFloor, ...]
    tensorflow_builds: dict[str, TensorflowBuild]
    rule_sources: dict[str, tuple[str, ...]]
    driver_eol_warning_days: int

    def gpu(self, key: str) -> GpuModel:
        for k, model in self.gpus.items():
            if k.lower() == key.lower():
                return model
        raise UnknownNameError(
            f"unknown GPU model {key!r}",
            hint=f"use one of: {', '.join(self.gpus)} (see stacks/compat/matrix.yml)",
        )

    def arch_rank(self, architecture: str) -> int:
        return self.architectures.index(architecture)

    def cite(self, *keys: str) -> str:
        return ", ".join(keys)


def _eol(node: yamldoc.Node) -> tuple[dt.date | None, bool]:
    if node.value == "past":
        return None, True
    text = node.text()
    try:
        year, month = (int(p) for p in text.split("-"))
        first_next = dt.date(year + (month == 12), month % 12 + 1, 1)
    except ValueError as exc:
        raise node.error(f"{text!r} is not a YYYY-MM month or 'past'") from exc
    return first_next - dt.timedelta(days=1), False


def load_sources(path: Path) -> dict[str, Source]:
    root = yamldoc.load(path).mapping({"schema", "sources"})
    if root["schema"].text() != "nodecert.sources/v1":
        raise root["schema"].error("expected schema nodecert.sources/v1")
    out: dict[str, Source] = {}
    for key, node in root["sources"].items():
        f = node.mapping(set(), {"title", "url", "policy"})
        if set(f) == {"policy"}:
            out[key] = Source(key, f"nodecert policy: {f['policy'].text()}", "")
        elif set(f) == {"title", "url"}:
            out[key] = Source(key, f["title"].text(), f["url"].text())
        else:
            raise node.error(f"source {key} must be {{title, url}} or {{policy}}")
    return out


def _source(node: yamldoc.Node, sources: dict[str, Source]) -> str:
    key = node.text()
    if key not in sources:
        raise node.error(f"source {key!r} is not in stacks/compat/sources.yml",
                         hint="add the source there, with its title and URL")
    return key


def _gpus(node: yamldoc.Node, archs: tuple[str, ...], sources: dict[str, Source]
          ) -> dict[str, GpuModel]:
    gpus: dict[str, GpuModel] = {}
    for n in node.seq():
        f = n.mapping({"key", "name", "pci_device_ids", "architecture", "datacenter", "nvswitch",
                       "open_modules", "first_driver_open", "first_driver_proprietary",
                       "practical_min_branch", "memory_gb", "source"}, {"imex"})
        arch = f["architecture"].text()
        if arch not in archs:
            raise f["architecture"].error(f"{arch!r} is not listed under architectures")
        key = f["key"].text()
        gpus[key] = GpuModel(
            key=key, name=f["name"].text(),
            pci_device_ids=tuple(i.lower() for i in f["pci_device_ids"].text_list()),
            architecture=arch, datacenter=f["datacenter"].boolean(),
            nvswitch=f["nvswitch"].boolean(),
            open_modules=f["open_modules"].choice(("required", "supported", "unsupported")),
            first_driver_open=f["first_driver_open"].opt_parsed(DriverVersion.parse),
            first_driver_proprietary=f["first_driver_proprietary"].opt_parsed(
                DriverVersion.parse),
            practical_min_branch=f["practical_min_branch"].opt_text(),
            memory_gb=f["memory_gb"].integer(), source=_source(f["source"], sources),
            imex=f["imex"].boolean() if "imex" in f else False)
    return gpus


def _frameworks(root: dict[str, yamldoc.Node], archs: tuple[str, ...],
                sources: dict[str, Source]) -> tuple[dict[str, TorchBuilds],
                                                     list[TorchArchFloor],
                                                     dict[str, TensorflowBuild]]:
    """PyTorch's builds per CUDA, its architecture floors, TensorFlow's builds."""
    def src(f: dict[str, yamldoc.Node]) -> str:
        return _source(f["source"], sources)

    def dotted(node: yamldoc.Node) -> DottedVersion:
        return node.parsed(DottedVersion.parse)

    torch: dict[str, TorchBuilds] = {}
    for n in root["torch_builds"].seq():
        f = n.mapping({"torch", "stable", "experimental", "source"})
        t = f["torch"].text()
        torch[t] = TorchBuilds(t, tuple(f["stable"].text_list()),
                               tuple(f["experimental"].text_list()), src(f))

    floors = []
    for n in root["torch_cuda_min_architecture"].seq():
        f = n.mapping({"cuda_major", "min_architecture", "source"})
        arch = f["min_architecture"].text()
        if arch not in archs:
            raise f["min_architecture"].error(f"{arch!r} is not listed under architectures")
        floors.append(TorchArchFloor(f["cuda_major"].integer(), arch, src(f)))

    tf: dict[str, TensorflowBuild] = {}
    for n in root["tensorflow_builds"].seq():
        f = n.mapping({"tensorflow", "cuda", "cudnn", "source"})
        v = f["tensorflow"].text()
        tf[v] = TensorflowBuild(v, dotted(f["cuda"]), dotted(f["cudnn"]), src(f))
    return torch, floors, tf


def _drivers(root: dict[str, yamldoc.Node], sources: dict[str, Source]) -> tuple[
        list[CudaMinDriver], list[MinorVersionCompat], ForwardCompat,
        dict[str, DriverBranch]]:
    """The driver facts: each CUDA's minimum driver, minor-version and forward
    compatibility, and the driver branches with their end of life."""
    def src(f: dict[str, yamldoc.Node]) -> str:
        return _source(f["source"], sources)

    cuda_rows = []
    for n in root["cuda_min_driver"].seq():
        f = n.mapping({"cuda", "min_driver", "source"})
        cuda_rows.append(CudaMinDriver(
            f["cuda"].parsed(lambda s: DottedVersion.parse(s, min_parts=3, what="CUDA version")),
            f["min_driver"].parsed(DriverVersion.parse), src(f)))

    mvc = []
    for n in root["minor_version_compat"].seq():
        f = n.mapping({"cuda_major", "min_driver", "source"})
        mvc.append(MinorVersionCompat(f["cuda_major"].integer(),
                                      f["min_driver"].parsed(DriverVersion.parse), src(f)))

    fc = root["forward_compat"].mapping({"package_prefix", "requires_datacenter_gpu", "source"})
    forward = ForwardCompat(fc["package_prefix"].text(), fc["requires_datacenter_gpu"].boolean(),
                            src(fc))

    branches: dict[str, DriverBranch] = {}
    for n in root["driver_branches"].seq():
        f = n.mapping({"branch", "designation", "eol", "source"})
        eol, past = _eol(f["eol"])
        b = f["branch"].text()
        branches[b] = DriverBranch(b, f["designation"].text(), eol, past, src(f))
    return cuda_rows, mvc, forward, branches


def load_matrix(directory: Path | None = None) -> Matrix:
    directory = directory or compat_dir()
    sources = load_sources(directory / "sources.yml")
    root = yamldoc.load(directory / "matrix.yml").mapping({
        "schema", "cuda_min_driver", "minor_version_compat", "forward_compat",
        "driver_branches", "architectures", "gpus", "cudnn_cuda", "torch_builds",
        "torch_cuda_min_architecture", "tensorflow_builds", "rule_sources",
        "driver_eol_warning_days",
    })
    if root["schema"].text() != "nodecert.compat/v1":
        raise root["schema"].error("expected schema nodecert.compat/v1")

    def src(f: dict[str, yamldoc.Node]) -> str:
        return _source(f["source"], sources)

    cuda_rows, mvc, forward, branches = _drivers(root, sources)

    archs = tuple(root["architectures"].text_list())

    gpus = _gpus(root["gpus"], archs, sources)

    def dotted(node: yamldoc.Node) -> DottedVersion:
        return node.parsed(DottedVersion.parse)

    cudnn = []
    for n in root["cudnn_cuda"].seq():
        f = n.mapping({"cudnn_from", "cudnn_to", "cuda_from", "cuda_to", "min_driver", "source"})
        cudnn.append(CudnnCuda(dotted(f["cudnn_from"]), dotted(f["cudnn_to"]),
                               dotted(f["cuda_from"]), dotted(f["cuda_to"]),
                               f["min_driver"].opt_parsed(DriverVersion.parse), src(f)))

    torch, floors, tf = _frameworks(root, archs, sources)

    rule_sources = {}
    for rule, n in root["rule_sources"].items():
        rule_sources[rule] = tuple(_source(k, sources) for k in n.seq())

    return Matrix(
        sources=sources, cuda_min_driver=tuple(cuda_rows), minor_version_compat=tuple(mvc),
        forward_compat=forward, driver_branches=branches, architectures=archs, gpus=gpus,
        cudnn_cuda=tuple(cudnn), torch_builds=torch, torch_arch_floor=tuple(floors),
        tensorflow_builds=tf, rule_sources=rule_sources,
        driver_eol_warning_days=root["driver_eol_warning_days"].integer(),
    )


@cache
def default_matrix() -> Matrix:
    return load_matrix()
