"""Pinned stack manifests (``stacks/*.yml``): schema, loading and consistency.

A manifest states the upstream version of each component once (``components``)
and, per supported OS, the exact apt package strings that deliver it. The loader
proves the two agree -- a package whose version does not carry the component's
version is a manifest error, not something to discover on a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nodecert.core import yamldoc
from nodecert.core.errors import ManifestError, UnknownNameError
from nodecert.core.paths import stacks_dir
from nodecert.stack.compat import Matrix, default_matrix
from nodecert.stack.versions import (
    DebianVersion,
    DottedVersion,
    DriverVersion,
    NcclVersion,
    TorchVersion,
)

SUPPORTED_OS = ("ubuntu-22.04", "ubuntu-24.04", "debian-12")
COMPONENTS = ("driver", "fabric_manager", "nscq", "imex", "cuda", "cudnn", "nccl", "dcgm",
              "cuda_compat")
REQUIRED_COMPONENTS = ("driver", "cuda", "cudnn", "nccl", "dcgm")
# What each component of a vendor's stack is, in vendor-neutral roles: what the gate
# (its rules are a vendor's), the node's GPU backend (spec gpu_vendor) and a reader of
# the stack select by. A stack names its vendor (`vendor:`, NVIDIA where it names none).
ROLES = ("driver", "runtime", "collectives", "libraries", "management daemon",
         "diagnostics")
COMPONENT_ROLES: dict[str, dict[str, str]] = {
    "nvidia": {"driver": "driver", "cuda": "runtime", "cuda_compat": "runtime",
               "nccl": "collectives", "cudnn": "libraries",
               "fabric_manager": "management daemon", "nscq": "management daemon",
               "imex": "management daemon", "dcgm": "diagnostics"},
}
DEFAULT_VENDOR = "nvidia"
# The Ansible roles that install a vendor's stack (playbooks/site.yml runs each only for
# its vendor's stacks); the other roles (platform, framework, validators) are every
# vendor's.
VENDOR_ROLES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia_repo", "nvidia_driver", "fabric_manager", "imex", "cuda_toolkit",
               "cudnn", "nccl", "dcgm", "container_toolkit"),
}
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


@dataclass(frozen=True)
class Package:
    """One pinned package of a stack: its component, the exact Debian version apt is held
    at, and whether that exact string was seen published in the repository."""

    component: str
    name: str
    version: DebianVersion
    origin: str  # nvidia | distro
    sources: tuple[str, ...]
    confirmed: bool

    @property
    def pin(self) -> str:
        return f"{self.name}={self.version}"


@dataclass(frozen=True)
class OsPins:
    """A stack's exact package versions for one OS release, and the OS repository they
    come from."""

    os: str
    os_repo: str
    packages: tuple[Package, ...]

    def for_component(self, component: str) -> tuple[Package, ...]:
        return tuple(p for p in self.packages if p.component == component)


@dataclass(frozen=True)
class Framework:
    """The stack's Python environment: its interpreter, the wheels' index, the PyTorch or
    TensorFlow release, and the digests every wheel is installed against."""

    python: str
    index_url: str
    pytorch: TorchVersion | None
    tensorflow: str | None
    source: str
    # "name==version" -> allowed sha256 digests, for every wheel of the environment (the
    # framework and each wheel it pulls in): with them, pip installs with --require-hashes
    hashes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Where the lock's digests were read (source keys).
    hashes_source: tuple[str, ...] = ()
    # Indexes the locked dependency wheels are published on besides index_url (PyPI):
    # used only with the lock, where pip refuses any wheel whose digest it does not list,
    # so which index serves a wheel cannot change what is installed.
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Repository:
    """The vendor's apt repository a stack installs from, and the signing key apt must
    trust for it (its fingerprint checked before it is installed)."""

    url: str
    key_url: str
    key_fingerprint: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Artifact:
    """A file a stack fetches outside apt, trusted only when its sha256 matches."""

    name: str
    url: str
    sha256: str
    source: str


@dataclass(frozen=True)
class Stack:
    name: str
    title: str
    status: str  # recommended | supported | legacy
    path: Path
    driver_branch: str
    driver: DriverVersion
    kernel_modules: str  # open | proprietary
    fabric_manager: DriverVersion | None
    nscq: DriverVersion | None
    cuda: DottedVersion
    cudnn: DottedVersion
    nccl: NcclVersion
    dcgm: DottedVersion
    cuda_compat: DottedVersion | None
    framework: Framework
    repository: Repository
    artifacts: tuple[Artifact, ...]
    os: dict[str, OsPins]
    # IMEX (the NVLink domain's memory export service of GB200/GB300 compute trays)
    imex: DriverVersion | None = None
    vendor: str = DEFAULT_VENDOR

    def roles(self) -> dict[str, dict[str, str]]:
        """role -> {component: version}: the stack in vendor-neutral terms."""
        out: dict[str, dict[str, str]] = {}
        for comp, version in self.components().items():
            out.setdefault(COMPONENT_ROLES[self.vendor][comp], {})[comp] = version
        return out

    def components(self) -> dict[str, str]:
        """Upstream version of every component present, for tables and JSON."""
        out = {
            "driver": str(self.driver),
            "fabric_manager": str(self.fabric_manager) if self.fabric_manager else None,
            "nscq": str(self.nscq) if self.nscq else None,
            "imex": str(self.imex) if self.imex else None,
            "cuda": str(self.cuda),
            "cudnn": str(self.cudnn),
            "nccl": str(self.nccl),
            "dcgm": str(self.dcgm),
            "cuda_compat": str(self.cuda_compat) if self.cuda_compat else None,
        }
        return {k: v for k, v in out.items() if v is not None}


def _sources(node: yamldoc.Node, matrix: Matrix) -> tuple[str, ...]:
    keys = node.text_list() if isinstance(node.value, list) else [node.text()]
    for key in keys:
        if key not in matrix.sources:
            raise node.error(f"source {key!r} is not in stacks/compat/sources.yml",
                             hint="add the source there, with its title and URL")
    return tuple(keys)


def _check_package(pkg: Package, stack_components: dict[str, str], node: yamldoc.Node) -> None:
    """The package's version (and, where names encode it, its name) must match the component."""
    want = stack_components.get(pkg.component)
    if want is None:
        raise node.error(
            f"package {pkg.name} delivers component {pkg.component!r}, which the stack's "
            "components section does not pin",
            hint=f"add components.{pkg.component} or remove the package")
    got = (f"{pkg.version.upstream}-{pkg.version.revision}" if pkg.component == "nccl"
           else pkg.version.upstream)
    if pkg.component == "cuda_compat":
        got = want  # cuda-compat carries the newer driver's version; checked by name below
    if got != want:
        raise node.error(
            f"{pkg.pin} does not deliver {pkg.component} {want} (its version says {got})",
            hint="make the package version and the components section agree")
    if pkg.component in ("cuda", "cuda_compat"):
        cuda = DottedVersion.parse(want)
        suffix = f"-{cuda.prefix(2)[0]}-{cuda.prefix(2)[1]}"
        if not pkg.name.endswith(suffix):
            raise node.error(
                f"{pkg.name} is not a CUDA {cuda.major_minor} package (name should end in "
                f"{suffix})")


def _load_os_pins(os_name: str, node: yamldoc.Node, stack_components: dict[str, str],
                  matrix: Matrix) -> OsPins:
    if os_name not in SUPPORTED_OS:
        raise node.error(f"unsupported OS {os_name!r}",
                         hint=f"use one of: {', '.join(SUPPORTED_OS)}")
    o = node.mapping({"os_repo", "packages"})
    pkgs = []
    for pn in o["packages"].seq():
        p = pn.mapping({"component", "name", "version", "origin", "source", "confirmed"})
        pkg_name = p["name"].text()
        if not _NAME_RE.match(pkg_name):
            raise p["name"].error(f"{pkg_name!r} is not a valid Debian package name")
        pkg = Package(
            component=p["component"].choice(COMPONENTS), name=pkg_name,
            version=p["version"].parsed(DebianVersion.parse),
            origin=p["origin"].choice(("nvidia", "distro")),
            sources=_sources(p["source"], matrix), confirmed=p["confirmed"].boolean())
        _check_package(pkg, stack_components, pn)
        pkgs.append(pkg)
    delivered = {p.component for p in pkgs}
    missing = [k for k in stack_components if k not in delivered]
    if missing:
        raise o["packages"].error(
            f"no package delivers component(s) {', '.join(missing)} on {os_name}")
    return OsPins(os_name, o["os_repo"].text(), tuple(pkgs))


_WHEEL_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _wheel_hashes(node: yamldoc.Node) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for pin, digests in node.items():
        if not _WHEEL_PIN.match(pin):
            raise digests.error(f"{pin!r} is not name==version",
                                hint="one entry per wheel, e.g. torch==2.9.1+cu130")
        values = [d.removeprefix("sha256:") for d in digests.text_list()]
        if not values or not all(_SHA256.match(v) for v in values):
            raise digests.error("expected a list of sha256 digests (64 lowercase hex "
                                "digits, optionally prefixed sha256:)")
        out[pin] = tuple(values)
    return out


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _check_lock(framework: Framework, fw: dict[str, yamldoc.Node]) -> None:
    """A lock holds the framework pins themselves, says where its digests were read, and
    names extra indexes only beside a lock (without one they would let any index serve
    any version of a dependency)."""
    if framework.extra_index_urls and not framework.hashes:
        raise fw["extra_index_urls"].error(
            "extra_index_urls without hashes: an unlocked install would take a dependency "
            "from whichever index offers it", hint="lock the stack (hashes:) or remove them")
    if not framework.hashes:
        return
    if not framework.hashes_source:
        raise fw["hashes"].error("a lock must say where its digests were read",
                                 hint="add hashes_source: [KEY, ...] (stacks/compat/sources.yml)")
    locked = {_norm_dist(pin.split("==", 1)[0]): pin.split("==", 1)[1]
              for pin in framework.hashes}
    pins = ([("torch", str(framework.pytorch))] if framework.pytorch is not None else []) + (
        [("tensorflow", framework.tensorflow)] if framework.tensorflow else [])
    for dist, version in pins:
        if locked.get(dist) != version:
            raise fw["hashes"].error(
                f"the lock does not hold {dist}=={version}, the framework it is for "
                f"(it has {dist}=={locked[dist]})" if dist in locked else
                f"the lock does not hold {dist}=={version}, the framework it is for",
                hint="lock the stack again (nodecert stack lock)")


def _framework(node: yamldoc.Node, matrix: Matrix) -> Framework:
    fw = node.mapping({"python", "index_url", "pytorch", "tensorflow", "source"},
                      {"hashes", "hashes_source", "extra_index_urls"})
    framework = Framework(
        python=fw["python"].text(), index_url=fw["index_url"].text(),
        pytorch=fw["pytorch"].opt_parsed(TorchVersion.parse),
        tensorflow=fw["tensorflow"].opt_text(), source=_sources(fw["source"], matrix)[0],
        hashes=_wheel_hashes(fw["hashes"]) if "hashes" in fw else {},
        hashes_source=_sources(fw["hashes_source"], matrix) if "hashes_source" in fw else (),
        extra_index_urls=tuple(fw["extra_index_urls"].text_list())
        if "extra_index_urls" in fw else ())
    if framework.pytorch is None and framework.tensorflow is None:
        raise node.error("pin at least one of pytorch or tensorflow")
    _check_lock(framework, fw)
    return framework


def _repository(node: yamldoc.Node, matrix: Matrix) -> Repository:
    r = node.mapping({"url", "key_url", "key_fingerprint", "source"})
    fpr = r["key_fingerprint"].text()
    if not _FINGERPRINT_RE.match(fpr):
        raise r["key_fingerprint"].error(
            "must be the key's full 40-hex-digit fingerprint in upper case",
            hint="a short key id can be forged; use `gpg --show-keys --with-fingerprint`")
    return Repository(r["url"].text(), r["key_url"].text(), fpr, _sources(r["source"], matrix))


def _artifact(node: yamldoc.Node, matrix: Matrix) -> Artifact:
    a = node.mapping({"name", "url", "sha256", "source"})
    digest = a["sha256"].text()
    if not _SHA256_RE.match(digest):
        raise a["sha256"].error("must be a 64-hex-digit lower-case sha256",
                                hint="every file downloaded outside apt/pip is verified")
    return Artifact(a["name"].text(), a["url"].text(), digest, _sources(a["source"], matrix)[0])


def load_stack(path: Path, matrix: Matrix | None = None) -> Stack:
    matrix = matrix or default_matrix()
    root = yamldoc.load(path)
    f = root.mapping({"schema", "name", "title", "status", "driver", "components", "framework",
                      "repository", "artifacts", "os"}, {"vendor"})
    if f["schema"].text() != "nodecert.stack/v1":
        raise f["schema"].error(f"unsupported schema {f['schema'].value!r}",
                                hint="this nodecert reads schema: nodecert.stack/v1")
    name = f["name"].text()
    if name != path.stem:
        raise f["name"].error(f"name {name!r} must equal the file name {path.stem!r}")

    d = f["driver"].mapping({"branch", "version", "kernel_modules"})
    driver = d["version"].parsed(DriverVersion.parse)
    branch = d["branch"].text()
    if str(driver.branch) != branch:
        raise d["version"].error(f"driver {driver} is not on branch R{branch}")

    comp_fields = set(COMPONENTS) - {"driver"}
    c = f["components"].mapping(set(REQUIRED_COMPONENTS) - {"driver"}, comp_fields)

    def drv(key: str) -> DriverVersion | None:
        return c[key].parsed(DriverVersion.parse) if key in c else None

    cuda = c["cuda"].parsed(lambda s: DottedVersion.parse(s, min_parts=3, what="CUDA version"))
    cudnn = c["cudnn"].parsed(lambda s: DottedVersion.parse(s, min_parts=2, what="cuDNN version"))
    nccl = c["nccl"].parsed(NcclVersion.parse)
    dcgm = c["dcgm"].parsed(lambda s: DottedVersion.parse(s, min_parts=2, what="DCGM version"))
    compat = (c["cuda_compat"].parsed(lambda s: DottedVersion.parse(s, min_parts=2))
              if "cuda_compat" in c else None)

    framework = _framework(f["framework"], matrix)
    repository = _repository(f["repository"], matrix)
    artifacts = [_artifact(n, matrix) for n in f["artifacts"].seq()]

    stack_components = {"driver": str(driver)} | {k: c[k].text() for k in c}
    os_pins = {os_name: _load_os_pins(os_name, node, stack_components, matrix)
               for os_name, node in f["os"].items()}
    if not os_pins:
        raise f["os"].error("a stack must pin packages for at least one OS")

    return Stack(
        name=name, title=f["title"].text(),
        status=f["status"].choice(("recommended", "supported", "legacy")), path=path,
        driver_branch=branch, driver=driver,
        kernel_modules=d["kernel_modules"].choice(("open", "proprietary")),
        fabric_manager=drv("fabric_manager"), nscq=drv("nscq"), imex=drv("imex"), cuda=cuda,
        cudnn=cudnn,
        nccl=nccl, dcgm=dcgm, cuda_compat=compat, framework=framework, repository=repository,
        artifacts=tuple(artifacts), os=os_pins,
        vendor=f["vendor"].choice(tuple(COMPONENT_ROLES)) if "vendor" in f else DEFAULT_VENDOR)


def stack_paths(directory: Path | None = None) -> list[Path]:
    directory = directory or stacks_dir()
    return sorted(directory.glob("*.yml"))


def list_stacks(directory: Path | None = None, matrix: Matrix | None = None) -> list[Stack]:
    return [load_stack(p, matrix) for p in stack_paths(directory)]


def find_stack(name: str, directory: Path | None = None, matrix: Matrix | None = None) -> Stack:
    """A stack by name, or by path to a manifest file."""
    candidate = Path(name)
    if candidate.suffix in (".yml", ".yaml") and candidate.exists():
        return load_stack(candidate, matrix)
    for path in stack_paths(directory):
        if path.stem == name:
            return load_stack(path, matrix)
    known = ", ".join(p.stem for p in stack_paths(directory)) or "(none)"
    raise UnknownNameError(f"no stack named {name!r}",
                           hint=f"known stacks: {known}; run `nodecert stack list`")


__all__ = ["COMPONENT_ROLES", "DEFAULT_VENDOR", "ROLES", "SUPPORTED_OS", "ManifestError", "Stack",
           "find_stack", "list_stacks", "load_stack"]
