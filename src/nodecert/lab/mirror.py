"""The lab's local apt mirror: a flat repository served to every lab host.

It holds (a) every package the shipped stacks pin, under its real name and
exact version, whose payload is the simulated hardware toolset (the driver
package brings `nvidia-smi`, DCGM brings `dcgmi`, Fabric Manager its service,
...), plus the simulated benchmark tools (nccl-tests, nvbandwidth, gpu-burn);
and (b) real Debian packages the validators need (fio, python3-venv, ...), fetched
with their dependencies from this machine's own Debian mirror. It is laid out
exactly like an integrator's air-gapped mirror: a directory with Packages and
Release, usable as `deb [trusted=yes] file:/path ./` or served over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import wheelhouse
from nodecert.lab.config import LabConfig
from nodecert.lab.image import build_image
from nodecert.lab.rootfs import debian_mirror
from nodecert.lab.wheelhouse import build_wheelhouse
from nodecert.stack.manifest import Package, list_stacks

# Never pciutils: real lspci in a host would read the real machine's sysfs.
# python3-venv (+ python3-packaging for Ansible's pip module): the framework role
# builds its virtual environment on the node.
REAL_DEBIAN_PACKAGES = ("fio", "python3-venv", "python3-packaging",
                        # the cluster lab's NFS server and client (lab/cluster.py)
                        "nfs-ganesha", "nfs-ganesha-vfs", "rpcbind", "libnfs13",
                        "python3-fusepy",
                        # the real InfiniBand diagnostics and ibsim's umad2sim preload: a
                        # cluster lab's fabric is discovered by Debian's own ibnetdiscover
                        # and iblinkinfo (lab/ibfabric.py); the simulated infiniband-diags
                        # package below carries those two binaries
                        "infiniband-diags", "libumad2sim0",
                        # a cluster lab's Ethernet hosts hear the lab's switches with
                        # Debian's lldpd (lab/ethfabric.py)
                        "lldpd")
# Debian's infiniband-diags is never served as itself: its fabric tools ride in the lab's
# package of that name, beside the simulated HCA tools (ibstat, ibstatus, perfquery).
REAL_IB_TOOLS = ("ibnetdiscover", "iblinkinfo")
IB_TOOL_DEPENDS = "libibnetdisc5, libibmad5, libibumad3, libumad2sim0"
SIM_TOOL_PACKAGES = {
    # name: (version, tools it provides). Versions say they are lab builds.
    "nccl-tests": ("2.17.8-1+nodecertlab", ("all_reduce_perf", "all_gather_perf",
                                             "alltoall_perf")),
    "nvbandwidth": ("0.10.0-1+nodecertlab", ("nvbandwidth",)),
    "gpu-burn": ("1.1-1+nodecertlab", ("gpu_burn",)),
    # The RDMA diagnostics (a real node has Debian's infiniband-diags): the simulated
    # HCAs of the host's profile.
    "infiniband-diags": ("44.0-2+nodecertlab", ("ibstat", "ibstatus", "perfquery")),
    # perftest's RDMA bandwidth test between two hosts' simulated HCAs.
    "perftest": ("4.5+0.17-1+nodecertlab", ("ib_write_bw",)),
    # NVIDIA's mlnx-tools: the RoCE GID table and port QoS.
    "mlnx-tools": ("25.01-0.2501+nodecertlab", ("show_gids", "mlnx_qos")),
    # The NVIDIA Container Toolkit at the version the container_toolkit role pins.
    "nvidia-container-toolkit-base": ("1.17.8-1", ("nvidia-ctk", "nvidia-cdi-hook")),
    "nvidia-container-toolkit": ("1.17.8-1", ()),
    "libnvidia-container-tools": ("1.17.8-1", ()),
    "libnvidia-container1": ("1.17.8-1", ()),
}
# component -> tools its package provides (the rest carry only their marker).
COMPONENT_TOOLS = {"driver": ("nvidia-smi",), "dcgm": ("dcgmi",), "imex": ("nvidia-imex-ctl",)}
SIM_RECIPE = "sim-packages-v13-ibsim"

_PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon (SIMULATED, nodecert lab)
Wants=syslog.target

[Service]
Type=simple
ExecStart=/usr/bin/nvidia-persistenced --no-fork
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

_PERSISTENCED_BIN = """#!/usr/bin/python3
import signal, sys
print("nvidia-persistenced (SIMULATED) started", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
"""



def _forking_unit(description: str, exec_start: str) -> str:
    return (f"[Unit]\nDescription={description} (SIMULATED, nodecert lab)\n"
            "After=network-online.target\n\n[Service]\nType=forking\n"
            f"ExecStart={exec_start}\nRestart=no\n\n[Install]\nWantedBy=multi-user.target\n")


_FM_UNIT = _forking_unit("NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager")
_IMEX_UNIT = _forking_unit("NVIDIA IMEX service",
                           "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg")
_IMEX_CONFIG = """# IMEX configuration (SIMULATED package of a nodecert lab mirror)
IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
"""

# Like the real Fabric Manager and IMEX daemons: refuse to start at another version than
# the driver's (IMEX also without a node list), then daemonize (the units are
# Type=forking, so `systemctl start` reports a refused start synchronously).
_DAEMON_BIN = """#!/usr/bin/python3
import json, glob, os, signal, sys
mine = "{version}"
drv = None
for p in glob.glob("/usr/share/nodecert-lab/installed/*.json"):
    d = json.load(open(p))
    if d["component"] == "driver":
        drv = d["version"].split(":", 1)[-1].rsplit("-", 1)[0]
if drv != mine:
    print(f"{mismatch}; aborting (SIMULATED)", flush=True)
    sys.exit(1)
{checks}print(f"{started} (SIMULATED)", flush=True)
if os.fork():
    sys.exit(0)
os.setsid()
{forked}signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
"""


def _daemon_bin(kind: str, version: str) -> str:
    if kind == "fabric_manager":
        return _DAEMON_BIN.format(
            version=version, checks="", forked="",
            mismatch="fabric manager version {mine} is incompatible with the NVIDIA driver "
                     "version {drv}",
            started="Fabric Manager {mine} started: all NVSwitches configured")
    return _DAEMON_BIN.format(
        version=version, mismatch="IMEX {mine} does not match the NVIDIA driver {drv}",
        started="IMEX {mine} started",
        checks=('nodes = "/etc/nvidia-imex/nodes_config.cfg"\n'
                "if not os.path.exists(nodes) or not open(nodes).read().split():\n"
                '    print(f"IMEX: no nodes in {nodes}; exiting (SIMULATED)", flush=True)\n'
                "    sys.exit(1)\n"),
        # the lab's nvidia-imex-ctl answers while this daemon runs
        forked=('os.makedirs("/run/nodecert-lab", exist_ok=True)\n'
                'open("/run/nodecert-lab/imex.pid", "w").write(f"{os.getpid()}\\n")\n'))


def _wrapper(tool: str) -> str:
    return (f"#!/bin/sh\n# SIMULATED {tool} of a nodecert lab host\n"
            f'exec /usr/bin/python3 /usr/lib/nodecert-lab/simhw.py {tool} "$@"\n')


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _build_deb(out: Path, name: str, version: str, description: str,
               fill: Callable[[Path], None], *, exclusive: str | None = None,
               depends: str | None = None) -> Path:
    with tempfile.TemporaryDirectory(prefix="nodecert-deb-") as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        # Packages that ship the same tools (two driver branches, two DCGM builds)
        # exclude each other through a virtual package, as the real ones do.
        relations = (f"Provides: {exclusive}\nConflicts: {exclusive}\nReplaces: {exclusive}\n"
                     if exclusive else "")
        relations += f"Depends: {depends}\n" if depends else ""
        (root / "DEBIAN/control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n{relations}"
            "Maintainer: nodecert lab <lab@nodecert.invalid>\nSection: non-free/misc\n"
            f"Priority: optional\nDescription: {description}\n"
            " SIMULATED package of a nodecert lab mirror: same name and version as the\n"
            " real one, payload is the lab's simulated hardware toolset.\n")
        fill(root)
        deb = out / f"{name}_{version.split(':', 1)[-1]}_amd64.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            timeout=120)
        return deb


def _stack_package(out: Path, pkg: Package) -> Path:
    version = str(pkg.version)

    def fill(root: Path) -> None:
        _write(root / f"usr/share/nodecert-lab/installed/{pkg.name}.json",
               json.dumps({"package": pkg.name, "version": version,
                           "component": pkg.component, "simulated": True}) + "\n")
        for tool in COMPONENT_TOOLS.get(pkg.component, ()):
            _write(root / f"usr/bin/{tool}", _wrapper(tool), 0o755)
        if pkg.component == "driver":
            _write(root / "usr/bin/nvidia-persistenced", _PERSISTENCED_BIN, 0o755)
            _write(root / "lib/systemd/system/nvidia-persistenced.service", _PERSISTENCED_UNIT)
        if pkg.component == "fabric_manager":
            fm_version = version.split(":", 1)[-1].rsplit("-", 1)[0]
            _write(root / "usr/bin/nv-fabricmanager", _daemon_bin(pkg.component, fm_version),
                   0o755)
            _write(root / "lib/systemd/system/nvidia-fabricmanager.service", _FM_UNIT)
        if pkg.component == "imex":
            imex_version = version.split(":", 1)[-1].rsplit("-", 1)[0]
            _write(root / "usr/bin/nvidia-imex", _daemon_bin(pkg.component, imex_version),
                   0o755)
            _write(root / "lib/systemd/system/nvidia-imex.service", _IMEX_UNIT)
            _write(root / "etc/nvidia-imex/config.cfg", _IMEX_CONFIG)

    exclusive = (f"nodecert-lab-{pkg.component.replace('_', '-')}"
                 if pkg.component in ("driver", "dcgm", "fabric_manager", "imex") else None)
    return _build_deb(out, pkg.name, version, f"{pkg.name} ({pkg.component}) for nodecert lab",
                      fill, exclusive=exclusive)


_IB_WRAPPER = """#!/bin/sh
# {tool} of a nodecert lab host: Debian's own binary (infiniband-diags), attached through
# ibsim's umad2sim preload to the lab's InfiniBand fabric simulator. SIMULATED FABRIC.
env=/etc/nodecert-lab/ibfabric.env
if [ ! -r "$env" ]; then
  echo "{tool}: this lab host has no InfiniBand fabric (no simulated fabric)" >&2
  exit 1
fi
. "$env"
if [ -z "${{SIM_HOST:-}}" ]; then
  echo "{tool}: no port of this host is cabled to the fabric" >&2
  exit 1
fi
export SIM_HOST IBSIM_SERVER_NAME IBSIM_SERVER_PORT
# umad2sim lays its stand-in sysfs under the working directory (and removes it)
mkdir -p -m 0700 /run/nodecert-lab/umad2sim && cd /run/nodecert-lab/umad2sim || exit 1
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
exec /usr/lib/nodecert-lab/infiniband-diags/{tool} "$@"
"""


def _real_ib_tools(root: Path, real_deb: Path) -> None:
    """Debian's ibnetdiscover and iblinkinfo, byte for byte, each behind its wrapper."""
    with tempfile.TemporaryDirectory(prefix="nodecert-ibdiags-") as tmp:
        run(["dpkg-deb", "-x", str(real_deb), tmp], timeout=120)
        for tool in REAL_IB_TOOLS:
            dest = root / "usr/lib/nodecert-lab/infiniband-diags" / tool
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(tmp) / "usr/sbin" / tool, dest)
            _write(root / f"usr/sbin/{tool}", _IB_WRAPPER.format(tool=tool), 0o755)


def _tool_package(out: Path, name: str, version: str, tools: tuple[str, ...],
                  real_ib: Path | None = None) -> Path:
    def fill(root: Path) -> None:
        for tool in tools:
            _write(root / f"usr/bin/{tool}", _wrapper(tool), 0o755)
        if real_ib is not None:
            _real_ib_tools(root, real_ib)
    return _build_deb(out, name, version, f"{name} for nodecert lab", fill,
                      depends=IB_TOOL_DEPENDS if real_ib is not None else None)


def stack_packages() -> list[Package]:
    """Every distinct (name, version) any shipped stack pins, on any OS."""
    seen: dict[tuple[str, str], Package] = {}
    for stack in list_stacks():
        for pins in stack.os.values():
            for p in pins.packages:
                seen.setdefault((p.name, str(p.version)), p)
    return [seen[k] for k in sorted(seen)]


def _sim_key(pkgs: list[Package]) -> str:
    text = SIM_RECIPE + "".join(f"{p.name}={p.version}:{p.component}\n" for p in pkgs)
    text += json.dumps(SIM_TOOL_PACKAGES, sort_keys=True)
    # The simulated framework wheels' recipe: a changed wheel makes a new mirror version.
    text += Path(wheelhouse.__file__).read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fetch_debian(cfg: LabConfig, dest: Path, packages: tuple[str, ...]) -> None:
    """Download real Debian packages missing from the base, with dependencies."""
    work = Path(tempfile.mkdtemp(prefix="nodecert-fetch-", dir=cfg.root))
    root = work / "root"
    mounted: list[Path] = []
    try:
        for d in ("upper", "work", "root"):
            (work / d).mkdir()
        run(["mount", "-t", "overlay", f"{cfg.prefix}-fetch", "-o",
             f"lowerdir={cfg.base},upperdir={work / 'upper'},workdir={work / 'work'}",
             str(root)], timeout=30)
        mounted.append(root)
        mirror = debian_mirror()
        (root / "etc/apt/sources.list").write_text(
            f"deb {mirror} {cfg.suite} main\ndeb {mirror} {cfg.suite}-updates main\n")
        (root / "etc/resolv.conf").write_text(Path("/etc/resolv.conf").read_text())
        run(["mount", "-t", "proc", "proc", str(root / "proc")], timeout=30)
        mounted.append(root / "proc")
        run(["chroot", str(root), "apt-get", "update", "-qq"], timeout=600)
        run(["chroot", str(root), "apt-get", "install", "-y", "-qq", "--download-only",
             "--no-install-recommends", *packages], timeout=900)
        dest.mkdir(parents=True, exist_ok=True)
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            shutil.copy2(deb, dest / deb.name)
    finally:
        for m in reversed(mounted):
            run(["umount", str(m)], timeout=60, check=False)
        shutil.rmtree(work, ignore_errors=True)


def _real_deb(debs: Path, name: str) -> Path:
    found = sorted(debs.glob(f"{name}_*.deb"))
    if not found:
        raise NodecertError(f"Debian's {name} is missing from the lab's fetched packages "
                            f"({debs})", hint="remove that directory; the next `lab up` "
                                              "fetches it again")
    return found[-1]


def _referenced_mirrors(cfg: LabConfig) -> set[Path]:
    """Mirror versions that some lab sharing this root still has bind-mounted."""
    used = set()
    for state in cfg.root.glob("state*/lab.json"):
        try:
            mirror = json.loads(state.read_text()).get("mirror")
        except (OSError, ValueError):
            continue
        if mirror:
            used.add(Path(mirror))
    return used


def build_mirror(cfg: LabConfig, *, log: Callable[[str], None] = print) -> Path:
    """The current mirror version, built if needed.

    Mirrors are content-addressed (`mirror/<key>/`): a running lab keeps the
    version it bind-mounted, and a rebuild never deletes a version a lab still uses.
    """
    pkgs = stack_packages()
    want_real = " ".join(REAL_DEBIAN_PACKAGES)
    key = hashlib.sha256(f"{_sim_key(pkgs)} {want_real}".encode()).hexdigest()[:16]
    target = cfg.mirror / key
    if (target / ".nodecert-lab-mirror").is_file():
        return target
    debs = cfg.cache / "debian-debs"
    debs_stamp = debs / ".packages"
    if not (debs_stamp.is_file() and debs_stamp.read_text().strip() == want_real):
        log(f"fetching real Debian packages into the lab mirror: {want_real} ...")
        shutil.rmtree(debs, ignore_errors=True)
        _fetch_debian(cfg, debs, REAL_DEBIAN_PACKAGES)
        debs_stamp.write_text(want_real + "\n")
    cfg.mirror.mkdir(parents=True, exist_ok=True)
    tmp = cfg.mirror / f".{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    # Two flat repositories, as a real server sees them: NVIDIA's (the stacks' GPU
    # packages and GPU tools) and the distribution's archive (real Debian debs).
    nvidia, distro = tmp / "nvidia", tmp / "debian"
    nvidia.mkdir(parents=True)
    distro.mkdir()
    log(f"building {len(pkgs)} simulated NVIDIA packages for the lab mirror ...")
    for p in pkgs:
        _stack_package(nvidia, p)
    real_ib = _real_deb(debs, "infiniband-diags")
    for name, (version, tools) in SIM_TOOL_PACKAGES.items():
        _tool_package(nvidia, name, version, tools,
                      real_ib if name == "infiniband-diags" else None)
    for deb in debs.glob("*.deb"):
        if deb != real_ib:
            shutil.copy2(deb, distro / deb.name)
    for repo, label in ((nvidia, "nodecert-lab-nvidia"), (distro, "nodecert-lab-debian")):
        packages = run(["apt-ftparchive", "packages", "."], timeout=300, cwd=repo).stdout
        (repo / "Packages").write_text(packages)
        release = run(["apt-ftparchive", "-o", f"APT::FTPArchive::Release::Origin={label}",
                       "-o", f"APT::FTPArchive::Release::Label={label}",
                       "-o", "APT::FTPArchive::Release::Suite=lab", "release", "."],
                      timeout=300, cwd=repo).stdout
        (repo / "Release").write_text(release)
    build_wheelhouse(tmp)
    log("building the lab's container image archive from the base ...")
    build_image(cfg.base, tmp)
    (tmp / ".nodecert-lab-mirror").write_text(f"{key} {want_real}\n")
    tmp.rename(target)
    prune_mirrors(cfg, target)
    return target


def prune_mirrors(cfg: LabConfig, current: Path) -> list[Path]:
    """Delete mirror versions that neither are current nor are used by a lab."""
    keep = _referenced_mirrors(cfg) | {current}
    removed = []
    for old in sorted(cfg.mirror.iterdir()):
        if old in keep or old.name.startswith("."):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:  # a file of the older, unversioned layout
            old.unlink()
        removed.append(old)
    return removed
